#!/usr/bin/env bash
# cachebuild under failing writes, syncs, preallocations and renames, and on
# a disk that is really full. The promise (include/dlcache/build.h): a build
# either succeeds with a store that verifies, or fails with a message that
# says what failed (the disk is full, the write or sync that failed), leaves
# nothing under the final name and no temporary file, and an older store of
# that name stays byte for byte what it was.
#
# Faults come from tests/lib/faultinject.c (LD_PRELOAD): for each call
# family, the run is first counted, then failed at its first, middle and
# last call. The full disk is a small tmpfs mounted by the test (skipped with
# a note where mounting is not permitted).
set -euo pipefail
: "${DLC_BIN:?DLC_BIN must name the bin directory of the build}"
: "${DLC_LIB:?DLC_LIB must name the lib directory of the build}"
FI=$DLC_LIB/libdlc_faultinject.so
for t in cachebuild cacheinfo mkdemo; do
    [ -x "$DLC_BIN/$t" ] || { echo "SKIP: $DLC_BIN/$t is not built" >&2; exit 77; }
done
[ -f "$FI" ] || { echo "SKIP: $FI is not built" >&2; exit 77; }
tmp=$(mktemp -d)
mnt=
cleanup() {
    if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }

"$DLC_BIN/mkdemo" "$tmp/demo" --count 24 --classes 3 >/dev/null
src=$tmp/demo/train
out=$tmp/out
mkdir -p "$out"
# The older store that every failed build must leave alone: another size,
# so that a store built over it would differ.
"$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 24 --threads 2 >/dev/null 2>&1
old_sum=$(sha256sum <"$out/s.dlc")

# check_after RC ERRFILE WHAT: the promise after one faulted build.
check_after() {
    local rc=$1 err=$2 what=$3
    if ls -a "$out" | grep -q '\.tmp-'; then fail "$what: a temporary file was left: $(ls -a "$out")"; fi
    if [ "$rc" = 0 ]; then
        # The fault hit a call whose failure does not matter (a hole punch
        # of the trimmed tail): the new store must then be whole.
        "$DLC_BIN/cacheinfo" "$out/s.dlc" --verify >/dev/null 2>&1 ||
            fail "$what: the build succeeded but its store does not verify"
        "$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 24 --threads 2 --force >/dev/null 2>&1
        old_sum=$(sha256sum <"$out/s.dlc")
        return 0
    fi
    [ "$rc" = 1 ] || fail "$what: exit $rc (a crash?): $(cat "$err")"
    grep -qE "No space left on device|disk full|Input/output error" "$err" ||
        fail "$what: the error does not say what failed: $(cat "$err")"
    grep -q "s.dlc" "$err" || fail "$what: the error does not name the file: $(cat "$err")"
    [ "$(sha256sum <"$out/s.dlc")" = "$old_sum" ] || fail "$what: the older store changed"
    "$DLC_BIN/cacheinfo" "$out/s.dlc" --verify >/dev/null 2>&1 ||
        fail "$what: the older store no longer verifies"
}

faults=0
errno_i=0
for calls in pwrite write fsync fdatasync fallocate rename; do
    # Count the calls of this family on files of the output folder.
    rm -f "$tmp/count.log"
    DLC_FAULT_CALLS=$calls DLC_FAULT_PATH="$out/" DLC_FAULT_AT=0 DLC_FAULT_LOG="$tmp/count.log" \
        LD_PRELOAD=$FI "$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 32 --threads 2 \
        --force >/dev/null 2>&1 || fail "$calls: the counting run failed"
    n=$(sed -n 's/^matched //p' "$tmp/count.log" | tail -1)
    # That run replaced the store: make the older one again.
    "$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 24 --threads 2 --force >/dev/null 2>&1
    old_sum=$(sha256sum <"$out/s.dlc")
    if [ "${n:-0}" = 0 ]; then
        note "$calls: no call on the output folder; nothing to fail"
        continue
    fi
    for at in $(printf '%s\n' 1 $(((n + 1) / 2)) "$n" | sort -un); do
        errs=(ENOSPC EIO)
        e=${errs[$((errno_i++ % 2))]}
        for sticky in 0 1; do
            rm -f "$tmp/fault.log"
            set +e
            DLC_FAULT_CALLS=$calls DLC_FAULT_PATH="$out/" DLC_FAULT_AT=$at DLC_FAULT_STICKY=$sticky \
                DLC_FAULT_ERRNO=$e DLC_FAULT_LOG="$tmp/fault.log" LD_PRELOAD=$FI \
                "$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 32 --threads 2 --force \
                >/dev/null 2>"$tmp/err"
            rc=$?
            set -e
            grep -q "^fault " "$tmp/fault.log" || fail "$calls at $at: no fault was injected"
            check_after "$rc" "$tmp/err" "$calls call $at of $n ($e, sticky $sticky)"
            note "$calls call $at of $n ($e, sticky $sticky): exit $rc: $(tail -1 "$tmp/err")"
            faults=$((faults + 1))
        done
    done
done

note "the same with no older store: nothing under the final name"
rm -f "$out/s.dlc"
set +e
DLC_FAULT_CALLS=fsync DLC_FAULT_PATH="$out/" DLC_FAULT_AT=1 LD_PRELOAD=$FI \
    "$DLC_BIN/cachebuild" "$src" -o "$out/s.dlc" --size 32 --threads 2 >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "no older store: exit $rc"
[ ! -e "$out/s.dlc" ] || fail "a store under the final name after a failed sync"
if ls -a "$out" | grep -q '\.tmp-'; then fail "a temporary file was left"; fi

note "a disk that is really full (tmpfs)"
mnt=$tmp/small
mkdir -p "$mnt"
if mount -t tmpfs -o size=2m tmpfs "$mnt" 2>/dev/null; then
    "$DLC_BIN/cachebuild" "$src" -o "$mnt/s.dlc" --size 16 --threads 2 >/dev/null 2>&1 ||
        fail "a 50 KB store does not fit in 2 MiB"
    small_sum=$(sha256sum <"$mnt/s.dlc")
    # 1.2 MB and 2.6 MB of pixels: the first fails the writer's estimate
    # plus its slack, the second the disk itself.
    for size in 128 192; do
        set +e
        "$DLC_BIN/cachebuild" "$src" -o "$mnt/s.dlc" --size $size --threads 2 --force \
            >/dev/null 2>"$tmp/err"
        rc=$?
        set -e
        [ "$rc" = 1 ] || fail "full disk (size $size): exit $rc: $(cat "$tmp/err")"
        grep -qE "disk full|No space left on device" "$tmp/err" ||
            fail "full disk (size $size): the error does not say so: $(cat "$tmp/err")"
        [ "$(sha256sum <"$mnt/s.dlc")" = "$small_sum" ] || fail "full disk: the older store changed"
        if ls -a "$mnt" | grep -q '\.tmp-'; then fail "full disk: a temporary file was left"; fi
        note "full disk (size $size): $(tail -1 "$tmp/err")"
    done
    # No older store and a disk that another file has nearly filled.
    rm -f "$mnt/s.dlc"
    head -c 1800k /dev/zero >"$mnt/filler"
    set +e
    "$DLC_BIN/cachebuild" "$src" -o "$mnt/t.dlc" --size 32 --threads 2 >/dev/null 2>"$tmp/err"
    rc=$?
    set -e
    [ "$rc" = 1 ] || fail "nearly full disk: exit $rc"
    grep -qE "disk full|No space left on device" "$tmp/err" || fail "nearly full: $(cat "$tmp/err")"
    [ ! -e "$mnt/t.dlc" ] || fail "nearly full disk: a store under the final name"
    if ls -a "$mnt" | grep -q '\.tmp-'; then fail "nearly full disk: a temporary file was left"; fi
    note "nearly full disk: $(tail -1 "$tmp/err")"
    # The same disk filled by a part that a killed build left (its PID is gone): the rerun of
    # that part removes it before it judges the free space, and fits.
    rm -f "$mnt/filler"
    sh -c 'exit 0' &
    dead=$!
    wait "$dead"
    mkdir -p "$mnt/set"
    head -c 1800k /dev/zero >"$mnt/set/part-00000-of-00002.dlc.tmp-$dead"
    "$DLC_BIN/cachebuild" "$src" -o "$mnt/set" --part 0/2 --size 32 --threads 2 >/dev/null \
        2>"$tmp/err" || fail "a dead part's temporary file filling the disk: $(cat "$tmp/err")"
    [ ! -e "$mnt/set/part-00000-of-00002.dlc.tmp-$dead" ] || fail "the dead part's file is still there"
    [ -e "$mnt/set/part-00000-of-00002.dlc" ] || fail "the part was not written"
    note "a dead part's temporary file filling the disk: removed, and the part rebuilt"
    umount "$mnt"
    mnt=
else
    note "SKIP full-disk case: mounting a tmpfs is not permitted here"
fi
echo "fault_build: ok ($faults injected faults)"

#!/usr/bin/env bash
# cachewarm under failing writes, syncs, preallocations and renames, and on a
# disk that is really full, with recognizable secrets in the environment and
# the URL. The promise (include/dlcache/warm.h): a download either publishes a
# store that verifies, or fails with a message that names the file and what
# failed; nothing half-copied carries the destination's name; an older file of
# that name stays byte for byte what it was; a rerun without the fault
# completes; and no secret (AWS secret key, session token, GCS bearer token,
# the signature of a pre-signed URL) appears in any output, report, log or
# file beside the destination.
#
# The server is the project's own Python object server (tests/lib/
# gcsserver.py, stdlib only), so this test needs no node. Faults come from
# tests/lib/faultinject.c (LD_PRELOAD); the full disk is a small tmpfs
# (skipped with a note where mounting is not permitted).
set -euo pipefail
: "${DLC_BIN:?DLC_BIN must name the bin directory of the build}"
: "${DLC_LIB:?DLC_LIB must name the lib directory of the build}"
: "${DLC_SRC:?DLC_SRC must name the source tree}"
PY=${PY:-/usr/bin/python3}
FI=$DLC_LIB/libdlc_faultinject.so
for t in cachewarm cachebuild cacheinfo mkdemo; do
    [ -x "$DLC_BIN/$t" ] || { echo "SKIP: $DLC_BIN/$t is not built" >&2; exit 77; }
done
[ -f "$FI" ] || { echo "SKIP: $FI is not built" >&2; exit 77; }
tmp=$(mktemp -d)
mnt=
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export NO_PROXY=127.0.0.1,localhost

# Secrets that must never be shown. The AWS ones are not used by a gs://
# download, which is the point: nothing may print them either.
TOKEN=ya29.BearerMustNotLeak4242
SIG=SignatureMustNotLeak9191
export AWS_ACCESS_KEY_ID=AKIAKEYIDMUSTNOTLEAK AWS_SECRET_ACCESS_KEY=SecretKeyMustNotLeak7373
export AWS_SESSION_TOKEN=SessionTokenMustNotLeak5151
export GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN

root=$tmp/root
mkdir -p "$root/bkt" "$root/files"
"$DLC_BIN/mkdemo" "$tmp/demo" --count 40 --classes 4 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$root/bkt/new.dlc" --size 96 >/dev/null 2>&1
cp "$root/bkt/new.dlc" "$root/files/new.dlc"
new_sum=$(sha256sum <"$root/bkt/new.dlc")
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/old.dlc" --size 16 >/dev/null 2>&1
"$PY" "$DLC_SRC/tests/lib/gcsserver.py" --root "$root" --port-file "$tmp/port" \
    --token "$TOKEN" --sig "$SIG" 2>"$tmp/server.log" &
pids+=("$!")
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || fail "the object server did not start"
port=$(cat "$tmp/port")
export DLCACHE_GCS_ENDPOINT=http://127.0.0.1:$port
gs_url=gs://bkt/new.dlc
signed_url="http://127.0.0.1:$port/files/new.dlc?sig=$SIG&X-Amz-Credential=$AWS_ACCESS_KEY_ID"

out=$tmp/out
logs=$tmp/logs
mkdir -p "$out" "$logs"
dest=$out/train.dlc
run=0

# warm URL [env...]: one cachewarm run; stdout, stderr and the JSON report
# land in $logs. Sets rc. --force: the older file at DEST is a copy reset_dest
# put there, not a download of cachewarm's, which it would otherwise refuse.
warm() {
    local url=$1
    shift
    run=$((run + 1))
    set +e
    env "$@" "$DLC_BIN/cachewarm" "$url" -o "$dest" --chunk-size 64K --connections 4 \
        --retries 2 --timeout 10 --force --json >"$logs/$run.json" 2>"$logs/$run.err"
    rc=$?
    set -e
}

reset_dest() {
    rm -f "$out"/*
    cp "$tmp/old.dlc" "$dest"
    old_sum=$(sha256sum <"$dest")
}

# check_failed WHAT: the promise after a failed run.
check_failed() {
    local what=$1 err=$logs/$run.err
    [ "$rc" = 1 ] || fail "$what: exit $rc (a crash?): $(cat "$err")"
    grep -qE "No space left on device|Input/output error|disk full" "$err" ||
        fail "$what: the error does not say what failed: $(cat "$err")"
    grep -q "$out/" "$err" || fail "$what: the error does not name the file: $(cat "$err")"
    # The destination is the older file or, when the fault struck after the
    # rename (the sidecar, the directory sync), the whole new one: never a
    # mixture. The error then still says that the call did not finish.
    local now
    now=$(sha256sum <"$dest")
    if [ "$now" = "$new_sum" ]; then
        after_publish=$((after_publish + 1))
    elif [ "$now" != "$old_sum" ]; then
        fail "$what: the destination is neither the older file nor the new one"
    fi
}
after_publish=0

note "a clean download through each URL form"
reset_dest
rm -f "$dest"
warm "$gs_url"
[ "$rc" = 0 ] || fail "gs:// download: $(cat "$logs/$run.err")"
cmp "$dest" "$root/bkt/new.dlc" || fail "gs:// download differs"
rm -f "$out"/*
warm "$signed_url"
[ "$rc" = 0 ] || fail "pre-signed download: $(cat "$logs/$run.err")"
grep -q '?REDACTED' "$logs/$run.json" || fail "the report does not show the URL redacted"

faults=0
errno_i=0
for calls in pwrite fdatasync fsync fallocate rename write; do
    reset_dest
    rm -f "$tmp/count.log"
    warm "$gs_url" DLC_FAULT_CALLS=$calls DLC_FAULT_PATH="$out/" DLC_FAULT_AT=0 \
        DLC_FAULT_LOG="$tmp/count.log" LD_PRELOAD="$FI"
    [ "$rc" = 0 ] || fail "$calls: the counting run failed: $(cat "$logs/$run.err")"
    n=$(sed -n 's/^matched //p' "$tmp/count.log" | tail -1)
    if [ "${n:-0}" = 0 ]; then
        note "$calls: no call on the destination folder; nothing to fail"
        continue
    fi
    for at in $(printf '%s\n' 1 $(((n + 1) / 2)) "$n" | sort -un); do
        errs=(ENOSPC EIO)
        e=${errs[$((errno_i++ % 2))]}
        reset_dest
        rm -f "$tmp/fault.log"
        warm "$gs_url" DLC_FAULT_CALLS=$calls DLC_FAULT_PATH="$out/" DLC_FAULT_AT=$at \
            DLC_FAULT_STICKY=1 DLC_FAULT_ERRNO=$e DLC_FAULT_LOG="$tmp/fault.log" LD_PRELOAD="$FI"
        what="$calls call $at of $n ($e)"
        if ! grep -q "^fault " "$tmp/fault.log"; then
            # How many pieces libcurl hands over, and so how many pwrite calls a download makes,
            # depends on how the bytes arrive: a run may make fewer calls than the counting run.
            # Then nothing failed, and the download must simply be right.
            [ "$at" != 1 ] || fail "$what: no fault was injected"
            [ "$rc" = 0 ] || fail "$what: no fault was injected, yet exit $rc"
            cmp "$dest" "$root/bkt/new.dlc" || fail "$what: no fault, and a wrong file"
            note "$what: this run made fewer calls; it completed and is right"
            continue
        fi
        first_rc=$rc
        first_err="exit $rc: $(grep -v '^$' "$logs/$run.err" | tail -1)"
        if [ "$rc" = 0 ]; then
            # A failure the download may absorb (a preallocation the file
            # system refuses): the published file must then be right.
            cmp "$dest" "$root/bkt/new.dlc" || fail "$what: published a wrong file"
        else
            check_failed "$what"
            if [ "$e" = ENOSPC ]; then
                [ ! -e "$dest.warm-part" ] || fail "$what: the partial file was left on a full disk"
            fi
            # The next run, with a disk that works again, completes.
            warm "$gs_url"
            [ "$rc" = 0 ] || fail "$what: the rerun failed: $(cat "$logs/$run.err")"
            cmp "$dest" "$root/bkt/new.dlc" || fail "$what: the rerun published a wrong file"
        fi
        [ "$first_rc" = 0 ] && first_err="absorbed: the download succeeded"
        note "$what: $first_err"
        faults=$((faults + 1))
    done
done

note "failing requests: a wrong token, a missing signature, a missing object"
reset_dest
warm "$gs_url" GOOGLE_OAUTH_ACCESS_TOKEN=ya29.WrongTokenMustNotLeak
[ "$rc" = 1 ] || fail "a wrong token: exit $rc"
warm "http://127.0.0.1:$port/files/new.dlc?sig=WrongSigMustNotLeak"
[ "$rc" = 1 ] || fail "a wrong signature: exit $rc"
grep -q '?REDACTED' "$logs/$run.err" || fail "the failing URL is not shown redacted: $(cat "$logs/$run.err")"
warm "gs://bkt/missing.dlc"
[ "$rc" = 1 ] || fail "a missing object: exit $rc"
[ "$(sha256sum <"$dest")" = "$old_sum" ] || fail "a failed request changed the older file"

note "a disk that is really full (tmpfs)"
mnt=$tmp/small
mkdir -p "$mnt"
if mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then
    cp "$tmp/old.dlc" "$mnt/train.dlc"
    small_sum=$(sha256sum <"$mnt/train.dlc")
    set +e
    "$DLC_BIN/cachewarm" "$gs_url" -o "$mnt/train.dlc" --chunk-size 64K --force --json \
        >"$logs/full.json" 2>"$logs/full.err"
    rc=$?
    set -e
    [ "$rc" = 1 ] || fail "full disk: exit $rc: $(cat "$logs/full.err")"
    grep -qE "No space left on device|disk full" "$logs/full.err" ||
        fail "full disk: the error does not say so: $(cat "$logs/full.err")"
    [ "$(sha256sum <"$mnt/train.dlc")" = "$small_sum" ] || fail "full disk: the older file changed"
    [ ! -e "$mnt/train.dlc.warm-part" ] || fail "full disk: the partial file was left"
    note "full disk: $(tail -1 "$logs/full.err")"
    cp "$mnt"/* "$logs/" 2>/dev/null || true
    umount "$mnt"
    mnt=
else
    note "SKIP full-disk case: mounting a tmpfs is not permitted here"
fi

note "no secret in any output, report, log or file beside the destination"
cp "$out"/* "$logs/" 2>/dev/null || true
cp "$tmp"/*.log "$logs/" 2>/dev/null || true
if grep -rlaF -e "$TOKEN" -e "$SIG" -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_SESSION_TOKEN" \
    -e "$AWS_ACCESS_KEY_ID" -e WrongTokenMustNotLeak -e WrongSigMustNotLeak "$logs"; then
    fail "a secret was printed or written (files above)"
fi
echo "fault_warm: ok ($faults injected faults, $after_publish of them after the rename, $run runs)"

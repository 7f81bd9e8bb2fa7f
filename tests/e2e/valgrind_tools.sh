#!/usr/bin/env bash
# The tools' main paths under valgrind memcheck: cachebuild (decode, resize,
# write on two threads), cacheinfo --verify (open, walk, hash every record),
# cachebench load (the loader's threads, a short fixed run). Any invalid read
# or write, use of uninitialised memory, or a definite leak fails the test.
# Skipped (exit 77) where valgrind is not installed.
set -euo pipefail
: "${DLC_BIN:?DLC_BIN must name the bin directory of the build}"
command -v valgrind >/dev/null || { echo "SKIP: valgrind is not installed" >&2; exit 77; }
for t in cachebuild cacheinfo mkdemo; do
    [ -x "$DLC_BIN/$t" ] || { echo "SKIP: $DLC_BIN/$t is not built" >&2; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$DLC_BIN/mkdemo" "$tmp/demo" --count 12 --classes 3 >/dev/null

# libjpeg-turbo's hand-written SIMD reads and computes on row padding that
# memcheck cannot follow, so every decoded pixel looks uninitialised to it
# (and so does every store page those pixels are written into). Its C paths
# compute the same pixels and memcheck follows them: run those.
export JSIMD_FORCENONE=1

# --errors-for-leak-kinds=definite: a tool that exits leaves reachable
# memory (libcurl's and libjpeg-turbo's globals) by design; a block nobody
# points to is a real leak.
vg() {
    local name=$1
    shift
    valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=yes \
        --log-file="$tmp/$name.vg" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    if [ $rc -eq 99 ]; then
        cat "$tmp/$name.vg" >&2
        fail "$name: memcheck found errors (above)"
    fi
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(tail -3 "$tmp/$name.err")"
    grep -q "ERROR SUMMARY: 0 errors" "$tmp/$name.vg" || { cat "$tmp/$name.vg" >&2; fail "$name"; }
    echo "-- $name: clean ($(grep -o 'total heap usage.*' "$tmp/$name.vg"))" >&2
}

set +e
vg cachebuild "$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/s.dlc" --size 48 --threads 2
vg cachebuild_jpeg "$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/j.dlc" --size 48 \
    --encoding jpeg --threads 2
vg cacheinfo "$DLC_BIN/cacheinfo" "$tmp/s.dlc" --verify
vg cacheinfo_json "$DLC_BIN/cacheinfo" "$tmp/j.dlc" --verify --json
if [ -x "$DLC_BIN/cachebench" ]; then
    vg cachebench "$DLC_BIN/cachebench" load "$tmp/s.dlc" --batch 4 --threads 2 --prefetch 2 \
        --crop 32 --batches 6 --io mmap --no-prewarm --json
    vg cachebench_jpeg "$DLC_BIN/cachebench" load "$tmp/j.dlc" --batch 4 --threads 2 \
        --prefetch 2 --crop 32 --dtype float32 --random-resized-crop --batches 4 --no-prewarm --json
fi
# A corrupt store: the error path is clean too.
cp "$tmp/s.dlc" "$tmp/bad.dlc"
size=$(stat -c %s "$tmp/bad.dlc")
printf '\xff\xff\xff\xff' | dd of="$tmp/bad.dlc" bs=1 seek=$((size - 4096 - 100)) conv=notrunc 2>/dev/null
valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --log-file="$tmp/bad.vg" "$DLC_BIN/cacheinfo" "$tmp/bad.dlc" --verify >/dev/null 2>&1
rc=$?
[ $rc -ne 99 ] || { cat "$tmp/bad.vg" >&2; fail "cacheinfo --verify of a corrupt store: memcheck errors"; }
set -e
echo "valgrind_tools: ok"

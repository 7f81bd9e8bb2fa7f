#!/usr/bin/env bash
# The C example, linked against libdlcache.so, runs two epochs over a store
# built by cachebuild and sees every sample of each epoch.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$DLC_BIN/mkdemo" "$tmp/data" --count 150 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/data/train" -o "$tmp/s.dlc" --size 240 >/dev/null 2>&1
out=$("$DLC_BIN/example_consume" "$tmp/s.dlc")
echo "$out"
[ "$(grep -c '^epoch [01]: 150 samples in 3 batches$' <<<"$out")" = 2 ] || {
    echo "FAIL: expected two epochs of 150 samples in 3 batches" >&2; exit 1; }
# A missing store is an error naming the file.
if err=$("$DLC_BIN/example_consume" "$tmp/missing.dlc" 2>&1); then
    echo "FAIL: a missing store opened" >&2; exit 1
fi
grep -q "missing.dlc" <<<"$err" || { echo "FAIL: error does not name the file: $err" >&2; exit 1; }
echo "example_consume: ok"

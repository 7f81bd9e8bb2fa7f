#!/usr/bin/env bash
# A build across machines, as a scheduler runs it: three `cachebuild --part I/3` processes and a
# `cachebuild --join`. One part is killed with SIGKILL mid-way: the join then refuses (the part
# is missing; no index is written), a rerun of that part alone (no --force: its file was never
# published) cleans up the dead run's temporary file, and the join makes the set that
# --shards 3 makes, which delivers the records of a single store. A part built with another
# --size is foreign: the join refuses it by name and writes no index.
. "$(dirname "$0")/../lib/e2e.sh" set_parts
dig() { "$DLC_BIN/cacheinfo" "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["content_digest"])'; }
load() {
    "$DLC_BIN/cachebench" load "$1" --epochs 1 --batch 32 --threads 2 --seconds 0.2 --crop 0 \
        --flip 0 --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["digest"])'
}

"$DLC_BIN/mkdemo" "$tmp/demo" --count 600 --classes 5 >/dev/null
tree=$tmp/demo/train
args=(--size 160)
part() { "$DLC_BIN/cachebuild" "$tree" -o "$tmp/p" --part "$1/3" "${args[@]}" "${@:2}"; }

# How long one part takes on one thread, to kill part 1 about half-way.
t0=$(date +%s.%N)
part 0 --threads 1 2>/dev/null
t1=$(date +%s.%N)
full=$($PY -c "print(max(0.2, $t1 - $t0))")
part 2 --threads 2 2>/dev/null

killed=0
for frac in 0.5 0.3 0.15; do
    # cachebuild itself in the background, not the function: $! must be the process that dies
    # (a killed subshell would leave cachebuild running, holding its temporary file).
    "$DLC_BIN/cachebuild" "$tree" -o "$tmp/p" --part 1/3 "${args[@]}" --threads 1 2>/dev/null &
    pid=$!
    sleep "$($PY -c "print(round($full * $frac, 3))")"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if [ ! -e "$tmp/p/part-00001-of-00003.dlc" ]; then
        killed=1
        break
    fi
    rm "$tmp/p/part-00001-of-00003.dlc" # finished before the kill: try earlier
done
[ "$killed" = 1 ] || fail "part 1 always finished before SIGKILL (full part ${full}s)"

set +e
"$DLC_BIN/cachebuild" --join "$tmp/p" 2>"$tmp/join.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "join with a missing part: exit $rc"
grep -q "1 of 3 parts missing: part-00001-of-00003.dlc" "$tmp/join.err" ||
    fail "join does not name the missing part: $(cat "$tmp/join.err")"
[ ! -e "$tmp/p/index.dlcset" ] || fail "a refused join wrote an index"
set +e
"$DLC_BIN/cacheinfo" "$tmp/p" >/dev/null 2>"$tmp/info.err"
rc=$?
set -e
[ "$rc" != 0 ] || fail "parts without an index open as a set"

# The killed part again, alone: its file was never published, so no --force.
part 1 --threads 2 2>/dev/null || fail "rerun of part 1 failed"
if ls -a "$tmp/p" | grep -q '\.tmp-'; then fail "the dead part's temporary file is still there: $(ls -a "$tmp/p")"; fi
"$DLC_BIN/cachebuild" --join "$tmp/p" 2>/dev/null || fail "join after the rerun failed"
"$DLC_BIN/cacheinfo" "$tmp/p" --verify >/dev/null 2>&1 || fail "the joined set does not verify"

"$DLC_BIN/cachebuild" "$tree" -o "$tmp/all" --shards 3 "${args[@]}" --threads 2 2>/dev/null
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/one.dlc" "${args[@]}" --threads 2 2>/dev/null
[ "$(dig "$tmp/p")" = "$(dig "$tmp/all")" ] || fail "parts built apart differ from --shards 3"
[ "$(load "$tmp/p")" = "$(load "$tmp/one.dlc")" ] || fail "the set and the single store differ"

# A foreign part: the same sources at another --size.
for i in 0 2; do
    "$DLC_BIN/cachebuild" "$tree" -o "$tmp/f" --part "$i/3" "${args[@]}" --threads 2 2>/dev/null
done
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/f" --part 1/3 --size 128 --threads 2 2>/dev/null
set +e
"$DLC_BIN/cachebuild" --join "$tmp/f" 2>"$tmp/join.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "join with a foreign part: exit $rc"
grep -q "part-00001-of-00003.dlc was built from other sources or options" "$tmp/join.err" ||
    fail "join does not name the foreign part: $(cat "$tmp/join.err")"
[ ! -e "$tmp/f/index.dlcset" ] || fail "a refused join wrote an index"
echo "set_parts: ok (part 1 killed at ${frac} of ${full}s, rerun and joined; foreign part refused)"

#!/usr/bin/env bash
# The loader streaming a store set from a real S3 server (s3rver on loopback), through
# `cachebench load s3://... --cache-dir DIR --cache-limit SIZE`:
#   1. the batches are those of the same set read locally in shard windows, byte for byte, with
#      no cache limit, a limit between the smallest the loader accepts and the set's size, and
#      that smallest limit, with 1 and 2 threads: the cache never changes a batch;
#   2. peak_cache_bytes never exceeds the limit, and the cache folder's files never do either
#      (polled while the smallest-cache run reads two epochs);
#   3. a limit below what the windows need fails at open with the bytes needed;
#   4. two ranks of a world of 2 (2 streams) download disjoint shards: together about one copy
#      of the set per epoch, not two;
#   5. a second run on a warm cache downloads nothing and gives the same batches;
#   6. a loader killed (SIGKILL) while it downloads leaves a cache the next run completes
#      cleanly, with the same batches and no temporary file left;
#   7. two loaders at once on one cache folder give the same batches, and download each shard
#      once between them.
# Under ThreadSanitizer (tests/run_all.sh's tsan step sets DLC_E2E_TSAN=1), where each load
# costs 20-25 s instead of 2-3 s, it runs what threads share inside one process: 1 and 2 at
# 2 threads, with no limit and with the smallest (the most evictions while the download threads
# run), and 3. Steps 4-7 are about bytes and processes, which TSan does not see, and the plain
# build's run (ctest's e2e_stream_load) checks them.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
bench=$DLC_BIN/cachebench
[ -x "$bench" ] && [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] ||
    skip "cachebench, mkdemo and cachebuild are needed"

warm_start_s3rver
src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/demo" --count 300 --seed 7 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 30 --size 96 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
set_bytes=0
for f in "$src"/set/part-*.dlc; do set_bytes=$((set_bytes + $(stat -c %s "$f"))); done
"$DLC_BIN/cachewarm" push "$src/set" s3://b/sets/s --endpoint "$S3_URL" -q 2>"$warm_tmp/push.err" ||
    fail "push: $(cat "$warm_tmp/push.err")"
url=s3://b/sets/s
out=$warm_tmp/out
mkdir -p "$out"
note "set: 30 shards, $set_bytes bytes"

common=(--batch 16 --crop 64 --sampler windows --window-shards 2 --streams 2 --epochs 2 --json)
# load NAME ARGS...: cachebench load with the common options, its JSON in $out/NAME.json.
load() {
    local name=$1
    shift
    "$bench" load "$@" "${common[@]}" >"$out/$name.json" 2>"$out/$name.err" ||
        fail "$name: $(tail -3 "$out/$name.err")"
}
used() {
    { find "$1" -type f -printf '%b\n' 2>/dev/null || true; } | awk '{s += $1 * 512} END {print s + 0}'
}
stream_get() { json_get "$@"; }

load local "$src/set" --threads 2
want=$(json_get "$out/local.json" digest)
[ -n "$want" ] && [ "$want" != None ] || fail "no digest from the local run"
note "local set, shard windows: digest $want"

note "1, 2. the same batches at every cache limit and thread count; the cap holds"
need=$("$bench" load "$url" --cache-dir "$warm_tmp/probe" --endpoint "$S3_URL" \
    --cache-limit 4096 "${common[@]}" 2>&1 >/dev/null | sed -n 's/.* = 4096 bytes is too small: \([0-9]*\) bytes are needed.*/\1/p' || true)
[ -n "$need" ] || fail "a 4 KiB cache was not refused with the bytes needed"
note "3. a 4 KiB cache is refused at open: $need bytes are needed"
plan=$("$DLC_BIN/cacheinfo" "$url" --plan --json --cache-dir "$warm_tmp/plan" --endpoint "$S3_URL" \
    --batch 16 --window-shards 2 --streams 2 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["cache_needed_bytes"])')
[ "$plan" = "$need" ] || fail "cacheinfo --plan says $plan bytes are needed, the loader $need"
[ "$(ls "$warm_tmp/plan"/*/ 2>/dev/null | grep -c '^part-')" = 0 ] || fail "--plan downloaded shards"
limits=(0 $(((need + set_bytes) / 2)) "$need")
thread_counts=(1 2)
if [ "${DLC_E2E_TSAN:-0}" = 1 ]; then
    limits=(0 "$need")
    thread_counts=(2)
fi
for limit in "${limits[@]}"; do
    for threads in "${thread_counts[@]}"; do
        cache=$warm_tmp/cache-$limit-$threads
        name=stream-$limit-$threads
        "$bench" load "$url" --cache-dir "$cache" --cache-limit "$limit" --endpoint "$S3_URL" \
            --threads "$threads" "${common[@]}" >"$out/$name.json" 2>"$out/$name.err" &
        pid=$!
        max=0
        while kill -0 "$pid" 2>/dev/null; do
            u=$(used "$cache")
            [ "$limit" = 0 ] || [ "$u" -le "$limit" ] ||
                fail "$name: the cache folder holds $u bytes, over its limit of $limit"
            [ "$u" -le "$max" ] || max=$u
            sleep 0.02
        done
        wait "$pid" || fail "$name: $(tail -3 "$out/$name.err")"
        got=$(json_get "$out/$name.json" digest)
        [ "$got" = "$want" ] || fail "$name: digest $got, the local set's is $want"
        peak=$(stream_get "$out/$name.json" peak_cache_bytes)
        [ "$limit" = 0 ] || [ "$peak" -le "$limit" ] || fail "$name: peak $peak over $limit"
        note "limit $limit, $threads threads: digest equal; peak $peak, polled $max," \
            "$(stream_get "$out/$name.json" bytes_fetched) bytes fetched," \
            "$(stream_get "$out/$name.json" evictions) evictions"
    done
done

if [ "${DLC_E2E_TSAN:-0}" = 1 ]; then
    note "ok (the TSan subset: steps 4-7 run in the plain build's test)"
    exit 0
fi

note "4. two ranks of two streams download disjoint shards"
total=0
for rank in 0 1; do
    name=rank$rank
    "$bench" load "$url" --cache-dir "$warm_tmp/rank$rank" --endpoint "$S3_URL" \
        --world-size 2 --rank $rank --batch 16 --crop 64 --sampler windows --window-shards 2 \
        --streams 2 --epochs 1 --json >"$out/$name.json" 2>"$out/$name.err" ||
        fail "$name: $(tail -3 "$out/$name.err")"
    total=$((total + $(stream_get "$out/$name.json" bytes_fetched)))
done
# Each rank fetched the index and its half; one copy of the set and two indexes, with slack
# for the probes' bytes.
[ "$total" -lt $((set_bytes * 13 / 10)) ] ||
    fail "the two ranks fetched $total bytes, more than 1.3 x the set's $set_bytes"
note "ranks 0 and 1 fetched $total bytes together for a set of $set_bytes"

note "5. a warm cache downloads nothing"
load warm "$url" --cache-dir "$warm_tmp/cache-0-1" --endpoint "$S3_URL" --threads 2
[ "$(json_get "$out/warm.json" digest)" = "$want" ] || fail "warm: another digest"
[ "$(stream_get "$out/warm.json" downloads)" = 0 ] || fail "warm: shards downloaded again"
note "6. kill -9 while downloading, then a clean run"
cache=$warm_tmp/killed
# 300 kB/s makes each shard's download last about a second, so a download seen under way is
# still under way when the kill lands. A CI machine busy with other tests may start the loader
# late, or the kill may still fall between two downloads: the attempt is then made again on the
# same folder (its finished shards stay), up to three times, before the test says so.
warm_start_proxy slow "$S3_PORT" --rate 300000
killed_mid_download=false
for attempt in 1 2 3; do
    "$bench" load "$url" --cache-dir "$cache" --endpoint "http://127.0.0.1:$PROXY_PORT" \
        --cache-limit "$need" "${common[@]}" >/dev/null 2>"$out/killed.err" &
    pid=$!
    for i in $(seq 1 3000); do
        [ -n "$(find "$cache" -name '*.dlcs-tmp' 2>/dev/null)" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -9 "$pid" 2>/dev/null || fail "the loader ended before it could be killed: $(tail -3 "$out/killed.err")"
    wait "$pid" 2>/dev/null || true
    if [ -n "$(find "$cache" -name '*.dlcs-tmp')" ]; then
        killed_mid_download=true
        break
    fi
    note "attempt $attempt: no download was under way when killed; again"
done
$killed_mid_download || fail "no download was under way when killed, in three attempts"
load after-kill "$url" --cache-dir "$cache" --cache-limit "$need" --endpoint "$S3_URL"
[ "$(json_get "$out/after-kill.json" digest)" = "$want" ] || fail "after kill: another digest"
[ -z "$(find "$cache" -name '*.dlcs-tmp')" ] || fail "after kill: temporary files left"

note "7. two loaders on one cache folder"
cache=$warm_tmp/shared
for j in a b; do
    "$bench" load "$url" --cache-dir "$cache" --endpoint "$S3_URL" --threads 1 \
        "${common[@]}" >"$out/shared-$j.json" 2>"$out/shared-$j.err" &
    eval "pid_$j=\$!"
done
wait "$pid_a" || fail "shared a: $(tail -3 "$out/shared-a.err")"
wait "$pid_b" || fail "shared b: $(tail -3 "$out/shared-b.err")"
downloads=0
for j in a b; do
    [ "$(json_get "$out/shared-$j.json" digest)" = "$want" ] || fail "shared $j: another digest"
    downloads=$((downloads + $(stream_get "$out/shared-$j.json" downloads)))
done
[ "$downloads" = 30 ] || fail "two loaders downloaded $downloads shards of 30 between them"
note "ok"

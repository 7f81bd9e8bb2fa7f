#!/usr/bin/env bash
# Two jobs on one streaming cache folder at the smallest limit the plan gives each (issue 23,
# item 5): each was planned as if alone (cache_ranks 1), so together they need more than the
# limit. Against a real S3 server (s3rver on loopback), two `cachebench load` processes at once,
# each bounded by a timeout: they must both finish, or the one that cannot go on must be refused
# within seconds, its message giving the bytes and cache_ranks it needs. On eda0975 both spun
# forever without a word.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
bench=$DLC_BIN/cachebench
[ -x "$bench" ] && [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] ||
    skip "cachebench, mkdemo and cachebuild are needed"

warm_start_s3rver
src=$warm_tmp/src
out=$warm_tmp/out
mkdir -p "$src" "$out"
"$DLC_BIN/mkdemo" "$src/demo" --count 400 --seed 7 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 40 --size 64 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
"$DLC_BIN/cachewarm" push "$src/set" s3://b/sets/s --endpoint "$S3_URL" -q 2>"$out/push.err" ||
    fail "push: $(cat "$out/push.err")"
url=s3://b/sets/s
common=(--batch 8 --crop 32 --sampler windows --window-shards 2 --streams 2 --epochs 3 --json
    --cache-ranks 1)
need=$("$bench" load "$url" --cache-dir "$warm_tmp/probe" --endpoint "$S3_URL" \
    --cache-limit 4096 "${common[@]}" 2>&1 >/dev/null | sed -n 's/.* = 4096 bytes is too small: \([0-9]*\) bytes are needed.*/\1/p' || true)
[ -n "$need" ] || fail "a 4 KiB cache was not refused with the bytes needed"
note "the smallest limit for one job: $need bytes"

limit_s=${STREAM_SHARED_LIMIT_S:-90}
for round in 1 2 3; do
    cache=$warm_tmp/shared$round
    for j in a b; do
        # Different seeds: the two want different shards at the same time.
        seed=$round
        [ "$j" = a ] || seed=$((round + 100))
        timeout -s KILL "$limit_s" "$bench" load "$url" --cache-dir "$cache" --endpoint "$S3_URL" \
            --cache-limit "$need" --seed "$seed" "${common[@]}" >"$out/$round$j.json" \
            2>"$out/$round$j.err" &
        eval "pid_$j=\$!"
    done
    rc_a=0 rc_b=0
    wait "$pid_a" || rc_a=$?
    wait "$pid_b" || rc_b=$?
    for j in a b; do
        eval "rc=\$rc_$j"
        [ "$rc" != 137 ] || fail "round $round: job $j was still stuck after $limit_s s: $(tail -c 300 "$out/$round$j.err")"
        if [ "$rc" != 0 ]; then
            grep -q "cache_ranks" "$out/$round$j.err" && grep -Eq "[0-9]+ bytes" "$out/$round$j.err" ||
                fail "round $round: job $j failed without the bytes and cache_ranks it needs: $(tail -c 600 "$out/$round$j.err")"
        fi
    done
    [ "$rc_a" = 0 ] || [ "$rc_b" = 0 ] || fail "round $round: both jobs were refused: $(tail -c 300 "$out/${round}a.err")"
    note "round $round: exit $rc_a and $rc_b$( [ "$rc_a$rc_b" = 00 ] || echo ": $(cat "$out/$round"[ab].err | grep -m1 -o 'cache_ranks.*' | head -c 200)")"
done
echo "stream_shared: ok"

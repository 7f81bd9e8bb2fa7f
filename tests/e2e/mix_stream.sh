#!/usr/bin/env bash
# Mixtures with streamed sources end to end (docs/MIXTURES.md, "Streamed sources"): a local
# store and a set that cachewarm pushes to gs:// (the project's GCS JSON API server,
# tests/lib/gcsserver.py), read by `cachebench load STORE gs://... --weights 1,1`:
#   1. a cache limit below what the loader needs is refused, naming the bytes needed and the
#      streamed source;
#   2. at exactly that limit, cold, on 1 thread: the run completes within its limit;
#   3. without a limit, on 3 threads, in another folder, and again warm: the same digest (the
#      cache, its limit and the threads never change a batch);
#   4. a second streamed set (gs://.../t) in the same mixture and folder: refused below the sum
#      of both sources' needs, and the same digest at that limit and without one;
#   5. cacheinfo --plan of the mixture gives each source's samples per epoch, and the cache the
#      streamed source needs: the bytes the loader's check named.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
bench=$DLC_BIN/cachebench
[ -x "$bench" ] && [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] ||
    skip "cachebench, mkdemo and cachebuild are needed"

src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/a" --count 120 --seed 5 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/mkdemo" "$src/s" --count 160 --seed 9 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/a/train" -o "$src/a.dlc" --size 48 >/dev/null 2>&1 ||
    fail "cachebuild of the store failed"
"$DLC_BIN/cachebuild" "$src/s/train" -o "$src/set" --shards 16 --size 48 >/dev/null 2>&1 ||
    fail "cachebuild of the set failed"
"$DLC_BIN/cachebuild" "$src/a/train" -o "$src/set2" --shards 6 --size 48 >/dev/null 2>&1 ||
    fail "cachebuild of the second set failed"
out=$warm_tmp/out
mkdir -p "$out"

TOKEN=ya29.MixTokenMustNotLeak7
warm_start_gcs --token "$TOKEN"
gcs=http://127.0.0.1:$GCS_PORT
mkdir -p "$warm_tmp/gcsroot/bkt"
export GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN
for x in set:s set2:t; do
    "$DLC_BIN/cachewarm" push "$src/${x%%:*}" "gs://bkt/sets/${x#*:}" --endpoint "$gcs" -q \
        2>"$out/push.err" || fail "push: $(cat "$out/push.err")"
done
url=gs://bkt/sets/s
common=(--weights 1,2 --batch 6 --crop 32 --window-shards 2 --prefetch 2 --epochs 3 --json
        --endpoint "$gcs")
load() { # NAME ARGS...
    local name=$1
    shift
    "$bench" load "$src/a.dlc" "$url" "${common[@]}" "$@" >"$out/$name.json" 2>"$out/$name.err" ||
        fail "$name: $(tail -3 "$out/$name.err")"
}

note "1. too small a cache"
set +e
"$bench" load "$src/a.dlc" "$url" "${common[@]}" --cache-dir "$warm_tmp/probe" \
    --cache-limit 4096 >/dev/null 2>"$out/small.err"
rc=$?
set -e
[ $rc != 0 ] || fail "a cache of 4 KiB was accepted"
need=$(sed -n 's/.* = 4096 bytes is too small: \([0-9]*\) bytes are needed.*/\1/p' "$out/small.err")
[ -n "$need" ] || fail "no bytes named: $(cat "$out/small.err")"
grep -q "streamed source 1 ($url)" "$out/small.err" || fail "the source is not named: $(cat "$out/small.err")"
note "the smallest cache: $need bytes"

note "2. at the smallest cache, cold, 1 thread"
load min --cache-dir "$warm_tmp/c1" --cache-limit "$need" --threads 1
want=$(json_get "$out/min.json" digest)
[ -n "$want" ] && [ "$want" != None ] || fail "no digest"
peak=$(json_get "$out/min.json" peak_cache_bytes)
[ "$peak" -le "$need" ] || fail "peak $peak over the limit $need"
[ "$(json_get "$out/min.json" downloads)" -gt 16 ] || fail "the smallest cache downloaded each shard once"

note "3. no limit, 3 threads, cold and warm"
load free --cache-dir "$warm_tmp/c2" --threads 3
load warm --cache-dir "$warm_tmp/c2" --threads 2
for n in free warm; do
    got=$(json_get "$out/$n.json" digest)
    [ "$got" = "$want" ] || fail "$n: digest $got, the smallest cache's $want"
done
[ "$(json_get "$out/warm.json" downloads)" = 0 ] || fail "warm: downloaded again"

note "4. two streamed sources in one folder"
two=("$src/a.dlc" "$url" gs://bkt/sets/t --weights 1,2,1 --batch 6 --crop 32 --window-shards 2
     --prefetch 2 --epochs 3 --json --endpoint "$gcs")
set +e
"$bench" load "${two[@]}" --cache-dir "$warm_tmp/probe2" --cache-limit 4096 >/dev/null \
    2>"$out/two-small.err"
rc=$?
set -e
[ $rc != 0 ] || fail "two sources: a cache of 4 KiB was accepted"
need2=$(sed -n 's/.* = 4096 bytes is too small: \([0-9]*\) bytes are needed.*/\1/p' "$out/two-small.err")
[ -n "$need2" ] && [ "$need2" -gt "$need" ] || fail "two sources need $need2: $(cat "$out/two-small.err")"
grep -q "streamed source 2 (gs://bkt/sets/t)" "$out/two-small.err" ||
    fail "the second source is not named: $(cat "$out/two-small.err")"
"$bench" load "${two[@]}" --cache-dir "$warm_tmp/c3" --cache-limit "$need2" --threads 1 \
    >"$out/two-min.json" 2>"$out/two-min.err" || fail "two-min: $(tail -3 "$out/two-min.err")"
"$bench" load "${two[@]}" --cache-dir "$warm_tmp/c4" --threads 3 \
    >"$out/two-free.json" 2>"$out/two-free.err" || fail "two-free: $(tail -3 "$out/two-free.err")"
[ "$(json_get "$out/two-min.json" digest)" = "$(json_get "$out/two-free.json" digest)" ] ||
    fail "two sources: the digest at the smallest cache differs from the unlimited one's"
[ "$(json_get "$out/two-min.json" peak_cache_bytes)" -le "$need2" ] || fail "two sources: over the limit"
note "two sources: the smallest cache is $need2 bytes"

note "5. cacheinfo --plan"
"$DLC_BIN/cacheinfo" "$src/a.dlc" "$url" --plan --weights 1,2 --cache-dir "$warm_tmp/c2" \
    --batch 6 --window-shards 2 --prefetch 2 --endpoint "$gcs" --json >"$out/plan.json" \
    2>"$out/plan.err" || fail "cacheinfo --plan: $(cat "$out/plan.err")"
"$PY" - "$out/plan.json" "$need" <<'PYEOF' || fail "the plan: $(cat "$out/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
need = int(sys.argv[2])
# The cache the streamed source needs: what the loader's check named.
assert p["cache_needed_bytes"] == need and p["mixture"][1]["cache_needed_bytes"] == need, p
assert "cache_needed_bytes" not in p["mixture"][0], p
got = [s["samples_per_epoch"] for s in p["mixture"]]
assert sum(got) == 280 and abs(got[0] - 280 / 3) < 1 and abs(got[1] - 560 / 3) < 1, p
PYEOF

if grep -rl -e "$TOKEN" "$out"; then
    fail "the token was printed"
fi
echo "mix_stream: ok"

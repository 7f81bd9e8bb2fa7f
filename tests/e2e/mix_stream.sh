#!/usr/bin/env bash
# A mixture with a streamed source end to end (docs/MIXTURES.md, "A streamed source"): a local
# store and a set that cachewarm pushes to gs:// (the project's GCS JSON API server,
# tests/lib/gcsserver.py), read by `cachebench load STORE gs://... --weights 1,1`:
#   1. a cache limit below what the loader needs is refused, naming the bytes needed and the
#      streamed source;
#   2. at exactly that limit, cold, on 1 thread: the run completes within its limit;
#   3. without a limit, on 3 threads, in another folder, and again warm: the same digest (the
#      cache, its limit and the threads never change a batch);
#   4. a second streamed source is refused, naming it;
#   5. cacheinfo --plan of the mixture gives each source's samples per epoch.
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
out=$warm_tmp/out
mkdir -p "$out"

TOKEN=ya29.MixTokenMustNotLeak7
warm_start_gcs --token "$TOKEN"
gcs=http://127.0.0.1:$GCS_PORT
mkdir -p "$warm_tmp/gcsroot/bkt"
export GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN
"$DLC_BIN/cachewarm" push "$src/set" gs://bkt/sets/s --endpoint "$gcs" -q 2>"$out/push.err" ||
    fail "push: $(cat "$out/push.err")"
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

note "4. a second streamed source"
set +e
"$bench" load "$src/a.dlc" "$url" gs://bkt/sets/other --weights 1,1,1 --cache-dir "$warm_tmp/c3" \
    --endpoint "$gcs" --json >/dev/null 2>"$out/two.err"
rc=$?
set -e
[ $rc != 0 ] || fail "two streamed sources were accepted"
grep -q "gs://bkt/sets/other" "$out/two.err" || fail "not named: $(cat "$out/two.err")"

note "5. cacheinfo --plan"
"$DLC_BIN/cacheinfo" "$src/a.dlc" "$url" --plan --weights 1,2 --cache-dir "$warm_tmp/c2" \
    --endpoint "$gcs" --json >"$out/plan.json" 2>"$out/plan.err" ||
    fail "cacheinfo --plan: $(cat "$out/plan.err")"
"$PY" - "$out/plan.json" <<'PYEOF' || fail "the plan: $(cat "$out/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
got = [s["samples_per_epoch"] for s in p["mixture"]]
assert sum(got) == 280 and abs(got[0] - 280 / 3) < 1 and abs(got[1] - 560 / 3) < 1, p
PYEOF

if grep -rl -e "$TOKEN" "$out"; then
    fail "the token was printed"
fi
echo "mix_stream: ok"

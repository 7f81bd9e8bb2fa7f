#!/usr/bin/env bash
# bench_mix_stream.sh: a mixture with one streamed source at the smallest cache against the same
# mixture all local (docs/BENCHMARKS.md, "A mixture with a streamed source"). Needs a build
# (build/bin) and what tests/lib/warm.sh needs (node and s3rver from npm, Python).
#
# Two sources of COUNT mkdemo images each at SIZE: a local store A, and a set S of SHARDS shards
# that cachewarm pushes to s3rver on loopback. The streamed run is `cachebench load A s3://b/s
# --weights 1,1` through a cold cache folder at the smallest limit the loader accepts (what a
# limit of 1 byte is told it needs); the local run is `cachebench load A S --weights 1,1`, the
# same options. They take turns, the order alternating each round, since the machine is shared.
# Prints per round both samples/s and their ratio, the median ratio, the load average before and
# after, and the streamed run's bytes fetched and peak cache bytes against the limit. A third run
# streams the set alone (shard windows, one stream, the same limit): the mixture's streamed
# samples per second against it say whether the mixture costs anything beyond the network. The
# streamed source walks passes in shard windows, the local one shuffled passes: the orders
# differ, so the digests are not compared here (tests/python/test_mix.py checks the records).
#
# Knobs: COUNT (default 3000), SHARDS (30), SIZE (96), BATCH (64), CROP (64), THREADS (2),
# PREFETCH (2), WINDOW (2), DOWNLOADS (2), ROUNDS (5), EPOCHS (2).
set -euo pipefail
DLC_SRC=$(cd "$(dirname "$0")/../.." && pwd)
export DLC_SRC
DLC_BIN=${DLC_BIN:-$DLC_SRC/build/bin}
export DLC_BIN
source "$DLC_SRC/tests/lib/warm.sh"
COUNT=${COUNT:-3000} SHARDS=${SHARDS:-30} SIZE=${SIZE:-96} BATCH=${BATCH:-64} CROP=${CROP:-64}
THREADS=${THREADS:-2} PREFETCH=${PREFETCH:-2} WINDOW=${WINDOW:-2} DOWNLOADS=${DOWNLOADS:-2}
ROUNDS=${ROUNDS:-5} EPOCHS=${EPOCHS:-2}
bench=$DLC_BIN/cachebench

warm_start_s3rver
src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/a" --count "$COUNT" --seed 5 >/dev/null 2>&1
"$DLC_BIN/mkdemo" "$src/s" --count "$COUNT" --seed 11 >/dev/null 2>&1
"$DLC_BIN/cachebuild" "$src/a/train" -o "$src/a.dlc" --size "$SIZE" >/dev/null 2>&1
"$DLC_BIN/cachebuild" "$src/s/train" -o "$src/set" --shards "$SHARDS" --size "$SIZE" >/dev/null 2>&1
"$DLC_BIN/cachewarm" push "$src/set" "s3://b/s" --endpoint "$S3_URL" -q
common=(--batch "$BATCH" --crop "$CROP" --threads "$THREADS" --prefetch "$PREFETCH"
        --window-shards "$WINDOW" --downloads "$DOWNLOADS" --epochs "$EPOCHS" --json)
opts=(--weights 1,1 "${common[@]}")
stream=(--cache-dir "$warm_tmp/cache" --endpoint "$S3_URL")

# The smallest cache: the loader names the bytes it needs when given too few.
"$bench" load "$src/a.dlc" s3://b/s "${opts[@]}" "${stream[@]}" --cache-limit 1 \
    >/dev/null 2>"$warm_tmp/small.err" && fail "a cache of 1 byte was accepted"
need=$(grep -o '[0-9]* bytes are needed' "$warm_tmp/small.err" | head -1 | cut -d' ' -f1)
[ -n "$need" ] || fail "no size in: $(cat "$warm_tmp/small.err")"
set_bytes=0
for f in "$src/set"/part-*.dlc; do set_bytes=$((set_bytes + $(stat -c %s "$f"))); done
echo "smallest cache: $need bytes (the set: $set_bytes bytes in $SHARDS shards)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

run() { # NAME ROUND
    case $1 in
    local) "$bench" load "$src/a.dlc" "$src/set" "${opts[@]}" >"$warm_tmp/$1-$2.json" ;;
    stream)
        rm -rf "$warm_tmp/cache"
        "$bench" load "$src/a.dlc" s3://b/s "${opts[@]}" "${stream[@]}" --cache-limit "$need" \
            >"$warm_tmp/$1-$2.json"
        ;;
    alone) # The streamed set without the mixture, in the same windows (one stream), same limit.
        rm -rf "$warm_tmp/cache"
        "$bench" load s3://b/s --sampler windows --streams 1 "${common[@]}" "${stream[@]}" \
            --cache-limit "$need" >"$warm_tmp/$1-$2.json"
        ;;
    esac
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        run local "$r"; run stream "$r"; run alone "$r"
    else
        run alone "$r"; run stream "$r"; run local "$r"
    fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$warm_tmp" "$ROUNDS" "$need" <<'PYEOF'
import json, statistics, sys
tmp, rounds, need = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ratios, alone = [], []
for r in range(1, rounds + 1):
    lo = json.load(open("%s/local-%d.json" % (tmp, r)))
    st = json.load(open("%s/stream-%d.json" % (tmp, r)))
    al = json.load(open("%s/alone-%d.json" % (tmp, r)))
    ratios.append(st["samples_per_s"] / lo["samples_per_s"])
    # The mixture draws half its samples from the streamed source (weights 1,1).
    alone.append(st["samples_per_s"] / 2 / al["samples_per_s"])
    print("round %d: all local %.0f samples/s, with the streamed source %.0f samples/s (%.3f); "
          "the streamed set alone %.0f samples/s (its samples in the mixture: %.3f of that); "
          "mixture fetched %d bytes, peak cache %d of %d, stalled %.2f s"
          % (r, lo["samples_per_s"], st["samples_per_s"], ratios[-1], al["samples_per_s"],
             alone[-1], st["bytes_fetched"], st["peak_cache_bytes"], need, st["stall_s"]))
    assert st["peak_cache_bytes"] <= need
print("streamed / all local, median of %d rounds: %.3f (min %.3f, max %.3f)"
      % (rounds, statistics.median(ratios), min(ratios), max(ratios)))
print("streamed source's samples/s in the mixture / the set streamed alone, median: %.3f "
      "(min %.3f, max %.3f)" % (statistics.median(alone), min(alone), max(alone)))
PYEOF

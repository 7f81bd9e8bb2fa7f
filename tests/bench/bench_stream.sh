#!/usr/bin/env bash
# bench_stream.sh [OUT.md]: streaming a store set from S3 (s3rver on loopback) against reading
# the same set from local disk, for docs/BENCHMARKS.md ("Streaming"). Needs a build (build/bin)
# and what tests/lib/warm.sh needs (node and s3rver from npm, Python).
#
# For a raw and a JPEG-encoded set of the same mkdemo images, built with --shards:
#   local     cachebench load SET, shard windows, 2 epochs: samples/s and the digest;
#   streamed  the same from s3://, through a throttling proxy (tests/lib/faultproxy.py --rate:
#             one token bucket over every connection, like a link) at a rate below and one above
#             what the loader consumes locally, and with no proxy; at cache limits of 100 %, 50 %
#             and 10 % of the set (or the smallest the loader accepts, when 10 % is less); each
#             from a cold cache.
# Each streamed row gives samples/s over the timed window (both epochs after the first batch),
# its ratio to local, time to first batch (open included, cold), bytes fetched per epoch against
# the set's size, the peak cache bytes against the limit, the I/O thread's stall, and whether the
# digest equals local's (it must: the cache never changes a batch).
#
# The loader does RandomResizedCrop to float16 on THREADS threads, so that what it consumes stays
# within what s3rver (Node, on the same cores) can serve, and a rate above it exists.
# Then tests/bench/bench_stream_quality.py on the JPEG set: the shuffle's quality on these
# label-ordered data (measured on the labels delivered, and as cacheinfo --plan predicts it), and
# the time to the first batch of a streaming Loader cold, after a resume, and warm.
# QUALITY_ONLY=1 runs only that part.
# Knobs: COUNT (images, default 6000), SHARDS (60), SIZE (112), BATCH (32), CROP (96),
# PREFETCH (2), THREADS (1), WINDOW (2), STREAMS (1), DOWNLOADS (1), RATES ("below above" in
# MB/s, default derived from the local JPEG run: 0.5x and 2x its consumption).
set -euo pipefail
DLC_SRC=$(cd "$(dirname "$0")/../.." && pwd)
export DLC_SRC
DLC_BIN=${DLC_BIN:-$DLC_SRC/build/bin}
export DLC_BIN
OUT=${1:-/dev/stdout}
source "$DLC_SRC/tests/lib/warm.sh"
COUNT=${COUNT:-6000} SHARDS=${SHARDS:-60} SIZE=${SIZE:-112} BATCH=${BATCH:-32} CROP=${CROP:-96}
THREADS=${THREADS:-1} WINDOW=${WINDOW:-2} STREAMS=${STREAMS:-1} DOWNLOADS=${DOWNLOADS:-1}
PREFETCH=${PREFETCH:-2}
bench=$DLC_BIN/cachebench

warm_start_s3rver
src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/demo" --count "$COUNT" --seed 11 >/dev/null 2>&1
opts=(--batch "$BATCH" --crop "$CROP" --random-resized-crop --dtype float16 --prefetch "$PREFETCH"
      --sampler windows --window-shards "$WINDOW"
      --streams "$STREAMS" --downloads "$DOWNLOADS" --threads "$THREADS" --epochs 2 --json)
jq_py() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

rows=()
kinds="jpeg raw"
[ "${QUALITY_ONLY:-0}" = 1 ] && kinds=jpeg
for kind in $kinds; do
    "$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/$kind" --shards "$SHARDS" --size "$SIZE" \
        --encoding "$kind" >/dev/null 2>&1
    bytes=0
    for f in "$src/$kind"/part-*.dlc; do bytes=$((bytes + $(stat -c %s "$f"))); done
    "$DLC_BIN/cachewarm" push "$src/$kind" "s3://b/$kind" --endpoint "$S3_URL" -q
    "$bench" load "$src/$kind" "${opts[@]}" >"$warm_tmp/$kind-local.json" 2>/dev/null
    local_sps=$(jq_py "$warm_tmp/$kind-local.json" 'round(d["samples_per_s"])')
    digest=$(jq_py "$warm_tmp/$kind-local.json" 'd["digest"]')
    # Bytes per second the loader reads locally: the set's bytes per record times samples/s.
    consume=$(( bytes / COUNT * local_sps ))
    need=$("$DLC_BIN/cacheinfo" "$src/$kind" --plan --json --batch "$BATCH" --prefetch "$PREFETCH" \
        --window-shards "$WINDOW" --streams "$STREAMS" --downloads "$DOWNLOADS" |
        "$PY" -c 'import json,sys; print(json.load(sys.stdin)["cache_needed_bytes"])')
    rows+=("| $kind | local disk | - | - | $local_sps | 1.00 | $(jq_py "$warm_tmp/$kind-local.json" '"%.2f" % d["first_batch_seconds"]') | - | - | - | yes |")
    echo "-- $kind: $bytes bytes in $SHARDS shards, local $local_sps samples/s (~$((consume / 1000000)) MB/s), cache needed $need" >&2
    if [ -z "${RATES:-}" ] && [ "$kind" = jpeg ]; then
        RATES="$((consume / 2000000 > 0 ? consume / 2000000 : 1)) $((consume * 2 / 1000000 + 1))"
    fi
    [ "${QUALITY_ONLY:-0}" = 1 ] && continue
    for rate in ${RATES:-4 40} none; do
        if [ "$rate" = none ]; then
            endpoint=$S3_URL
        else
            warm_start_proxy "p$kind$rate" "$S3_PORT" --rate "$((rate * 1000000))"
            endpoint=http://127.0.0.1:$PROXY_PORT
        fi
        for pct in 100 50 10; do
            limit=$((bytes * pct / 100))
            note=""
            if [ "$limit" -lt "$need" ]; then limit=$need note=" (the smallest accepted)"; fi
            [ "$pct" = 100 ] && limit=0
            cache=$warm_tmp/cache-$kind-$rate-$pct
            j=$warm_tmp/$kind-$rate-$pct.json
            "$bench" load "s3://b/$kind" --cache-dir "$cache" --cache-limit "$limit" \
                --endpoint "$endpoint" "${opts[@]}" >"$j" 2>"$j.err" ||
                { echo "-- $kind $rate $pct: $(tail -2 "$j.err")" >&2; continue; }
            sps=$(jq_py "$j" 'round(d["samples_per_s"])')
            same=$([ "$(jq_py "$j" 'd["digest"]')" = "$digest" ] && echo yes || echo NO)
            rows+=("| $kind | $([ "$rate" = none ] && echo "s3rver, no limit" || echo "$rate MB/s") | $pct %$note | $limit | $sps | $(awk -v a="$sps" -v b="$local_sps" 'BEGIN{printf "%.2f", a/b}') | $(jq_py "$j" '"%.2f" % d["first_batch_seconds"]') | $(jq_py "$j" '"%.2f" % (d["bytes_fetched"] / 2 / '"$bytes"')') | $(jq_py "$j" 'd["peak_cache_bytes"]') | $(jq_py "$j" '"%.2f" % d["stall_s"]') | $same |")
            echo "${rows[-1]}" >&2
        done
    done
done
{
    echo "| set | source | cache limit | limit bytes | samples/s | of local | first batch s | fetched per epoch / set | peak cache bytes | stall s | same batches |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    printf '%s\n' "${rows[@]}"
} >"$OUT"
quality=$warm_tmp/quality.md
DLCACHE_LIB=${DLCACHE_LIB:-$DLC_SRC/build/lib/libdlcache.so} PYTHONPATH=$DLC_SRC/python${PYTHONPATH:+:$PYTHONPATH} \
    "$PY" "$DLC_SRC/tests/bench/bench_stream_quality.py" "$src/jpeg" s3://b/jpeg "$S3_URL" \
    "$warm_tmp/q" >"$quality"
{ echo; cat "$quality"; } >>"$OUT"

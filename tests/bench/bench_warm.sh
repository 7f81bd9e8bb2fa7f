#!/usr/bin/env bash
# cachewarm's download rate next to curl, against the same s3rver on loopback
# in the same run: one curl fetching the whole object, 8 parallel curl range
# requests (one eighth each), and cachewarm (--no-verify, then with the
# store verification). Every figure is the median of ROUNDS interleaved runs,
# in MB/s (10^6 bytes), wall time from start to a complete file on disk.
#
#   DLC_BIN=build/bin DLC_SRC=. bash tests/bench/bench_warm.sh [ROUNDS (5)]
#
# Not a test (no assertion); docs/BENCHMARKS.md has the figures.
set -euo pipefail
: "${DLC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${DLC_BIN:=$DLC_SRC/build/bin}"
export DLC_SRC DLC_BIN
source "$DLC_SRC/tests/lib/warm.sh"
ROUNDS=${1:-5}

warm_start_s3rver
if [ -n "${BENCH_OBJECT:-}" ]; then
    STORE=$BENCH_OBJECT
    WARM_VERIFY=--no-verify
else
    warm_make_store "$warm_tmp/src" 300 448
fi
s3_put "$STORE" bench.dlc
size=$(stat -c %s "$STORE")
url=$S3_URL/b/bench.dlc
out=$warm_tmp/out
mkdir -p "$out"
sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')

now() { date +%s.%N; }
rate() { "$PY" -c 'import sys; print("%.1f" % (float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e6))' "$size" "$1" "$2"; }

curl_one() {
    rm -f "$out/one"
    local t0 t1
    t0=$(now)
    curl -sSf "${sign[@]}" -o "$out/one" "$url"
    t1=$(now)
    cmp -s "$STORE" "$out/one" || fail "curl's copy differs"
    rate "$t0" "$t1"
}

curl_eight() {
    rm -f "$out"/part.*
    local t0 t1 i a b pids=() part=$(((size + 7) / 8))
    t0=$(now)
    for i in 0 1 2 3 4 5 6 7; do
        a=$((i * part))
        b=$((a + part - 1))
        [ $b -lt $size ] || b=$((size - 1))
        curl -sSf "${sign[@]}" -H "Range: bytes=$a-$b" -o "$out/part.$i" "$url" &
        pids+=("$!")
    done
    for i in "${pids[@]}"; do wait "$i"; done
    t1=$(now)
    cat "$out"/part.{0..7} | cmp -s "$STORE" - || fail "curl's ranges differ"
    rate "$t0" "$t1"
}

warm() { # warm ARGS...: MB/s from the tool's own report
    rm -f "$out/w.dlc" "$out/w.dlc.warm"
    "$DLC_BIN/cachewarm" s3://b/bench.dlc -o "$out/w.dlc" --endpoint "$S3_URL" --json -q "$@" \
        >"$out/w.json"
    cmp -s "$STORE" "$out/w.dlc" || fail "cachewarm's copy differs"
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f" % (r["bytes"]/r["seconds"]/1e6))' "$out/w.json"
}

declare -A res
names=(curl_1 curl_8x_range warm_8x16M_noverify warm_8x8M_noverify warm_16x4M_noverify warm_8x16M_verify)
for r in $(seq 1 "$ROUNDS"); do
    res[curl_1]+=" $(curl_one)"
    res[curl_8x_range]+=" $(curl_eight)"
    res[warm_8x16M_noverify]+=" $(warm --connections 8 --chunk-size 16M --no-verify)"
    res[warm_8x8M_noverify]+=" $(warm --connections 8 --chunk-size 8M --no-verify)"
    res[warm_16x4M_noverify]+=" $(warm --connections 16 --chunk-size 4M --no-verify)"
    res[warm_8x16M_verify]+=" $(warm --connections 8 --chunk-size 16M $WARM_VERIFY)"
done
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "object: $size bytes ($( [ -z "$WARM_VERIFY" ] && echo "a real store" || echo "not a store: verify skipped")), $ROUNDS rounds, loopback s3rver $S3RVER_VERSION"
printf '%-22s %10s   %s\n' "method" "MB/s" "runs"
for n in "${names[@]}"; do
    printf '%-22s %10s  %s\n' "$n" "$(median "${res[$n]}")" "${res[$n]}"
done

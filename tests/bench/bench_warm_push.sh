#!/usr/bin/env bash
# cachewarm push's upload rate next to curl, against the same s3rver on loopback in the same
# run: one `curl -T` (a single signed PUT of the whole file), and cachewarm push with a few
# connection counts and part sizes, of the store and of the same records as a set of 4 shards
# (set_split). Every figure is the median of ROUNDS interleaved runs, in MB/s (10^6 bytes),
# file bytes over the wall time from start to a checked object on the server.
#
#   DLC_BIN=build/bin DLC_SRC=. bash tests/bench/bench_warm_push.sh [ROUNDS (3)]
#
# Not a test (no assertion); docs/BENCHMARKS.md has the figures.
set -euo pipefail
: "${DLC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${DLC_BIN:=$DLC_SRC/build/bin}"
export DLC_SRC DLC_BIN
source "$DLC_SRC/tests/lib/warm.sh"
ROUNDS=${1:-3}

warm_start_s3rver
warm_make_store "$warm_tmp/src" 300 448
size=$(stat -c %s "$STORE")
have_set=0
if [ -x "$DLC_BIN/set_split" ] && [ -z "$WARM_VERIFY" ]; then
    "$DLC_BIN/set_split" "$STORE" 4 "$warm_tmp/set" >/dev/null
    have_set=1
fi
out=$warm_tmp/out
mkdir -p "$out"
export DLCACHE_STATE_DIR=$warm_tmp/state
sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')

now() { date +%s.%N; }
rate() { "$PY" -c 'import sys; print("%.1f" % (float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e6))' "$size" "$1" "$2"; }

curl_put() {
    local t0 t1
    t0=$(now)
    curl -sSf "${sign[@]}" -T "$STORE" "$S3_URL/b/curl.dlc" -o /dev/null
    t1=$(now)
    rate "$t0" "$t1"
}

push() { # push SRC ARGS...: MB/s from the tool's own report; its seconds, the seconds s3rver
    # took to complete the uploads and those spent hashing the whole file for s3rver's
    # plain-MD5 ETag go to $out/phases.
    local src=$1
    shift
    "$DLC_BIN/cachewarm" push "$src" s3://b/push.dlc --endpoint "$S3_URL" --json -q "$@" \
        >"$out/p.json"
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f" % (r["bytes"]/r["seconds"]/1e6)); open(sys.argv[2],"a").write("%.3f %.3f %.3f\n" % (r["seconds"], r["complete_seconds"], r["verify_seconds"]))' \
        "$out/p.json" "$out/phases"
}

declare -A res
names=(curl_T push_1x256M push_8x16M push_4x64M push_16x8M)
[ "$have_set" = 0 ] || names+=(push_set4_8x16M)
for r in $(seq 1 "$ROUNDS"); do
    res[curl_T]+=" $(curl_put)"
    res[push_1x256M]+=" $(push "$STORE" --connections 1 --part-size 256M)"
    res[push_8x16M]+=" $(push "$STORE" --connections 8 --part-size 16M)"
    res[push_4x64M]+=" $(push "$STORE" --connections 4 --part-size 64M)"
    res[push_16x8M]+=" $(push "$STORE" --connections 16 --part-size 8M)"
    [ "$have_set" = 0 ] || res[push_set4_8x16M]+=" $(push "$warm_tmp/set" --connections 8 --part-size 16M)"
done
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "object: $size bytes, $ROUNDS rounds, loopback s3rver $S3RVER_VERSION"
printf '%-18s %10s   %s\n' "method" "MB/s" "runs"
for n in "${names[@]}"; do
    printf '%-18s %10s  %s\n' "$n" "$(median "${res[$n]}")" "${res[$n]}"
done
"$PY" - "$out/phases" <<'PYEOF'
import sys
v = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda xs: sorted(xs)[len(xs) // 2]
print("push, median over every push run: %.0f%% of the wall time waiting for s3rver to complete "
      "the uploads (it copies the parts into the object), %.0f%% hashing the whole file for its "
      "plain-MD5 ETag" % (100 * med([c / s for s, c, h in v]), 100 * med([h / s for s, c, h in v])))
PYEOF

#!/usr/bin/env bash
# A mixture of stores against one store of the same records (docs/BENCHMARKS.md, "Mixtures"):
# `cachebench load A B C --weights ...` and `cachebench load ONE` with the same options, at each
# thread count, interleaved round by round (the order alternating) because the machine is shared:
# each round's ratio compares runs seconds apart. Prints per thread count the median samples/s of
# each, the median of the per-round ratios mixture/single, and the same for the loader's fraction
# of its own memcpy ceiling (which cancels the machine's load when it moves within a round).
#
#   tests/bench/bench_mix.sh ONE.dlc A.dlc B.dlc C.dlc [cachebench load options...]
#
# Environment: BIN (default build/bin), PY (default /usr/bin/python3), THREADS (default "1 2"),
# ROUNDS (default 5), SECONDS_EACH (default 2), WEIGHTS (default the sources' record counts:
# the mixture then draws every record as often as the single store).
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 ONE.dlc A.dlc B.dlc C.dlc [cachebench load options...]" >&2
    exit 2
fi
ONE=$1 A=$2 B=$3 C=$4
shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE/../../build/bin}
PY=${PY:-/usr/bin/python3}
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-2}
[ -x "$BIN/cachebench" ] || { echo "$0: $BIN/cachebench not found (build first)" >&2; exit 1; }
count() {
    "$BIN/cacheinfo" "$1" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["count"])'
}
WEIGHTS=${WEIGHTS:-$(count "$A"),$(count "$B"),$(count "$C")}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # NAME THREADS ROUND STORE...
    local name=$1 t=$2 r=$3
    shift 3
    "$BIN/cachebench" load "$@" --threads "$t" --seconds "$SECONDS_EACH" --json \
        >"$tmp/$name-$t-$r.json" 2>"$tmp/$name-$t-$r.err"
}
for t in $THREADS; do
    for r in $(seq 1 "$ROUNDS"); do
        echo "threads $t round $r ..." >&2
        if [ $((r % 2)) = 1 ]; then
            run one "$t" "$r" "$ONE" "$@"
            run mix "$t" "$r" "$A" "$B" "$C" --weights "$WEIGHTS" "$@"
        else
            run mix "$t" "$r" "$A" "$B" "$C" --weights "$WEIGHTS" "$@"
            run one "$t" "$r" "$ONE" "$@"
        fi
    done
    grep -h "mixture: source" "$tmp/mix-$t-1.err" >&2 || true
done
"$PY" - "$tmp" "$THREADS" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
tmp, threads, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
for t in threads:
    one = [json.load(open("%s/one-%s-%d.json" % (tmp, t, r))) for r in range(1, rounds + 1)]
    mix = [json.load(open("%s/mix-%s-%d.json" % (tmp, t, r))) for r in range(1, rounds + 1)]
    sps = [m["samples_per_s"] / o["samples_per_s"] for o, m in zip(one, mix)]
    ceil = [m["ratio_to_ceiling"] / o["ratio_to_ceiling"] for o, m in zip(one, mix)]
    print("threads %s: single %.0f samples/s, mixture %.0f samples/s (medians of %d rounds); "
          "mixture/single per round: median %.3f (min %.3f, max %.3f); of each run's ceiling: "
          "median %.3f"
          % (t, statistics.median(o["samples_per_s"] for o in one),
             statistics.median(m["samples_per_s"] for m in mix), rounds,
             statistics.median(sps), min(sps), max(sps), statistics.median(ceil)))
PYEOF

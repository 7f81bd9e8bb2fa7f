#!/usr/bin/env bash
# Sweep worker threads 1..nproc: for each count, one `cachebench load` run that
# measures the memcpy ceiling, the loader and the decode-every-epoch path on
# that many threads, and collect the results into one JSON file that
# tests/bench/plot_bench.py turns into docs/bench_threads.svg.
#
#   tests/bench/bench_threads.sh STORE JPEGDIR OUT.json [extra cachebench load options]
#
# Environment: BIN (default build/bin), PY (default /usr/bin/python3),
# THREADS (space-separated counts, default "1 2 ... nproc"), SVG (default
# docs/bench_threads.svg; empty for none). Extra options go to every run, for
# example --dtype float16 or --random-resized-crop; the defaults are the
# issue's main case: uint8 224 random crop + flip, batch 256, prefetch 4.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 STORE JPEGDIR OUT.json [cachebench load options...]" >&2
    exit 2
fi
STORE=$1 JPEGDIR=$2 OUT=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE/../../build/bin}
PY=${PY:-/usr/bin/python3}
THREADS=${THREADS:-$(seq -s ' ' 1 "$(nproc)")}
SVG=${SVG-$HERE/../../docs/bench_threads.svg}

[ -x "$BIN/cachebench" ] || { echo "$0: $BIN/cachebench not found (build first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for t in $THREADS; do
    echo "threads $t ..." >&2
    "$BIN/cachebench" load "$STORE" --threads "$t" --batch 256 --prefetch 4 --crop 224 \
        --dtype uint8 --jpeg-dir "$JPEGDIR" "$@" --json >"$tmp/t$t.json"
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("  loader %.0f samples/s (%.0f%% of ceiling %.2f GB/s), jpeg %.0f samples/s, %.1fx"
      % (r["samples_per_s"], 100*r["ratio_to_ceiling"], r["ceiling_gbytes_per_s"],
         r["jpeg_samples_per_s"], r["speedup_vs_jpeg"]))' "$tmp/t$t.json" >&2
done

# One document: when and where it was measured, then one result per count.
"$PY" - "$OUT" "$tmp" $THREADS <<'PYEOF'
import json, os, platform, sys, time
out, tmp, counts = sys.argv[1], sys.argv[2], sys.argv[3:]
cpu = ""
try:
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
except OSError:
    pass
doc = {
    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "host": {"cpu": cpu, "nproc": os.cpu_count(), "kernel": platform.release()},
    "runs": [json.load(open(os.path.join(tmp, f"t{t}.json"))) for t in counts],
}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
PYEOF
echo "wrote $OUT" >&2
if [ -n "$SVG" ]; then
    "$PY" "$HERE/plot_bench.py" "$OUT" -o "$SVG"
    echo "wrote $SVG" >&2
fi

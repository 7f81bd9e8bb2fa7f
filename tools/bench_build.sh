#!/usr/bin/env bash
# The builder against plain decoding, interleaved: for each round and each thread count T,
# `cachebench decode SOURCE --threads T` (full-size libjpeg-turbo decode of the same files, in
# memory), `cachebuild SOURCE --threads T` (a single store) and `cachebuild SOURCE --shards 2
# --threads T` (a set of 2 parts), one after the other, so that the machine's load moves all
# three alike. Prints one line per run (load average before it, images/s, images/s per thread,
# the ratio to the decode of the same round and T, and the build's CPU seconds per image), and
# writes them as JSON lines to OUT.
#
#   tools/bench_build.sh SOURCE OUT.jsonl [ROUNDS (3)] [THREADS ("1 2")]
#
# Environment: BIN (default build/bin), PY (default /usr/bin/python3), WORK (a directory for
# the stores, default a fresh one under TMPDIR; it needs about twice the store's size),
# SECONDS_DECODE (the decode's window, default 3), EXTRA (more cachebuild options, for example
# "--encoding jpeg").
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 SOURCE OUT.jsonl [ROUNDS] [THREADS]" >&2
    exit 2
fi
SOURCE=$1 OUT=$2 ROUNDS=${3:-3} THREADS=${4:-"1 2"}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE/../build/bin}
PY=${PY:-/usr/bin/python3}
SECONDS_DECODE=${SECONDS_DECODE:-3}
read -r -a extra <<<"${EXTRA:-}"
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
: >"$OUT"

# run KIND T ROUND CMD...: time CMD, and append its JSON with the load, CPU time and labels.
run() {
    local kind=$1 t=$2 round=$3
    shift 3
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f '%U %S %e' -o "$work/time" "$@" >"$work/out.json" 2>/dev/null
    "$PY" - "$work/out.json" "$work/time" "$kind" "$t" "$round" "$load" >>"$OUT" <<'EOF'
import json, sys
out, tm, kind, t, rnd, load = sys.argv[1:]
d = json.load(open(out))
user, sys_, wall = (float(x) for x in open(tm).read().split()[-3:])
n = d.get("count", 0) + d.get("skipped_count", 0) if kind != "decode" else d["images"]
print(json.dumps({"kind": kind, "threads": int(t), "round": int(rnd), "load": float(load),
                  "images_per_s": d["images_per_s"], "images": n, "wall_s": wall,
                  "cpu_s": user + sys_, "user_s": user, "sys_s": sys_}))
EOF
}

for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        run decode "$t" "$r" "$BIN/cachebench" decode "$SOURCE" --threads "$t" \
            --seconds "$SECONDS_DECODE" --json
        run store "$t" "$r" "$BIN/cachebuild" "$SOURCE" -o "$work/one.dlc" --threads "$t" \
            --force "${extra[@]}" --json
        rm -f "$work/one.dlc"
        run shards2 "$t" "$r" "$BIN/cachebuild" "$SOURCE" -o "$work/set" --shards 2 \
            --threads "$t" --force "${extra[@]}" --json
        rm -rf "$work/set"
        echo "round $r threads $t done" >&2
    done
done

"$PY" - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dec = {(r["round"], r["threads"]): r["images_per_s"] for r in rows if r["kind"] == "decode"}
print("%-8s %3s %5s %6s %10s %12s %7s %12s" % ("kind", "T", "round", "load", "images/s",
                                               "per thread", "ratio", "CPU ms/img"))
for r in rows:
    ratio = r["images_per_s"] / dec[(r["round"], r["threads"])]
    cpu = 1000 * r["cpu_s"] / r["images"] if r["kind"] != "decode" else 1000 * r["threads"] / r["images_per_s"]
    print("%-8s %3d %5d %6.2f %10.0f %12.0f %7.2f %12.2f" % (
        r["kind"], r["threads"], r["round"], r["load"], r["images_per_s"],
        r["images_per_s"] / r["threads"], ratio, cpu))
EOF

#!/usr/bin/env bash
# The builder against plain decoding, interleaved: for each round and each thread count T,
# `cachebench decode SOURCE --threads T` (full-size libjpeg-turbo decode of the same files, in
# memory), `cachebuild SOURCE --threads T` (a single store) and `cachebuild SOURCE --shards 2
# --threads T` (a set of 2 parts), one after the other, so that the machine's load moves all
# three alike. Prints one line per run (load average before it, images/s, images/s per thread,
# the ratio to the decode of the same round and T, and the build's user and system CPU time per
# image), and writes them as JSON lines to OUT. The two builds take turns at going first.
#
#   tests/bench/bench_build.sh SOURCE OUT.jsonl [ROUNDS (3)] [THREADS ("1 2")]
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
BIN=${BIN:-$HERE/../../build/bin}
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
    if ! /usr/bin/time -f '%U %S %e' -o "$work/time" "$@" >"$work/out.json" 2>"$work/err"; then
        echo "$0: failed: $*" >&2
        tail -5 "$work/err" >&2
        exit 1
    fi
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

store() {
    run store "$1" "$2" "$BIN/cachebuild" "$SOURCE" -o "$work/one.dlc" --threads "$1" --force \
        "${extra[@]}" --json
    rm -f "$work/one.dlc"
}
shards2() {
    run shards2 "$1" "$2" "$BIN/cachebuild" "$SOURCE" -o "$work/set" --shards 2 --threads "$1" \
        --force "${extra[@]}" --json
    rm -rf "$work/set"
}

# The two builds take turns at going first: on a VM the first write after a pause pays for
# fresh memory (the host backs the pages the guest freed a while ago again; system time
# doubles), and the one right after reuses the pages the other's store just freed.
for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        run decode "$t" "$r" "$BIN/cachebench" decode "$SOURCE" --threads "$t" \
            --seconds "$SECONDS_DECODE" --json
        if [ $((r % 2)) = 1 ]; then
            store "$t" "$r"
            shards2 "$t" "$r"
        else
            shards2 "$t" "$r"
            store "$t" "$r"
        fi
        echo "round $r threads $t done" >&2
    done
done

"$PY" - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dec = {(r["round"], r["threads"]): r["images_per_s"] for r in rows if r["kind"] == "decode"}
# CPU ms per image: a build's user and system time over its images; a decode's threads x its
# window over the images it decoded (its process time includes reading the files first).
print("%-8s %3s %5s %6s %10s %12s %7s %10s %10s" % (
    "kind", "T", "round", "load", "images/s", "per thread", "ratio", "user ms", "sys ms"))
for r in rows:
    ratio = r["images_per_s"] / dec[(r["round"], r["threads"])]
    if r["kind"] == "decode":
        user, sys_ = 1000 * r["threads"] / r["images_per_s"], 0.0
    else:
        user, sys_ = 1000 * r["user_s"] / r["images"], 1000 * r["sys_s"] / r["images"]
    print("%-8s %3d %5d %6.2f %10.0f %12.0f %7.2f %10.2f %10.2f" % (
        r["kind"], r["threads"], r["round"], r["load"], r["images_per_s"],
        r["images_per_s"] / r["threads"], ratio, user, sys_))
EOF

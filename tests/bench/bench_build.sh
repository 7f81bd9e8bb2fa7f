#!/usr/bin/env bash
# The builder against its two ceilings, interleaved: for each round and each thread count T,
# `cachebench decode SOURCE --threads T --size 256 --center-crop` (the plain libjpeg-turbo decode
# at full size, then the builder's own decode + resize to 256, both in memory on the same files:
# the fair ceiling), `cachebuild SOURCE --threads T` (a single store) and `cachebuild SOURCE
# --shards 2 --threads T` (a set of 2 parts), one after the other, so that the machine's load
# moves them alike. With BASE (the bin directory of another build, for example eda0975's) each
# build also runs with BASE's cachebuild right beside it, the two taking turns at going first.
# Prints one line per run (load average before it, images/s, images/s per thread, the ratios to
# the plain and the resize ceilings of the same round and T, and the build's user and system CPU
# time per image), then per kind and T the median and spread of the ratio to the resize ceiling
# (and, with BASE, of new over base, pair by pair), and writes the runs as JSON lines to OUT.
#
#   tests/bench/bench_build.sh SOURCE OUT.jsonl [ROUNDS (3)] [THREADS ("1 2")]
#
# Environment: BIN (default build/bin), BASE (unset: no baseline), PY (default /usr/bin/python3),
# WORK (a directory for the stores, default a fresh one under TMPDIR; it needs about twice the
# store's size), SECONDS_DECODE (each ceiling's window, default 3), SIZE (default 256), KINDS
# (default "store shards2"; shardsN is a set of N parts), EXTRA (more cachebuild options, for
# example "--encoding jpeg"). Without /usr/bin/time (Ubuntu's minimal images have none) the
# user and system times come from PY's os.wait4() instead.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 SOURCE OUT.jsonl [ROUNDS] [THREADS]" >&2
    exit 2
fi
SOURCE=$1 OUT=$2 ROUNDS=${3:-3} THREADS=${4:-"1 2"}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE/../../build/bin}
BASE=${BASE:-}
PY=${PY:-/usr/bin/python3}
SECONDS_DECODE=${SECONDS_DECODE:-3}
SIZE=${SIZE:-256}
KINDS=${KINDS:-"store shards2"}
read -r -a extra <<<"${EXTRA:-}"
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
: >"$OUT"

# timed FILE CMD...: run CMD, writing "USER SYS WALL" seconds into FILE, as /usr/bin/time -f
# '%U %S %e' does; CMD's exit status.
timed() {
    local f=$1
    shift
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f '%U %S %e' -o "$f" "$@"
        return
    fi
    "$PY" -c 'import os, subprocess, sys, time
t = time.monotonic()
p = subprocess.Popen(sys.argv[2:])
_, status, ru = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write("%.2f %.2f %.2f\n" % (ru.ru_utime, ru.ru_stime, time.monotonic() - t))
sys.exit(os.waitstatus_to_exitcode(status))' "$f" "$@"
}

# run KIND T ROUND CMD...: time CMD, and append its JSON with the load, CPU time and labels.
run() {
    local kind=$1 t=$2 round=$3
    shift 3
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    if ! timed "$work/time" "$@" >"$work/out.json" 2>"$work/err"; then
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
row = {"kind": kind, "threads": int(t), "round": int(rnd), "load": float(load),
       "images_per_s": d["images_per_s"], "images": n, "wall_s": wall,
       "cpu_s": user + sys_, "user_s": user, "sys_s": sys_}
if kind == "decode":
    row["resize_images_per_s"] = d["resize_images_per_s"]
    row["cpu_ms"] = d["cpu_ms_per_image"]
    row["resize_cpu_ms"] = d["resize_cpu_ms_per_image"]
print(json.dumps(row))
EOF
}

# build KIND T ROUND BINDIR: one build of KIND (store: a single store; shardsN: a set of N
# parts) with BINDIR's cachebuild, labelled KIND, or KIND-base for BASE's.
build() {
    local kind=$1 t=$2 r=$3 bin=$4 label=$1 out
    [ "$bin" = "$BIN" ] || label=$kind-base
    if [ "$kind" = store ]; then
        out=$work/one.dlc
        run "$label" "$t" "$r" "$bin/cachebuild" "$SOURCE" -o "$out" --threads "$t" --force \
            --size "$SIZE" "${extra[@]}" --json
    else
        out=$work/set
        run "$label" "$t" "$r" "$bin/cachebuild" "$SOURCE" -o "$out" --shards "${kind#shards}" \
            --threads "$t" --force --size "$SIZE" "${extra[@]}" --json
    fi
    rm -rf "$out"
}

# The builds take turns at going first: on a VM the first write after a pause pays for fresh
# memory (the host backs the pages the guest freed a while ago again; system time doubles), and
# the one right after reuses the pages the other's store just freed.
for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        run decode "$t" "$r" "$BIN/cachebench" decode "$SOURCE" --threads "$t" \
            --seconds "$SECONDS_DECODE" --size "$SIZE" --center-crop --json
        for kind in $KINDS; do
            if [ -z "$BASE" ]; then
                build "$kind" "$t" "$r" "$BIN"
            elif [ $((r % 2)) = 1 ]; then
                build "$kind" "$t" "$r" "$BIN"
                build "$kind" "$t" "$r" "$BASE"
            else
                build "$kind" "$t" "$r" "$BASE"
                build "$kind" "$t" "$r" "$BIN"
            fi
        done
        echo "round $r threads $t done" >&2
    done
done

"$PY" - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dec = {(r["round"], r["threads"]): r for r in rows if r["kind"] == "decode"}
# CPU ms per image: a build's user and system time over its images; a decode's, its threads' CPU
# time in the window (its process time includes reading the files first). On a loaded machine
# images/s moves with the load and CPU time per image much less: "cpu" is the resize ceiling's CPU
# ms per image over the build's, the share of the build's CPU time that is the ceiling's work.
print("%-13s %3s %5s %6s %9s %10s %7s %7s %8s %8s %5s" % (
    "kind", "T", "round", "load", "images/s", "per thread", "/plain", "/resize", "user ms",
    "sys ms", "cpu"))
for r in rows:
    d = dec[(r["round"], r["threads"])]
    if r["kind"] == "decode":
        for name, ips, cpu in (("decode", r["images_per_s"], r["cpu_ms"]),
                               ("decode+resize", r["resize_images_per_s"], r["resize_cpu_ms"])):
            print("%-13s %3d %5d %6.2f %9.0f %10.0f %7.2f %7.2f %8.2f %8s %5.2f" % (
                name, r["threads"], r["round"], r["load"], ips, ips / r["threads"],
                ips / d["images_per_s"], ips / d["resize_images_per_s"], cpu, "-",
                d["resize_cpu_ms"] / cpu))
        continue
    print("%-13s %3d %5d %6.2f %9.0f %10.0f %7.2f %7.2f %8.2f %8.2f %5.2f" % (
        r["kind"], r["threads"], r["round"], r["load"], r["images_per_s"],
        r["images_per_s"] / r["threads"], r["images_per_s"] / d["images_per_s"],
        r["images_per_s"] / d["resize_images_per_s"], 1000 * r["user_s"] / r["images"],
        1000 * r["sys_s"] / r["images"], d["resize_cpu_ms"] / (1000 * r["cpu_s"] / r["images"])))


def spread(v):
    return "median %.2f (%.2f-%.2f, %d runs)" % (statistics.median(v), min(v), max(v), len(v))


print()
for kind, t in sorted({(r["kind"], r["threads"]) for r in rows if r["kind"] != "decode"}):
    mine = {r["round"]: r for r in rows if r["kind"] == kind and r["threads"] == t}
    ratio = [m["images_per_s"] / dec[(k, t)]["resize_images_per_s"] for k, m in mine.items()]
    sys_ms = [1000 * m["sys_s"] / m["images"] for m in mine.values()]
    cpu = [dec[(k, t)]["resize_cpu_ms"] / (1000 * m["cpu_s"] / m["images"])
           for k, m in mine.items()]
    print("%-12s T=%d: of the resize ceiling %s; cpu %s; sys ms/image median %.2f" % (
        kind, t, spread(ratio), spread(cpu), statistics.median(sys_ms)))
    base = {r["round"]: r for r in rows if r["kind"] == kind + "-base" and r["threads"] == t}
    pairs = [mine[k]["images_per_s"] / base[k]["images_per_s"] for k in mine if k in base]
    if pairs:
        print("%-12s T=%d: over the base, pair by pair: %s" % (kind, t, spread(pairs)))
EOF

#!/usr/bin/env bash
# Two builds of dlcache against each other on the same data, interleaved: each builds its own
# store from SOURCE (--size 256), then for each round and each case (uint8 random crop with the
# JPEG path, float16 and float32 normalized, uint8 RandomResizedCrop) the OLD loader on its store
# and the NEW loader on its store run one after the other, `cachebench load --seconds 6 --json`
# on 2 threads, batch 256, crop 224, so that the machine's load moves both alike. The NEW loader
# also reads the OLD store in the uint8 case (a store of an older format must not read slower).
# Prints one line per run: samples/s, the ceiling of the same run, the share of it, the JPEG
# path's speed-up, the load average after.
#
#   tests/bench/bench_compare.sh OLD_BIN NEW_BIN SOURCE [ROUNDS (2)] [THREADS (2)]
#
# OLD_BIN and NEW_BIN are build/bin folders (for the old one: `git worktree add /tmp/old REV`
# and a build there). Environment: WORK (the stores, default a fresh folder under TMPDIR; it
# needs twice the store's size), PY (default /usr/bin/python3), SECONDS_LOAD (default 6).
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_BIN NEW_BIN SOURCE [ROUNDS] [THREADS]" >&2
    exit 2
fi
old=$1 new=$2 src=$3 rounds=${4:-2} threads=${5:-2}
PY=${PY:-/usr/bin/python3}
secs=${SECONDS_LOAD:-6}
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/bench_compare.XXXXXX")}
mkdir -p "$work"
"$old/cachebuild" "$src" -o "$work/old.dlc" --size 256 --force --threads "$threads" >/dev/null 2>&1
"$new/cachebuild" "$src" -o "$work/new.dlc" --size 256 --force --threads "$threads" >/dev/null 2>&1

for r in $(seq "$rounds"); do
    for c in uint8 float16 float32 rrc; do
        dtype=$c extra=()
        [ "$c" = rrc ] && dtype=uint8 extra=(--random-resized-crop)
        [ "$c" = uint8 ] && extra=(--jpeg-dir "$src")
        for v in old new new-on-old; do
            [ "$v" = new-on-old ] && [ "$c" != uint8 ] && continue
            case $v in
            old) bin=$old store=$work/old.dlc ;;
            new) bin=$new store=$work/new.dlc ;;
            new-on-old) bin=$new store=$work/old.dlc ;;
            esac
            "$bin/cachebench" load "$store" --batch 256 --threads "$threads" --prefetch 4 \
                --crop 224 --dtype "$dtype" "${extra[@]}" --seconds "$secs" --json \
                2>/dev/null >"$work/out.json"
            "$PY" - "$work/out.json" "$r" "$v" "$c" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
x = d.get("speedup_vs_jpeg")
print("round %s  %-10s %-7s %9.0f samples/s  ceiling %5.2f GB/s  share %.2f  %s  load %s" % (
    sys.argv[2], sys.argv[3], sys.argv[4], d["samples_per_s"], d["ceiling_gbytes_per_s"],
    d["ratio_to_ceiling"], "jpeg x%.1f" % x if x else "         ",
    open("/proc/loadavg").read().split()[0]))
EOF
        done
    done
done
[ -n "${WORK:-}" ] || rm -rf "$work"

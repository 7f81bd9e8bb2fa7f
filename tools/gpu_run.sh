#!/usr/bin/env bash
# run.sh [--quick] [--keep]: the GPU checks of a bundle made by tools/gpu_bundle.sh (this file is
# tools/gpu_run.sh, copied in as DIR/run.sh). Builds nothing and needs no network: everything
# comes from the bundle's folder, wherever it was copied.
#
# Steps, each bounded by a timeout and recorded as pass, fail or skip (with the reason):
#   data             mkdemo makes the JPEGs (12,000; --quick 4,000; 600 without a GPU),
#                    cachebuild the store at 256, in $WORK, else /dev/shm when it has room, else a
#                    temporary folder (removed at the end unless --keep)
#   build_rate       the builder against its ceilings on the same JPEGs and cores: cachebench
#                    decode --size 256 (plain decode, then the builder's decode + resize, in
#                    memory), cachebuild of a store and of a set of 4 parts on every core (at
#                    most 64), and (not with --quick) of a store on 1 thread, for the scaling
#   plugin_test      the C test of the CUDA plugin (Criterion), when bundled
#   bench_host       cachebench load: RandomResizedCrop 224, float16, batch 256, cores-1 threads
#   bench_device     the same with --device 0: each batch emitted (dlc_loader_device_emit) on the
#                    default stream into cachebench's device buffers, so the conversion kernel
#                    runs (float16 NCHW); samples/s on the device and its ratio to host, the
#                    copies' GB/s against the pinned-copy ceiling measured in the same run
#   bench_device_nhwc  the same, float16 channels_last (--device-layout nhwc)
#   bench_device_u8  the same, uint8 (NHWC: copied as staged, no kernel)
#   bench_device_lend  the same as bench_device in lend mode (--device-lend): staged batches
#                    waited for and released, no kernel; what the conversion costs is the gap
#   pytest_plugin    tests/python/test_device.py and test_mix.py's device case (a mixture's
#                    batches on the GPU equal the host's) with DLCACHE_DEVICE_BACKEND=plugin
#   pytest_torch     the same with DLCACHE_DEVICE_BACKEND=torch
#   memcheck_bench   compute-sanitizer --tool memcheck over 6 small batches of bench_device
#                    (the kernel, float16 NCHW) and of bench_device_nhwc
#   racecheck_bench  compute-sanitizer --tool racecheck over the same
#   train            examples/train_gpu.py: resnet18 and resnet50 on synthetic, dlcache (both
#                    backends; --quick: the default one) and torch DataLoader inputs
#   memcheck_plugin_test, racecheck_plugin_test  the sanitizers over the plugin's C test, which
#                    runs the conversion kernel (not with --quick)
# The whole run is held to $RUN_BUDGET seconds (default 450; --quick 300): a step gets at most
# what is left, and a step that would start with too little is skipped saying so.
#
# Without a GPU (nvidia-smi missing or failing, or torch.cuda unavailable) the steps that can run
# do (the data, host cachebench, the tests, which skip their GPU cases saying why); the others
# are skipped with the reason. Writes DIR/results.json (or $RESULTS) and prints a table last.
# Exit status: 0 unless a step failed.
#
# Knobs (environment): RESULTS (file; the logs go to logs/ beside it: RESULTS=$OUT/results.json
# brings them back from a device run), WORK, RUN_BUDGET, PYTHON (default python3), COUNT,
# WARMUP, STEPS, BACKENDS (train's dlcache backends), TRAIN_ARGS (more train_gpu.py options,
# e.g. "--models resnet50"), WINDOW (cachebench seconds).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
QUICK=0
KEEP=0
for a in "$@"; do
    case "$a" in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done

PY=${PYTHON:-python3}
T0=$(date +%s)
BUDGET=${RUN_BUDGET:-$([ "$QUICK" = 1 ] && echo 300 || echo 450)}
RESULTS=${RESULTS:-$HERE/results.json}
CORES=$(nproc)
THREADS=$((CORES > 1 ? CORES - 1 : 1))
BIN=$HERE/bin

export DLCACHE_LIB=$HERE/lib/libdlcache.so
export DLCACHE_BUILD_DIR=$HERE
export DLCACHE_CUDA_PLUGIN=$HERE/lib/libdlcache_cuda.so
# mkdemo's photographs: the bundle's copy of Debian's mate-backgrounds, unless the caller names
# others.
export DLCACHE_DEMO_PHOTOS=${DLCACHE_DEMO_PHOTOS:-$HERE/share/photos}
export PYTHONPATH=$HERE/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
[ -f "$DLCACHE_CUDA_PLUGIN" ] || unset DLCACHE_CUDA_PLUGIN

say() { printf '\n== %s\n' "$*"; }
elapsed() { echo $(($(date +%s) - T0)); }

# ---- What this machine has ---------------------------------------------------------------------
GPU=1
GPU_WHY=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
    GPU=0 GPU_WHY="nvidia-smi not found"
elif ! GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1) \
    || [ -z "$GPU_NAME" ]; then
    GPU=0 GPU_WHY="nvidia-smi failed: $GPU_NAME"
fi
TORCH=$("$PY" -c 'import torch; print(torch.__version__, int(torch.cuda.is_available()))' 2>/dev/null)
TORCH_VERSION=${TORCH% *}
TORCH_CUDA=${TORCH##* }
if [ -z "$TORCH" ]; then
    TORCH_VERSION=none TORCH_CUDA=0
    [ "$GPU" = 1 ] && GPU_WHY="$PY cannot import torch"
    GPU=0
elif [ "$TORCH_CUDA" != 1 ] && [ "$GPU" = 1 ]; then
    GPU=0 GPU_WHY="torch $TORCH_VERSION: torch.cuda.is_available() is False"
fi
PYTEST_FROM=python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
    export PYTHONPATH=$PYTHONPATH:$HERE/pylib
    PYTEST_FROM=bundle
fi
SANITIZER=""
for c in "$(command -v compute-sanitizer 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
    /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-13.0/bin/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { SANITIZER=$c; break; }
done

if [ "$QUICK" = 1 ]; then
    COUNT=${COUNT:-4000} WARMUP=${WARMUP:-20} STEPS=${STEPS:-30} BACKENDS=${BACKENDS:-default}
    WINDOW=${WINDOW:-2}
else
    COUNT=${COUNT:-12000} WARMUP=${WARMUP:-40} STEPS=${STEPS:-60} BACKENDS=${BACKENDS:-plugin,torch}
    WINDOW=${WINDOW:-3}
fi
[ "$GPU" = 1 ] || { COUNT=${COUNT_NO_GPU:-600}; WINDOW=1; }

# ---- Work folder: $WORK, /dev/shm with room, or a temporary one ----------------------------------
need_kb=$((COUNT * 600 + 1048576)) # about 250 KB of JPEG + store per image, twice, and 1 GiB
if [ -n "${WORK:-}" ]; then
    mkdir -p "$WORK" && BASE=$WORK
elif [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt "$need_kb" ]; then
    BASE=/dev/shm
else
    BASE=${TMPDIR:-/tmp}
fi
W=$(mktemp -d "$BASE/dlcache-gpu-run.XXXXXX") || { echo "run.sh: cannot make a folder in $BASE" >&2; exit 1; }
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$W"; }
trap cleanup EXIT
LOGS=$W/logs
mkdir -p "$LOGS"
DATA=$W/data
STORE=$W/train.dlc

# ---- Steps -------------------------------------------------------------------------------------
NAMES=() STATUS=() SECS=() INFO=()
record() { # record NAME STATUS SECONDS INFO
    NAMES+=("$1") STATUS+=("$2") SECS+=("$3") INFO+=("$(printf '%s' "$4" | tr '\t\n' '  ')")
    printf '%s: %s (%ss) %s\n' "$1" "$2" "$3" "$4"
}
skip() { record "$1" skip 0 "$2"; }

# run_step NAME TIMEOUT CMD...: run CMD in HERE with its output in LOGS/NAME.log; sets RC and
# DUR. RC 124/137 is a timeout. Returns 1 (after recording a skip) when the budget is spent.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - $(elapsed)))
    if [ "$left" -lt 15 ]; then
        skip "$name" "the run's budget of ${BUDGET}s is spent"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "$name (at most ${limit}s): $*"
    local t
    t=$(date +%s)
    (cd "$HERE" && timeout -k 10 "$limit" "$@") >"$LOGS/$name.log" 2>&1
    RC=$?
    DUR=$(($(date +%s) - t))
    tail -n 15 "$LOGS/$name.log"
    if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
        record "$name" fail "$DUR" "timed out after ${limit}s"
        RC=124
    fi
    return 0
}
timed_out() { [ "$RC" = 124 ]; }

to_file() { # to_file OUT CMD...: CMD with its stdout into OUT (stderr stays the step's log)
    local out=$1
    shift
    "$@" >"$out"
}
export -f to_file

jget() { # jget FILE EXPR: a value of a JSON file, EXPR over `d`, formatted by Python
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

# A folded reason: the last line of LOG that matches PATTERN.
why() { grep -E "$2" "$1" | tail -1 | sed 's/^[a-z_]*: error: //' | cut -c1-300; }

say "bundle $(sed -n 's/^commit=//p' "$HERE/BUNDLE_INFO" 2>/dev/null) on $(hostname): ${CORES} cores," \
    "GPU ${GPU_NAME:-none}${GPU_WHY:+ ($GPU_WHY)}, torch $TORCH_VERSION, pytest from $PYTEST_FROM," \
    "compute-sanitizer ${SANITIZER:-missing}, work folder $W, budget ${BUDGET}s"

# data
# shellcheck disable=SC2016 # the arguments are expanded by the inner shell
if run_step data 240 bash -c '"$1/mkdemo" "$2" --count "$3" --threads "$4" >/dev/null &&
        "$1/cachebuild" "$2/train" -o "$5" --size 256 --threads "$4" --json >"$6"' _ \
        "$BIN" "$DATA" "$COUNT" "$((CORES > 64 ? 64 : CORES))" "$STORE" "$LOGS/build.json"; then
    if timed_out; then :
    elif [ "$RC" = 0 ] && [ -f "$STORE" ]; then
        record data pass "$DUR" "$COUNT JPEGs, store $(du -h "$STORE" | cut -f1); cachebuild $(jget "$LOGS/build.json" 'round(d["images_per_s"])') img/s"
    else
        record data fail "$DUR" "exit $RC: $(tail -1 "$LOGS/data.log")"
    fi
fi
HAVE_DATA=0
[ -f "$STORE" ] && HAVE_DATA=1

# build_rate: each build into a file of its own in $W, removed at once (the store stays).
# shellcheck disable=SC2016 # the arguments are expanded by the inner shell
if [ "$HAVE_DATA" = 0 ]; then
    skip build_rate "no data (the data step failed)"
elif run_step build_rate 150 bash -c 'b=$1 src=$2 t=$3 w=$4 logs=$5 one=$6
        "$b/cachebench" decode "$src" --threads "$t" --size 256 --center-crop --seconds 3 \
            --json >"$logs/rate_decode.json" &&
        "$b/cachebuild" "$src" -o "$w/rate.dlc" --size 256 --threads "$t" --json \
            >"$logs/rate_store.json" && rm -f "$w/rate.dlc" &&
        "$b/cachebuild" "$src" -o "$w/rate-set" --shards 4 --size 256 --threads "$t" --json \
            >"$logs/rate_set.json" && rm -rf "$w/rate-set" &&
        if [ "$one" = 1 ]; then
            "$b/cachebuild" "$src" -o "$w/rate1.dlc" --size 256 --threads 1 --json \
                >"$logs/rate_store1.json" && rm -f "$w/rate1.dlc"
        fi' _ "$BIN" "$DATA/train" "$((CORES > 64 ? 64 : CORES))" "$W" "$LOGS" "$((1 - QUICK))"; then
    if timed_out; then :
    elif [ "$RC" = 0 ]; then
        record build_rate pass "$DUR" "$("$PY" - "$LOGS" <<'EOF'
import json, os, sys
logs = sys.argv[1]
def get(name):
    p = os.path.join(logs, name)
    return json.load(open(p)) if os.path.exists(p) else None
d, st, se, s1 = (get(n) for n in ("rate_decode.json", "rate_store.json", "rate_set.json",
                                   "rate_store1.json"))
t, dec, rsz = d["threads"], d["images_per_s"], d["resize_images_per_s"]
out = "%d threads: decode %.0f, decode+resize %.0f img/s; store %.0f (%.2f of decode+resize), " \
      "set of 4 %.0f (%.2f)" % (t, dec, rsz, st["images_per_s"], st["images_per_s"] / rsz,
                                se["images_per_s"], se["images_per_s"] / rsz)
if s1:
    out += "; store on 1 thread %.0f (%.1fx at %d)" % (s1["images_per_s"],
                                                       st["images_per_s"] / s1["images_per_s"], t)
print(out)
EOF
)"
    else
        record build_rate fail "$DUR" "exit $RC: $(tail -1 "$LOGS/build_rate.log")"
    fi
fi

# plugin_test: Criterion's TAP report counts what ran and what skipped.
if [ ! -x "$HERE/tests/bin/test_cuda_plugin" ]; then
    skip plugin_test "test_cuda_plugin is not in the bundle (not built when it was made)"
elif run_step plugin_test 120 tests/bin/test_cuda_plugin --tap="$LOGS/plugin_test.tap" --jobs 4; then
    if ! timed_out; then
        tap=$LOGS/plugin_test.tap
        n=$(grep -cE '^(not )?ok' "$tap" 2>/dev/null)
        s=$(grep -c '# SKIP' "$tap" 2>/dev/null)
        f=$(grep -c '^not ok' "$tap" 2>/dev/null)
        if [ "$RC" != 0 ] || [ "${f:-0}" -gt 0 ]; then
            record plugin_test fail "$DUR" "exit $RC, $f of $n failed: $(grep -m1 '^not ok' "$tap")"
        elif [ "${s:-0}" -gt 0 ] && [ "$GPU" = 0 ]; then
            record plugin_test skip "$DUR" "$((n - s)) of $n passed, $s skipped: $(grep -m1 -o '# SKIP.*' "$tap" | cut -c8-200)"
        else
            record plugin_test pass "$DUR" "$((n - s)) of $n passed, $s skipped"
        fi
    fi
fi

# bench_host and bench_device: the same configuration, host batches and batches on GPU 0.
BENCH=(load "$STORE" --batch 256 --crop 224 --random-resized-crop --dtype float16
       --threads "$THREADS" --seconds "$WINDOW" --json)
HOST_SPS=""
if [ "$HAVE_DATA" = 0 ]; then
    skip bench_host "no store (the data step failed)"
elif run_step bench_host 60 bash -c 'to_file "$@"' _ "$LOGS/host.json" "$BIN/cachebench" "${BENCH[@]}" \
    && ! timed_out; then
    if [ "$RC" = 0 ]; then
        HOST_SPS=$(jget "$LOGS/host.json" 'round(d["samples_per_s"])')
        record bench_host pass "$DUR" "$HOST_SPS samples/s on $THREADS threads, $(jget "$LOGS/host.json" 'round(d["ratio_to_ceiling"] * 100)')% of memcpy"
    else
        record bench_host fail "$DUR" "exit $RC: $(why "$LOGS/bench_host.log" error)"
    fi
fi
# bench_dev NAME JSON ARGS...: cachebench load --device 0 with the host step's options and ARGS.
bench_dev() {
    local name=$1 json=$LOGS/$2.json
    shift 2
    if [ "$HAVE_DATA" = 0 ]; then
        skip "$name" "no store (the data step failed)"
        return
    fi
    run_step "$name" 60 bash -c 'to_file "$@"' _ "$json" "$BIN/cachebench" "${BENCH[@]}" \
        --device 0 "$@" || return
    timed_out && return
    if [ "$RC" = 0 ]; then
        local d=$json sps
        sps=$(jget "$d" 'round(d["device_samples_per_s"])')
        record "$name" pass "$DUR" "$(jget "$d" 'd["device_mode"]') $(jget "$d" 'd["device_image_dtype"]') $(jget "$d" 'd["device_image_layout"]'): $sps samples/s${HOST_SPS:+ (x$(jget "$d" "round(d['device_samples_per_s'] / $HOST_SPS, 2)") host)}; copy $(jget "$d" 'round(d["device_copy_gbytes_per_s"], 1)') GB/s of ceiling $(jget "$d" 'round(d["device_copy_ceiling_gbytes_per_s"], 1)') = $(jget "$d" 'round(d["device_copy_ratio_to_ceiling"] * 100)')%"
    elif [ "$GPU" = 0 ]; then
        record "$name" skip "$DUR" "$(why "$LOGS/$name.log" 'error')"
    else
        record "$name" fail "$DUR" "exit $RC: $(why "$LOGS/$name.log" 'error')"
    fi
}
bench_dev bench_device device
bench_dev bench_device_nhwc device_nhwc --device-layout nhwc
bench_dev bench_device_u8 device_u8 --dtype uint8
bench_dev bench_device_lend device_lend --device-lend

# pytest, once per backend. test_device.py imports numpy and torch at the top: a python3
# without them cannot even collect it.
PYTEST_MISSING=""
if ! PYTEST_ERR=$("$PY" -c 'import numpy, torch' 2>&1); then
    PYTEST_MISSING=$(printf '%s\n' "$PYTEST_ERR" | tail -1)
    PYTEST_MISSING=${PYTEST_MISSING:-import numpy, torch failed}
fi
for backend in plugin torch; do
    name=pytest_$backend
    if [ ! -f "$HERE/tests/python/test_device.py" ]; then
        skip "$name" "tests/python/test_device.py is not in the bundle"
        continue
    fi
    if [ -n "$PYTEST_MISSING" ]; then
        skip "$name" "$PY cannot import what test_device.py needs: $PYTEST_MISSING"
        continue
    fi
    mix_case=()
    [ ! -f "$HERE/tests/python/test_mix.py" ] ||
        mix_case=(tests/python/test_mix.py::test_device_batches_equal_the_host_ones)
    run_step "$name" 150 env DLCACHE_DEVICE_BACKEND=$backend "$PY" -m pytest -q -rs -p no:cacheprovider \
        --basetemp="$W/pytest-$backend" tests/python/test_device.py "${mix_case[@]}" || continue
    timed_out && continue
    summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed|skipped|error|deselected)|no tests ran' "$LOGS/$name.log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ in [0-9.]*s.*//')
    passed=$(echo "$summary" | grep -oE '[0-9]+ passed' | cut -d' ' -f1)
    first_skip=$(grep -m1 -E '^SKIPPED' "$LOGS/$name.log" | sed -E 's/^SKIPPED \[[0-9]+\] [^ ]+ //' | cut -c1-200)
    if [ "$RC" = 0 ] && [ "${passed:-0}" -gt 0 ]; then
        record "$name" pass "$DUR" "$summary${first_skip:+ (first skip: $first_skip)}"
    elif [ "$RC" = 0 ] || [ "$RC" = 5 ]; then
        record "$name" skip "$DUR" "${summary:-no tests ran}: $first_skip"
    else
        record "$name" fail "$DUR" "exit $RC: $summary"
    fi
done

# sanitize NAME TOOL CMD...: compute-sanitizer with TOOL over CMD, errors make it fail.
sanitize() {
    local name=$1 tool=$2
    shift 2
    if [ "$GPU" = 0 ]; then
        skip "$name" "no GPU: $GPU_WHY"
        return
    fi
    if [ -z "$SANITIZER" ]; then
        skip "$name" "compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
        return
    fi
    local extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    run_step "$name" 150 "$SANITIZER" --tool "$tool" "${extra[@]}" --target-processes all \
        --error-exitcode 9 "$@" || return
    timed_out && return
    local summary
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$name.log" | sed 's/^=* *//' | paste -sd ';' -)
    if [ "$RC" = 0 ]; then
        record "$name" pass "$DUR" "${summary:-no summary line}"
    else
        record "$name" fail "$DUR" "exit $RC: ${summary:-$(tail -1 "$LOGS/$name.log")}"
    fi
}
# Each sanitizer runs cachebench twice, the kernel writing NCHW then NHWC: 6 batches of 64 after
# the warm-up one and the ceiling's copies, a few seconds each under the sanitizer.
SMALL=(load "$STORE" --batch 64 --crop 224 --random-resized-crop --dtype float16 --threads 4
       --batches 6 --device 0)
if [ "$HAVE_DATA" = 0 ]; then
    skip memcheck_bench "no store"
    skip racecheck_bench "no store"
else
    sanitize memcheck_bench memcheck bash -c '"$@" && "$@" --device-layout nhwc' _ \
        "$BIN/cachebench" "${SMALL[@]}"
    sanitize racecheck_bench racecheck bash -c '"$@" && "$@" --device-layout nhwc' _ \
        "$BIN/cachebench" "${SMALL[@]}"
fi

# train
read -r -a train_args <<<"${TRAIN_ARGS:-}"
if [ "$HAVE_DATA" = 0 ]; then
    skip train "no data"
elif [ "$TORCH_VERSION" = none ]; then
    skip train "$PY cannot import torch"
elif run_step train 360 "$PY" examples/train_gpu.py --store "$STORE" --data "$DATA/train" \
    --models resnet18,resnet50 --backends "$BACKENDS" --warmup "$WARMUP" --steps "$STEPS" \
    --workers "$THREADS" --json "$LOGS/train.json" "${train_args[@]}" && ! timed_out; then
    if [ "$RC" = 77 ]; then
        record train skip "$DUR" "$(tail -1 "$LOGS/train.log")"
    else
        figs=$([ -f "$LOGS/train.json" ] && "$PY" - "$LOGS/train.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
out = []
for model, m in d["models"].items():
    parts = []
    for name, f in m.items():
        if f.get("error"):
            parts.append("%s error" % name)
        elif name == "synthetic":
            parts.append("synthetic %.0f" % f["img_per_s"])
        else:
            parts.append("%s %.0f (%.2f)" % (name, f["img_per_s"], f.get("fraction_of_synthetic", 0)))
    out.append("%s: %s" % (model, ", ".join(parts)))
print("; ".join(out) + " img/s")
EOF
)
        if [ "$RC" = 0 ]; then
            record train pass "$DUR" "$figs"
        else
            record train fail "$DUR" "exit $RC: ${figs:-$(tail -1 "$LOGS/train.log")}"
        fi
    fi
fi

# The sanitizers over the plugin's C test: the conversion kernel runs there.
if [ "$QUICK" = 1 ]; then
    skip memcheck_plugin_test "--quick"
    skip racecheck_plugin_test "--quick"
elif [ ! -x "$HERE/tests/bin/test_cuda_plugin" ]; then
    skip memcheck_plugin_test "test_cuda_plugin is not in the bundle"
    skip racecheck_plugin_test "test_cuda_plugin is not in the bundle"
else
    sanitize memcheck_plugin_test memcheck tests/bin/test_cuda_plugin --jobs 1
    sanitize racecheck_plugin_test racecheck tests/bin/test_cuda_plugin --jobs 1
fi

# ---- results.json and the table ------------------------------------------------------------------
OUTDIR=$(dirname "$RESULTS")/logs
mkdir -p "$OUTDIR" 2>/dev/null && cp "$LOGS"/* "$OUTDIR/" 2>/dev/null
TSV=$W/steps.tsv
for i in "${!NAMES[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "${INFO[$i]}"
done >"$TSV"
R_HERE=$HERE R_CORES=$CORES R_THREADS=$THREADS R_GPU_NAME=${GPU_NAME:-} R_GPU=$GPU \
R_GPU_WHY=$GPU_WHY R_TORCH=$TORCH_VERSION R_QUICK=$QUICK R_BUDGET=$BUDGET R_WALL=$(elapsed) \
R_SANITIZER=$SANITIZER R_PYTEST=$PYTEST_FROM R_WORK=$W \
    "$PY" - "$TSV" "$RESULTS" "$LOGS" <<'EOF' || echo "run.sh: could not write $RESULTS" >&2
import json, os, sys
tsv, out, logs = sys.argv[1:4]
e = os.environ
steps = []
for line in open(tsv):
    name, status, secs, info = line.rstrip("\n").split("\t", 3)
    steps.append({"step": name, "status": status, "seconds": int(secs), "info": info})
figures = {}
for n in ("build", "host", "device", "device_nhwc", "device_u8", "device_lend", "train"):
    p = os.path.join(logs, n + ".json")
    if os.path.exists(p):
        try:
            figures[n] = json.load(open(p))
        except ValueError:
            pass
info = os.path.join(e["R_HERE"], "BUNDLE_INFO")
bundle = dict(l.rstrip("\n").split("=", 1) for l in open(info) if "=" in l) \
    if os.path.exists(info) else {}
doc = {"bundle": bundle, "host": os.uname().nodename, "cores": int(e["R_CORES"]),
       "threads": int(e["R_THREADS"]), "gpu": e["R_GPU_NAME"], "gpu_usable": e["R_GPU"] == "1",
       "gpu_why": e["R_GPU_WHY"], "torch": e["R_TORCH"], "pytest": e["R_PYTEST"],
       "compute_sanitizer": e["R_SANITIZER"], "work": e["R_WORK"], "quick": e["R_QUICK"] == "1",
       "budget_s": int(e["R_BUDGET"]), "wall_s": int(e["R_WALL"]),
       "counts": {s: sum(1 for x in steps if x["status"] == s) for s in ("pass", "fail", "skip")},
       "steps": steps, "figures": figures}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
EOF

fails=0
echo
echo "results: $RESULTS (logs in $OUTDIR); $(elapsed)s in all"
printf '%-22s %-5s %5s  %s\n' step status secs "figures / reason"
for i in "${!NAMES[@]}"; do
    [ "${STATUS[$i]}" = fail ] && fails=$((fails + 1))
    info=${INFO[$i]}
    [ ${#info} -le 150 ] || info="${info:0:147}..."
    printf '%-22s %-5s %5s  %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "$info"
done
[ "$fails" = 0 ]

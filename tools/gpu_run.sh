#!/usr/bin/env bash
# run.sh [--quick] [--keep]: the GPU checks of a bundle made by tools/gpu_bundle.sh (this file is
# tools/gpu_run.sh, copied in as DIR/run.sh). Builds nothing and needs no network: everything
# comes from the bundle's folder, wherever it was copied.
#
# Steps, each bounded by a timeout and recorded as pass, fail or skip (with the reason):
#   data             mkdemo makes the JPEGs (12,000; --quick 4,000; 600 without a GPU),
#                    cachebuild the store at 256, in $WORK, else /dev/shm when it has room, else a
#                    temporary folder (removed at the end unless --keep)
#   build_rate       the builder against its ceilings, by tests/bench/bench_build.sh itself (the
#                    interleaved runs of docs/BENCHMARKS.md), builds into tmpfs (/dev/shm):
#                    BUILD_ROUNDS (2) rounds of cachebench decode --size 256 (plain decode, then
#                    the builder's decode + resize, in memory), a store and a set of 4 parts, at
#                    every core (at most 64) on all the JPEGs and at 1 thread on every k-th of
#                    them (about COUNT/8, at most 1,500); prints each build's img/s per round,
#                    the median ratio to decode + resize, and the scaling from 1 thread
#   build_rate_disk  the same, the builds written to a disk ($DISK_WORK, else $HOME, /var/tmp or
#                    /tmp, the first that is no tmpfs and has room)
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
#   copy_ceiling     cachebench load --device 0, uint8 random crops (the link is the limit): the
#                    copies' GB/s timed by the copy thread and by CUDA events on the copy stream,
#                    each against the pinned cudaMemcpyAsync ceiling of the same run
#   pytest_plugin    tests/python/test_device.py, test_device_paths.py (a store set, a streamed
#                    set where s3rver is installed, next() waits in 1 ms slices) and the device
#                    cases of the other files in GPU_TESTS chosen by name (PYTEST_K: device,
#                    cuda, bfloat16, mixup, cutmix, erasing) with DLCACHE_DEVICE_BACKEND=plugin
#   pytest_torch     the same with DLCACHE_DEVICE_BACKEND=torch
#   auto_sweep       tests/bench/bench_auto.py: threads="auto" against fixed counts, 160 batches
#                    a run, where every core is needed and where one is enough; auto's ratio to
#                    the best fixed count in each
#   node8            tools/gpu_node8.py: 8 processes training resnet18 on GPU 0, each from its
#                    own Loader(device="cuda:0") over the one store, against the same 8 on a
#                    synthetic batch: samples/s in all and the fraction of synthetic (without a
#                    GPU: its CPU fallback, 2 processes, not a figure)
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
# Knobs (environment): RESULTS (file; the logs go beside it as logs.tar.gz and logs/, LOGS_FOLDER=0
# for the archive alone: RESULTS=$OUT/results.json brings them back from a device call, which
# returns at most 8 files), WORK, RUN_BUDGET, PYTHON (default python3), COUNT, WARMUP, STEPS,
# BACKENDS (train's dlcache backends), TRAIN_ARGS (more train_gpu.py options, e.g. "--models
# resnet50"), WINDOW (cachebench seconds), SKIP_STEPS (step names, spaced: skipped saying so),
# BUILD_ROUNDS, SUB_COUNT, DISK_WORK, GPU_TESTS, PYTEST_K, AUTO_ROUNDS, AUTO_BATCHES,
# NODE8_PROCS, NODE8_MODEL (resnet18 or tiny), NODE8_SECONDS.
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
    if [[ " ${SKIP_STEPS:-} " == *" $name "* ]]; then
        skip "$name" "named in SKIP_STEPS"
        return 1
    fi
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

# build_rate, build_rate_disk: tests/bench/bench_build.sh itself, so that the figures are those
# of the interleaved runs in docs/BENCHMARKS.md ("The builder at the speed of decoding"): per
# round, the decode and decode + resize ceilings, then a store and a set of 4 parts, at every
# core on all the JPEGs and at 1 thread on a subset of them (hard links to every k-th file), in
# BUILD_ROUNDS rounds. The old step (one build, one round, right after the data step in the
# same tmpfs, on a machine just started) gave 2,247 img/s where these runs gave 6,543-7,746.
BUILD_ROUNDS=${BUILD_ROUNDS:-2}
BT=$((CORES > 64 ? 64 : CORES))
SUB=$W/sub1/train
SUB_N=0
# fs_type DIR: the file system's type, as stat -f names it ("tmpfs", "ext2/ext3", "xfs"...).
fs_type() { stat -f -c %T "$1" 2>/dev/null || echo unknown; }
# room_kb DIR: free KiB.
room_kb() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 {print $4}'; }
build_kb=$((COUNT * 260 + 524288)) # one store at 256 (196 KiB a record) at a time, and 512 MiB
TMPFS_DIR="" DISK_DIR=""
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(fs_type /dev/shm)" = tmpfs ] &&
    [ "$(room_kb /dev/shm)" -gt "$build_kb" ]; then
    TMPFS_DIR=/dev/shm
fi
for d in ${DISK_WORK:-} "${HOME:-/root}" /var/tmp /tmp; do
    case "$(fs_type "$d")" in tmpfs | ramfs | unknown) continue ;; esac
    [ -d "$d" ] && [ -w "$d" ] && [ "$(room_kb "$d")" -gt "$build_kb" ] && { DISK_DIR=$d; break; }
done
if [ "$HAVE_DATA" = 1 ]; then
    # Every k-th JPEG, linked (copied where a link fails): about SUB_COUNT of them.
    sub_count=${SUB_COUNT:-$((COUNT / 8 > 1500 ? 1500 : (COUNT / 8 > 64 ? COUNT / 8 : 64)))}
    k=$((COUNT / sub_count > 1 ? COUNT / sub_count : 1))
    (cd "$DATA/train" && find . -type f | sort | awk -v k="$k" 'NR % k == 0') | while read -r f; do
        mkdir -p "$SUB/$(dirname "$f")"
        ln "$DATA/train/$f" "$SUB/$f" 2>/dev/null || cp "$DATA/train/$f" "$SUB/$f"
    done
    SUB_N=$(find "$SUB" -type f 2>/dev/null | wc -l)
fi
# build_rate_at NAME DIR: bench_build.sh at BT threads on the JPEGs and at 1 on the subset, the
# builds written in a fresh folder in DIR, removed after.
build_rate_at() {
    local name=$1 dir=$2 out figs
    if ! out=$(mktemp -d "$dir/dlcache-build-rate.XXXXXX"); then
        record "$name" fail 0 "cannot make a folder in $dir"
        return
    fi
    # shellcheck disable=SC2016 # the arguments are expanded by the inner shell
    run_step "$name" 200 bash -c 'b=$1 py=$2 here=$3 src=$4 sub=$5 out=$6 logs=$7 n=$8 r=$9
        t=${10}
        export BIN=$b PY=$py SECONDS_DECODE=2 KINDS="store shards4"
        WORK=$out/all bash "$here/tests/bench/bench_build.sh" "$src" "$logs/${n}_all.jsonl" "$r" \
            "$t" &&
        if [ "$t" != 1 ]; then
            WORK=$out/one bash "$here/tests/bench/bench_build.sh" "$sub" "$logs/${n}_one.jsonl" \
                "$r" 1
        fi' _ "$BIN" "$PY" "$HERE" "$DATA/train" "$SUB" "$out" "$LOGS" "$name" "$BUILD_ROUNDS" \
        "$BT"
    local ran=$?
    rm -rf "$out"
    [ "$ran" = 0 ] || return
    timed_out && return
    if [ "$RC" != 0 ]; then
        record "$name" fail "$DUR" "exit $RC: $(tail -1 "$LOGS/$name.log")"
        return
    fi
    figs=$("$PY" - "$LOGS" "$name" "$(fs_type "$dir") $dir" "$BT" "$SUB_N" "$COUNT" <<'PYEOF'
import json, os, statistics, sys
logs, name, where, bt, sub_n, count = sys.argv[1:7]
bt = int(bt)
rows = []
for part in ("all", "one"):
    p = os.path.join(logs, "%s_%s.jsonl" % (name, part))
    if os.path.exists(p):
        rows += [dict(json.loads(l), part=part) for l in open(p) if l.strip()]
dec = {(r["part"], r["round"], r["threads"]): r for r in rows if r["kind"] == "decode"}
med = statistics.median
out = {"where": where, "threads": bt, "by_threads": {}}
text = [where]
for part, t, n in (("all", bt, count), ("one", 1, sub_n)):
    ds = [r for r in rows if r["kind"] == "decode" and r["threads"] == t and r["part"] == part]
    if not ds:
        continue
    fig = {"images": int(n), "decode": med([d["images_per_s"] for d in ds]),
           "decode_resize": med([d["resize_images_per_s"] for d in ds])}
    line = "%d thread%s on %s JPEGs: decode %.0f, decode+resize %.0f" % (
        t, "s" if t > 1 else "", n, fig["decode"], fig["decode_resize"])
    for kind, label in (("store", "store"), ("shards4", "set of 4")):
        ks = [r for r in rows if r["kind"] == kind and r["threads"] == t and r["part"] == part]
        if not ks:
            continue
        ips = [k["images_per_s"] for k in ks]
        ratio = [k["images_per_s"] / dec[(part, k["round"], t)]["resize_images_per_s"]
                 for k in ks]
        fig[kind] = {"per_round": ips, "median": med(ips), "of_ceiling_per_round": ratio,
                     "of_ceiling": med(ratio)}
        line += ", %s %s img/s (median %.2f of decode+resize)" % (
            label, "/".join("%.0f" % x for x in ips), med(ratio))
    out["by_threads"][str(t)] = fig
    text.append(line)
hi, lo = out["by_threads"].get(str(bt), {}), out["by_threads"].get("1", {})
if bt > 1 and hi and lo:
    sc = []
    for kind, label in (("store", "store"), ("shards4", "set")):
        if kind in hi and kind in lo and lo[kind]["median"] > 0:
            out["x_" + kind] = hi[kind]["median"] / lo[kind]["median"]
            sc.append("%s x%.1f" % (label, out["x_" + kind]))
    text.append("%d threads over 1: %s (targets 0.85 of decode+resize, x12)" % (bt, ", ".join(sc)))
json.dump(out, open(os.path.join(logs, name + ".json"), "w"), indent=1)
print("; ".join(text))
PYEOF
)
    record "$name" pass "$DUR" "${figs:-no figures: see $LOGS/$name.log}"
}
if [ "$HAVE_DATA" = 0 ]; then
    skip build_rate "no data (the data step failed)"
    skip build_rate_disk "no data (the data step failed)"
else
    if [ -n "$TMPFS_DIR" ]; then
        build_rate_at build_rate "$TMPFS_DIR"
    else
        skip build_rate "no tmpfs with room for a store at /dev/shm ($(fs_type /dev/shm), $(room_kb /dev/shm) KiB free)"
    fi
    if [ -n "$DISK_DIR" ]; then
        build_rate_at build_rate_disk "$DISK_DIR"
    else
        skip build_rate_disk "no folder on a disk with room (\$DISK_WORK, \$HOME, /var/tmp, /tmp)"
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
        record "$name" pass "$DUR" "$(jget "$d" 'd["device_mode"]') $(jget "$d" 'd["device_image_dtype"]') $(jget "$d" 'd["device_image_layout"]'): $sps samples/s${HOST_SPS:+ (x$(jget "$d" "round(d['device_samples_per_s'] / $HOST_SPS, 2)") host)}; copy $(jget "$d" 'round(d["device_copy_gbytes_per_s"], 1)') GB/s of ceiling $(jget "$d" 'round(d["device_copy_ceiling_gbytes_per_s"], 1)') = $(jget "$d" 'round(d["device_copy_ratio_to_ceiling"] * 100)')%$(jget "$d" '"; by CUDA events %.1f GB/s = %.0f%%" % (d["device_copy_event_gbytes_per_s"], 100 * d["device_copy_event_ratio_to_ceiling"]) if d.get("device_copy_event_seconds") else ""')"
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

# copy_ceiling: where the link is the limit (uint8 random crops, no RandomResizedCrop, copied as
# staged), the copies timed two ways in one run: the copy thread's host wait per copy
# (device_copy_seconds) and CUDA events recorded around the copies on the loader's stream
# (device_copy_event_seconds: the DMA's own time), each against the pinned cudaMemcpyAsync
# ceiling of the same bytes measured before and after the loader in the same run.
if [ "$HAVE_DATA" = 0 ]; then
    skip copy_ceiling "no store (the data step failed)"
elif run_step copy_ceiling 60 bash -c 'to_file "$@"' _ "$LOGS/copy_ceiling.json" "$BIN/cachebench" \
    load "$STORE" --batch 256 --crop 224 --dtype uint8 --threads "$THREADS" --seconds "$WINDOW" \
    --json --device 0 && ! timed_out; then
    d=$LOGS/copy_ceiling.json
    if [ "$RC" = 0 ]; then
        figs=$(jget "$d" '"uint8 crop, %d threads: %.0f samples/s on the GPU; ceiling %.1f GB/s (%.1f before, %.1f after, pinned copies of %d bytes); copies by the copy thread %.1f GB/s = %.2f, by CUDA events on the copy stream %s (target 0.9)" % (d["threads"], d["device_samples_per_s"], d["device_copy_ceiling_gbytes_per_s"], d["device_copy_ceiling_before_gbytes_per_s"], d["device_copy_ceiling_after_gbytes_per_s"], d["device_copy_ceiling_bytes"], d["device_copy_gbytes_per_s"], d["device_copy_ratio_to_ceiling"], ("%.1f GB/s = %.2f" % (d["device_copy_event_gbytes_per_s"], d["device_copy_event_ratio_to_ceiling"])) if d.get("device_copy_event_seconds") else "not timed (the plugin has no timed events)")')
        record copy_ceiling pass "$DUR" "${figs:-no figures: see $LOGS/copy_ceiling.log}"
    elif [ "$GPU" = 0 ]; then
        record copy_ceiling skip "$DUR" "$(why "$LOGS/copy_ceiling.log" 'error')"
    else
        record copy_ceiling fail "$DUR" "exit $RC: $(why "$LOGS/copy_ceiling.log" 'error')"
    fi
fi

# pytest, once per backend. test_device.py imports numpy and torch at the top: a python3
# without them cannot even collect it.
GPU_TESTS=${GPU_TESTS:-"test_device test_device_paths test_mix test_stream test_loader test_batchaug test_augment_loader test_ops test_tokens_dropin"}
PYTEST_MISSING=""
if ! PYTEST_ERR=$("$PY" -c 'import numpy, torch' 2>&1); then
    PYTEST_MISSING=$(printf '%s\n' "$PYTEST_ERR" | tail -1)
    PYTEST_MISSING=${PYTEST_MISSING:-import numpy, torch failed}
fi
# The files: test_device.py, and the device cases of the others, chosen by name (-k), so that
# cases that other branches add (bfloat16, MixUp/CutMix, erasing on the device) run once they
# are in the bundle, and a file without any is no failure. -k also matches a module's name: all
# of test_device.py and test_device_paths.py run. A file that cannot be collected here is left
# out, by name (the step's first lines say which).
PYTEST_K=${PYTEST_K:-"device or cuda or bfloat16 or bf16 or mixup or cutmix or erasing"}
PYTEST_FILES=() PYTEST_IGNORE=() PYTEST_LEFT=""
for t in $GPU_TESTS; do
    [ -f "$HERE/tests/python/$t.py" ] && PYTEST_FILES+=("tests/python/$t.py")
done
if [ -z "$PYTEST_MISSING" ] && [ "${#PYTEST_FILES[@]}" -gt 0 ]; then
    # shellcheck disable=SC2207 # file names without spaces
    bad=($(cd "$HERE" && timeout 120 "$PY" -m pytest -q -p no:cacheprovider --collect-only \
        --continue-on-collection-errors -k "$PYTEST_K" "${PYTEST_FILES[@]}" 2>&1 |
        sed -nE 's/^_* ERROR collecting (tests\/python\/[A-Za-z0-9_]+\.py) _*$/\1/p' | sort -u))
    for f in "${bad[@]}"; do
        PYTEST_IGNORE+=("--ignore=$f")
        PYTEST_LEFT="$PYTEST_LEFT ${f##*/}"
    done
    [ -z "$PYTEST_LEFT" ] || echo "pytest: left out, not collected here:$PYTEST_LEFT"
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
    run_step "$name" 200 env DLCACHE_DEVICE_BACKEND=$backend "$PY" -m pytest -q -rs -p no:cacheprovider \
        --basetemp="$W/pytest-$backend" -k "$PYTEST_K" "${PYTEST_IGNORE[@]}" "${PYTEST_FILES[@]}" \
        || continue
    timed_out && continue
    summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed|skipped|error|deselected)|no tests ran' "$LOGS/$name.log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ in [0-9.]*s.*//')
    passed=$(echo "$summary" | grep -oE '[0-9]+ passed' | cut -d' ' -f1)
    first_skip=$(grep -m1 -E '^SKIPPED' "$LOGS/$name.log" | sed -E 's/^SKIPPED \[[0-9]+\] [^ ]+ //' | cut -c1-200)
    if [ "$RC" = 0 ] && [ "${passed:-0}" -gt 0 ]; then
        record "$name" pass "$DUR" "$summary; files: ${PYTEST_FILES[*]##*/}${PYTEST_LEFT:+ (not collected:$PYTEST_LEFT)}${first_skip:+ (first skip: $first_skip)}"
    elif [ "$RC" = 0 ] || [ "$RC" = 5 ]; then
        record "$name" skip "$DUR" "${summary:-no tests ran}: $first_skip"
    else
        record "$name" fail "$DUR" "exit $RC: $summary"
    fi
done

# auto_sweep: threads="auto" against fixed counts (tests/bench/bench_auto.py), AUTO_BATCHES (160)
# batches a run, AUTO_ROUNDS rounds (2; 1 without a GPU), each situation with a sweep of its own:
# where every core is needed, 1, 2, 4... and the counts near all the cores; where one core is
# enough (each run lasts AUTO_BATCHES x 20 ms), 1, 2, 4 and all the cores.
AUTO_ROUNDS=${AUTO_ROUNDS:-$([ "$GPU" = 1 ] && echo 2 || echo 1)}
AUTO_BATCHES=${AUTO_BATCHES:-160}
auto_all=$("$PY" -c 'import sys; c = int(sys.argv[1])
s = {x for x in (1, 2, 4, 8, 16, 32, 64) if x <= c} | {x for x in (c * 3 // 4, c - 2, c - 1, c) if x >= 1}
print(",".join(map(str, sorted(s))))' "$CORES" 2>/dev/null)
auto_one=$("$PY" -c 'import sys; c = int(sys.argv[1])
print(",".join(map(str, sorted({x for x in (1, 2, 4) if x <= c} | {c}))))' "$CORES" 2>/dev/null)
# shellcheck disable=SC2016 # the arguments are expanded by the inner shell
if [ "$HAVE_DATA" = 0 ]; then
    skip auto_sweep "no store (the data step failed)"
elif [ ! -f "$HERE/tests/bench/bench_auto.py" ]; then
    skip auto_sweep "tests/bench/bench_auto.py is not in the bundle"
elif ! "$PY" -c 'import dlcache' 2>/dev/null; then
    skip auto_sweep "$PY cannot import the dlcache package"
elif run_step auto_sweep 200 bash -c 'py=$1 here=$2 store=$3 logs=$4 b=$5 r=$6 all=$7 one=$8
        "$py" "$here/tests/bench/bench_auto.py" "$store" "$logs/auto_all.json" "$logs/auto_all.svg" \
            --batches "$b" --rounds "$r" --counts "$all" --situation "all cores" &&
        "$py" "$here/tests/bench/bench_auto.py" "$store" "$logs/auto_one.json" "$logs/auto_one.svg" \
            --batches "$b" --rounds "$r" --counts "$one" --situation "one core"' _ \
        "$PY" "$HERE" "$STORE" "$LOGS" "$AUTO_BATCHES" "$AUTO_ROUNDS" "$auto_all" "$auto_one" \
    && ! timed_out; then
    if [ "$RC" = 0 ]; then
        record auto_sweep pass "$DUR" "$("$PY" - "$LOGS" <<'PYEOF'
import json, os, sys
out, ok = [], []
for f in ("auto_all.json", "auto_one.json"):
    p = os.path.join(sys.argv[1], f)
    if not os.path.exists(p):
        continue
    d = json.load(open(p))
    for name, s in d["situations"].items():
        best = s["best_fixed"]
        r = s["auto_over_best_last_half"]
        ok.append(r >= 0.95)
        out.append("%s (%d rounds of %d batches): best fixed %s threads %.0f samples/s, auto "
                   "%.0f (threads %s): %.2f of it"
                   % (name, d["rounds"], d["batches"], best, s["sweep"][str(best)],
                      s["auto_last_half_median"],
                      "-".join(str(x) for x in sorted(set(s["auto"]["threads"]))), r))
verdict = "auto within 0.95 of the best in both: may be the default" if len(ok) == 2 and all(ok) \
    else "auto short of 0.95 of the best in %d of %d" % (sum(not x for x in ok), len(ok))
print("; ".join(out + [verdict]))
PYEOF
)"
    else
        record auto_sweep fail "$DUR" "exit $RC: $(tail -1 "$LOGS/auto_sweep.log")"
    fi
fi

# node8: tools/gpu_node8.py, NODE8_PROCS (8) trainers of NODE8_MODEL (resnet18) on GPU 0, each
# from its own Loader(device="cuda:0") over the one store, against the same on a synthetic batch.
# Without CUDA the script's CPU fallback runs (2 processes, the tiny model, 1 s windows).
if [ "$HAVE_DATA" = 0 ]; then
    skip node8 "no store (the data step failed)"
elif [ "$TORCH_VERSION" = none ]; then
    skip node8 "$PY cannot import torch"
elif [ ! -f "$HERE/tools/gpu_node8.py" ]; then
    skip node8 "tools/gpu_node8.py is not in the bundle"
else
    node8_args=()
    if [ "$GPU" = 1 ]; then
        node8_args=(--procs "${NODE8_PROCS:-8}" --model "${NODE8_MODEL:-resnet18}"
                    --seconds "${NODE8_SECONDS:-8}")
    fi
    if run_step node8 150 "$PY" tools/gpu_node8.py --store "$STORE" --json "$LOGS/node8.json" \
        "${node8_args[@]}" && ! timed_out; then
        figs=$(jget "$LOGS/node8.json" '"%d x %s on %s: synthetic %.0f samples/s in all, dlcache %.0f (%.2f of synthetic; %d loader threads each)" % (d["procs"], d["model"], d["device"], d["synthetic_samples_per_s"], d["dlcache_samples_per_s"], d["fraction_of_synthetic"], d["threads_each"])')
        if [ "$RC" = 0 ] && [ -n "$figs" ]; then
            [ "$GPU" = 1 ] || figs="CPU fallback (no GPU: $GPU_WHY), not a figure: $figs"
            record node8 pass "$DUR" "$figs"
        else
            record node8 fail "$DUR" "exit $RC: $(tail -1 "$LOGS/node8.log")"
        fi
    fi
fi

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
# The logs beside RESULTS as one file, logs.tar.gz (a device call brings back at most 8 files
# from $OUT), and as a folder logs/ unless LOGS_FOLDER=0.
OUTDIR=$(dirname "$RESULTS")/logs
mkdir -p "$(dirname "$RESULTS")" 2>/dev/null
tar -czf "$(dirname "$RESULTS")/logs.tar.gz" -C "$W" logs 2>/dev/null ||
    echo "run.sh: could not write $(dirname "$RESULTS")/logs.tar.gz" >&2
if [ "${LOGS_FOLDER:-1}" = 1 ]; then
    mkdir -p "$OUTDIR" 2>/dev/null && cp "$LOGS"/* "$OUTDIR/" 2>/dev/null
fi
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
for n in ("build", "host", "device", "device_nhwc", "device_u8", "device_lend", "train",
          "build_rate", "build_rate_disk", "copy_ceiling", "auto_all", "auto_one", "node8"):
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
echo "results: $RESULTS (logs in $(dirname "$RESULTS")/logs.tar.gz$([ "${LOGS_FOLDER:-1}" = 1 ] && echo " and $OUTDIR")); $(elapsed)s in all"
printf '%-22s %-5s %5s  %s\n' step status secs "figures / reason"
for i in "${!NAMES[@]}"; do
    [ "${STATUS[$i]}" = fail ] && fails=$((fails + 1))
    info=${INFO[$i]}
    [ ${#info} -le 150 ] || info="${info:0:147}..."
    printf '%-22s %-5s %5s  %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "$info"
done
[ "$fails" = 0 ]

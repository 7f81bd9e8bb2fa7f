#!/usr/bin/env bash
# cachebench, bench_threads.sh and plot_bench.py on a small real store. No
# timing is asserted (docs/BENCHMARKS.md): the checks are that every figure is present
# and positive, that the digest (hashed in an untimed pass after the timed
# windows) does not depend on the number of threads, the prefetch depth or
# whether the window was fixed-length or time-based, that every delivered sample is
# counted, that errors name their cause with the right exit status, and that
# the plot is well-formed SVG with the three series.
. "$(dirname "$0")/../lib/e2e.sh" cachebench_tools
B=$DLC_BIN/cachebench

"$DLC_BIN/mkdemo" "$tmp/demo" --count 40 --classes 4 >/dev/null
tree=$tmp/demo/train
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s.dlc" --size 64 --threads 2 >/dev/null 2>&1

# decode: whole passes over the 40 files, positive rates.
"$B" decode "$tree" --threads 2 --seconds 0.2 --json >"$tmp/dec.json"
$PY - "$tmp/dec.json" <<'EOF' || fail "decode JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["files"] == 40, r
assert r["images"] >= 40 and r["threads"] == 2, r
for k in ("seconds", "images_per_s", "megapixels_per_s", "mbytes_per_s"):
    assert r[k] > 0, (k, r)
EOF
"$B" decode "$tree" --limit 5 --seconds 0.1 --json | grep -q '"files": 5' || fail "--limit 5"

# load: two epochs of 40 samples in batches of 8; the same bytes whatever the
# threads and prefetch.
run() { # run OUT.json ARGS...
    local out=$1; shift
    "$B" load "$tmp/s.dlc" --batch 8 --crop 48 --epochs 2 --seconds 0.2 --json "$@" >"$out" \
        2>"$out.err" || { cat "$out.err" >&2; fail "load $*"; }
}
run "$tmp/a.json" --threads 1 --prefetch 1
run "$tmp/b.json" --threads 2 --prefetch 3
run "$tmp/c.json" --threads 3 --prefetch 2 --io direct
$PY - "$tmp/a.json" "$tmp/b.json" "$tmp/c.json" <<'EOF' || fail "load JSON or digests"
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
for r in runs:
    assert r["warmup_samples"] + r["samples"] == 80, r
    assert r["batches"] == 9 and r["epochs"] == 2, r
    for k in ("samples_per_s", "gbytes_per_s", "ceiling_gbytes_per_s", "ratio_to_ceiling",
              "open_seconds", "first_batch_seconds"):
        assert r[k] > 0, (k, r)
    assert r["first_batch_seconds"] >= r["open_seconds"], r
    # Every field of the store counts: the image and the 8 bytes of its label.
    assert r["sample_bytes"] == 48 * 48 * 3 + 8 and r["dtype"] == "uint8", r
    assert r["fields"] == ["image", "label"] and r["bytes"] == r["samples"] * r["sample_bytes"], r
    assert r["jpeg_samples_per_s"] is None and r["speedup_vs_jpeg"] is None, r
    assert len(r["digest"]) == 16, r
    # The untimed pass hashes the batches the fixed-length run delivered: 2 epochs of 5.
    assert r["digest_batches"] == 10 and r["digest_samples"] == 80, r
    assert r["digest_seconds"] > 0 and "digest_in_window" not in r, r
digests = {r["digest"] for r in runs}
assert len(digests) == 1, digests
assert runs[2]["io"] == "direct" or runs[2]["io_requested"] == "direct", runs[2]
EOF
# Another seed is another stream.
run "$tmp/d.json" --threads 2 --seed 7
[ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$tmp/a.json")" != \
  "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$tmp/d.json")" ] ||
    fail "seed 7 gave the digest of seed 0"

# A time-based window hashes nothing unless asked; --digest-batches 10 covers the
# same 10 batches as the two epochs above, so it prints their digest.
"$B" load "$tmp/s.dlc" --batch 8 --crop 48 --seconds 0.2 --threads 3 --prefetch 2 \
    --digest-batches 10 --json >"$tmp/t.json" 2>"$tmp/t.err" ||
    { cat "$tmp/t.err" >&2; fail "--digest-batches"; }
"$B" load "$tmp/s.dlc" --batch 8 --crop 48 --seconds 0.2 --threads 2 --digest --json \
    >"$tmp/u.json" 2>"$tmp/u.err" || { cat "$tmp/u.err" >&2; fail "--digest"; }
$PY - "$tmp/a.json" "$tmp/t.json" "$tmp/u.json" <<'EOF' || fail "time-based digest JSON"
import json, sys
a, t, u = (json.load(open(p)) for p in sys.argv[1:])
assert t["epochs"] is None and t["batches_requested"] is None, t
assert t["digest_batches"] == 10 and t["digest"] == a["digest"], (t, a["digest"])
assert u["digest_batches"] == 5 and u["digest_samples"] == 40, u  # --digest: the first epoch
EOF

# float16 + RandomResizedCrop + the JPEG path, a time-based window (no digest).
"$B" load "$tmp/s.dlc" --batch 8 --crop 32 --dtype float16 --random-resized-crop --threads 2 \
    --seconds 0.3 --jpeg-dir "$tree" --json >"$tmp/e.json" 2>"$tmp/e.err" ||
    { cat "$tmp/e.err" >&2; fail "float16 + JPEG path"; }
$PY - "$tmp/e.json" <<'EOF' || fail "float16 + JPEG path JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["digest"] is None and r["digest_batches"] is None and r["batches_requested"] is None, r
assert r["sample_bytes"] == 32 * 32 * 3 * 2 + 8 and r["augment"] == "random_resized_crop", r
assert r["jpeg_files"] == 40 and r["jpeg_samples"] > 0, r
for k in ("samples_per_s", "jpeg_samples_per_s", "speedup_vs_jpeg", "ratio_to_ceiling"):
    assert r[k] > 0, (k, r)
EOF
grep -q "cachebench: loader" "$tmp/e.err" || fail "no loader notice on stderr"

# Errors name their cause: exit 1 for a run that cannot be made, 2 for a usage error.
expect() { # expect RC WANT FILE PATTERN WHAT: exit status WANT, and PATTERN in FILE
    [ "$1" = "$2" ] && grep -q -- "$4" "$3" && return
    fail "$5: exit $1 (wanted $2): $(cat "$3")"
}
set +e
"$B" load "$tmp/none.dlc" --seconds 0.1 2>"$tmp/err1"; rc1=$?
"$B" load "$tmp/s.dlc" --dtype int4 2>"$tmp/err2"; rc2=$?
"$B" load "$tmp/s.dlc" --crop 96 --seconds 0.1 2>"$tmp/err3"; rc3=$?
"$B" decode "$tmp/empty-dir-that-is-missing" 2>"$tmp/err4"; rc4=$?
"$B" load "$tmp/s.dlc" --no-digest --digest-batches 2 2>"$tmp/err5"; rc5=$?
"$B" load "$tmp/s.dlc" --device-layout nhwc 2>"$tmp/err6"; rc6=$?
"$B" load "$tmp/s.dlc" --device 0 --device-layout nhcw 2>"$tmp/err7"; rc7=$?
"$B" load "$tmp/s.dlc" --device 0 --device-lend --device-layout nchw 2>"$tmp/err8"; rc8=$?
# --device N without a usable GPU (here a plugin that is not there, so that the result does not
# depend on the machine) is an error that says why, never host batches instead.
DLCACHE_CUDA_PLUGIN=/nonexistent/libdlcache_cuda.so "$B" load "$tmp/s.dlc" --batch 8 --crop 48 \
    --batches 2 --device 0 --json >"$tmp/g.json" 2>"$tmp/err9"; rc9=$?
set -e
expect $rc1 1 "$tmp/err1" "none.dlc" "missing store"
expect $rc2 2 "$tmp/err2" "--dtype" "bad dtype"
expect $rc3 1 "$tmp/err3" "crop" "crop too large"
expect $rc4 1 "$tmp/err4" "empty-dir-that-is-missing" "missing source"
expect $rc5 2 "$tmp/err5" "--digest-batches" "--no-digest --digest-batches"
expect $rc6 2 "$tmp/err6" "--device-layout is for the device path" "--device-layout alone"
expect $rc7 2 "$tmp/err7" "--device-layout: nhcw" "bad --device-layout"
expect $rc8 2 "$tmp/err8" "lend mode" "--device-lend with --device-layout"
expect $rc9 1 "$tmp/err9" "device path cannot run: .*/nonexistent/libdlcache_cuda.so" \
    "--device 0 without a plugin"
[ ! -s "$tmp/g.json" ] || fail "--device 0 without a plugin printed a result"

# The sweep over 1 and 2 threads and its plot.
THREADS="1 2" BIN=$DLC_BIN SVG=$tmp/sweep.svg bash "$DLC_SRC/tests/bench/bench_threads.sh" \
    "$tmp/s.dlc" "$tree" "$tmp/sweep.json" --batch 8 --crop 48 --seconds 0.2 2>"$tmp/sweep.err" ||
    { cat "$tmp/sweep.err" >&2; fail "bench_threads.sh"; }
$PY - "$tmp/sweep.json" "$tmp/sweep.svg" <<'EOF' || fail "sweep JSON or SVG"
import json, sys, xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1]))
assert [r["threads"] for r in doc["runs"]] == [1, 2], doc
assert doc["host"]["nproc"] >= 1 and doc["measured_at"], doc
svg = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert svg.tag == ns + "svg", svg.tag
lines = svg.findall(ns + "polyline")
assert len(lines) == 3, len(lines)  # ceiling, loader, JPEG path
assert len(svg.findall(ns + "circle")) == 6
EOF
# plot_bench.py also takes single results, and refuses what is not one.
$PY "$DLC_SRC/tests/bench/plot_bench.py" "$tmp/a.json" "$tmp/b.json" -o "$tmp/two.svg"
$PY -c 'import sys, xml.etree.ElementTree as ET; ET.parse(sys.argv[1])' "$tmp/two.svg"
if $PY "$DLC_SRC/tests/bench/plot_bench.py" "$tmp/dec.json" -o "$tmp/bad.svg" 2>/dev/null; then
    fail "plot_bench.py accepted a decode result"
fi
echo "cachebench_tools: ok"

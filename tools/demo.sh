#!/usr/bin/env bash
# The main job end to end on a small bundled data set (`make demo`), a line per step and a
# summary (the tools' full reports are kept in $DEMO_DIR):
# make ImageNet-like JPEGs from real photographs, build a store, verify it,
# then load it through the loader and compare with the memcpy ceiling and the
# decode-every-epoch path measured in the same run.
#
# The loader is measured over time-based windows (DEMO_SECONDS, default 6 s,
# for uint8 random crop; DEMO_SECONDS_RRC, default 4 s, for float16
# RandomResizedCrop), as a training run sees it once it is going: a run of a
# few short epochs would mostly time the start. The determinism digest is
# hashed afterwards in an untimed pass, never inside a window.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
DATA=${DEMO_DIR:-demo-data}
COUNT=${DEMO_COUNT:-3000}
THREADS=${DEMO_THREADS:-$(nproc)}
WINDOW=${DEMO_SECONDS:-6}
WINDOW_RRC=${DEMO_SECONDS_RRC:-4}
PY=/usr/bin/python3

say() { printf '\n== %s\n' "$*"; }
quiet() { # quiet LOG CMD...: CMD's stderr (the tools' notices) into LOG, shown only on failure
    local log=$1
    shift
    "$@" 2>"$log" || { cat "$log" >&2; exit 1; }
}
field() { # field FILE KEY: a top-level value of a JSON report
    "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v)' "$1" "$2"
}

if [ ! -f "$DATA/.complete-$COUNT" ]; then
    say "making $COUNT demo JPEGs in $DATA/train from /usr/share/backgrounds/mate/nature"
    rm -rf "$DATA"
    "$BIN/mkdemo" "$DATA" --count "$COUNT"
    touch "$DATA/.complete-$COUNT"
fi

say "plain libjpeg-turbo decode of the same files ($THREADS threads): the reference for the builder"
quiet "$DATA/decode.log" "$BIN/cachebench" decode "$DATA/train" --threads "$THREADS" --json \
    >"$DATA/decode.json"
decode_rate=$(field "$DATA/decode.json" images_per_s)
echo "decode: $decode_rate images/s"

say "cachebuild: decode once, resize 256, center crop, raw pixels"
quiet "$DATA/build.log" "$BIN/cachebuild" "$DATA/train" -o "$DATA/train.dlc" --size 256 \
    --threads "$THREADS" --force --json >"$DATA/build.json"
build_rate=$(field "$DATA/build.json" images_per_s)
echo "cachebuild: $(field "$DATA/build.json" count) images, $build_rate images/s," \
     "skipped $("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["skipped"]))' "$DATA/build.json")"

say "cacheinfo --verify"
# Its verdict, a line; the whole description (classes, fields, sizes) is kept in a file.
if ! "$BIN/cacheinfo" "$DATA/train.dlc" --verify >"$DATA/verify.txt" 2>&1; then
    cat "$DATA/verify.txt" >&2
    exit 1
fi
grep -m1 "verify" "$DATA/verify.txt"

say "loader: uint8 224 random crop + flip, batch 256, $THREADS threads, ${WINDOW} s window (ceiling and JPEG path in the same run)"
quiet "$DATA/load.log" "$BIN/cachebench" load "$DATA/train.dlc" --batch 256 --threads "$THREADS" \
    --prefetch 4 --crop 224 --dtype uint8 --seconds "$WINDOW" --digest --jpeg-dir "$DATA/train" \
    --json >"$DATA/load.json"
echo "uint8: $(field "$DATA/load.json" samples_per_s) samples/s"

say "loader: float16 normalized NCHW, random-resized-crop 224 + flip, ${WINDOW_RRC} s window"
quiet "$DATA/load_f16.log" "$BIN/cachebench" load "$DATA/train.dlc" --batch 256 \
    --threads "$THREADS" --prefetch 4 --crop 224 --random-resized-crop --dtype float16 \
    --seconds "$WINDOW_RRC" --digest --jpeg-dir "$DATA/train" --json >"$DATA/load_f16.json"
echo "rrc f16: $(field "$DATA/load_f16.json" samples_per_s) samples/s"

say "summary"
"$PY" - "$DATA" <<'PYEOF'
import json, os, sys, textwrap
d = sys.argv[1]
j = lambda n: json.load(open(os.path.join(d, n)))
dec, bld, ld, lh = j("decode.json"), j("build.json"), j("load.json"), j("load_f16.json")
print(f"build    {bld['images_per_s']:10.0f} images/s   ({bld['images_per_s']/dec['images_per_s']*100:.0f}% of plain decode {dec['images_per_s']:.0f} images/s, {bld['threads']} threads)")
print(f"store    {bld['count']} records, {bld.get('file_bytes', 0)/max(bld['count'],1)/1024:.1f} KiB per image")
def case(name, r):
    print(f"{name:8} {r['samples_per_s']:10.0f} samples/s  {r['gbytes_per_s']:5.2f} GB/s  "
          f"= {r['ratio_to_ceiling']*100:.0f}% of the memcpy ceiling {r['ceiling_gbytes_per_s']:.2f} GB/s "
          f"(before {r['ceiling_before_gbytes_per_s']:.2f}, after {r['ceiling_after_gbytes_per_s']:.2f})")
    print(f"{'':8} {r['jpeg_samples_per_s']:10.0f} samples/s  on the JPEG path -> the loader is "
          f"{r['speedup_vs_jpeg']:.1f}x faster")
case("uint8", ld)
case("rrc f16", lh)
print(f"first batch {ld['first_batch_seconds']*1000:.0f} ms after open; determinism digest "
      f"{ld['digest']} (uint8 case, first epoch: {ld['digest_batches']} batches)")
info = ld["store_info"]
cached = 100.0 * info["resident_after_prewarm_bytes"] / max(info["file_bytes"], 1)
text = (
    f"How this was measured: each case is one cachebench run on {ld['threads']} threads, batch "
    f"{ld['batch']}, {ld['crop']}x{ld['crop']} crop, flip {ld['flip']:g}, prefetch {ld['prefetch']}, "
    f"io {ld['io']}, with {cached:.0f}% of the store in the page cache. uint8 is a random crop "
    f"(NHWC), rrc f16 RandomResizedCrop normalized to float16 (NCHW). The loader's window is "
    f"time-based ({ld['seconds']:.1f} s: {ld['batches']} batches; {lh['seconds']:.1f} s: "
    f"{lh['batches']} batches) and opens after the first batch, so it shows the steady state "
    f"that a training run sees. The ceiling is a memcpy of the same output bytes (one sample "
    f"per block, from random places in a buffer larger than the last-level cache) on the same "
    f"threads, measured half just before the loader and half just after. The JPEG path is what "
    f"keeping JPEGs would cost: the builder's decode + resize of each file, then the loader's own "
    f"crop, flip and conversion, on the same threads, also half before and half after. The "
    f"digest is hashed by a second loader after every window, untimed; any --threads or "
    f"--prefetch gives the same one. On a shared machine absolute rates move by tens of percent "
    f"from run to run; the ratios, taken seconds apart, much less.")
print()
print(textwrap.fill(text, 78))
PYEOF

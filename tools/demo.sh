#!/usr/bin/env bash
# The main job end to end on a small bundled data set (`make demo`):
# make ImageNet-like JPEGs from real photographs, build a store, verify it,
# then load it through the loader and compare with the memcpy ceiling and the
# decode-every-epoch path measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
DATA=${DEMO_DIR:-demo-data}
COUNT=${DEMO_COUNT:-3000}
THREADS=${DEMO_THREADS:-$(nproc)}
PY=/usr/bin/python3

say() { printf '\n== %s\n' "$*"; }
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
"$BIN/cachebench" decode "$DATA/train" --threads "$THREADS" --json >"$DATA/decode.json"
decode_rate=$(field "$DATA/decode.json" images_per_s)
echo "decode: $decode_rate images/s"

say "cachebuild: decode once, resize 256, center crop, raw pixels"
"$BIN/cachebuild" "$DATA/train" -o "$DATA/train.dlc" --size 256 --threads "$THREADS" --force \
    --json >"$DATA/build.json"
build_rate=$(field "$DATA/build.json" images_per_s)
echo "cachebuild: $(field "$DATA/build.json" count) images, $build_rate images/s," \
     "skipped $("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["skipped"]))' "$DATA/build.json")"

say "cacheinfo --verify"
"$BIN/cacheinfo" "$DATA/train.dlc" --verify

say "loader: uint8 224 random crop + flip, batch 256, $THREADS threads (ceiling and JPEG path in the same run)"
"$BIN/cachebench" load "$DATA/train.dlc" --batch 256 --threads "$THREADS" --prefetch 4 --crop 224 \
    --dtype uint8 --epochs 3 --jpeg-dir "$DATA/train" --json >"$DATA/load.json"

say "loader: float16 normalized NCHW, random-resized-crop 224 + flip"
"$BIN/cachebench" load "$DATA/train.dlc" --batch 256 --threads "$THREADS" --prefetch 4 --crop 224 \
    --random-resized-crop --dtype float16 --epochs 3 --json >"$DATA/load_f16.json"

say "summary"
"$PY" - "$DATA" <<'PYEOF'
import json, sys, os
d = sys.argv[1]
j = lambda n: json.load(open(os.path.join(d, n)))
dec, bld, ld, lh = j("decode.json"), j("build.json"), j("load.json"), j("load_f16.json")
print(f"build    {bld['images_per_s']:10.0f} images/s   ({bld['images_per_s']/dec['images_per_s']*100:.0f}% of plain decode {dec['images_per_s']:.0f} images/s, {bld['threads']} threads)")
print(f"store    {bld['count']} records, {bld.get('file_bytes', 0)/max(bld['count'],1)/1024:.1f} KiB per image")
print(f"loader   {ld['samples_per_s']:10.0f} samples/s  {ld['gbytes_per_s']:.2f} GB/s uint8   "
      f"= {ld['ratio_to_ceiling']*100:.0f}% of memcpy ceiling {ld['ceiling_gbytes_per_s']:.2f} GB/s")
print(f"jpeg     {ld['jpeg_samples_per_s']:10.0f} samples/s  (decode every epoch)  -> loader is {ld['speedup_vs_jpeg']:.1f}x faster")
print(f"rrc f16  {lh['samples_per_s']:10.0f} samples/s  {lh['gbytes_per_s']:.2f} GB/s  = {lh['ratio_to_ceiling']*100:.0f}% of its ceiling")
print(f"first batch {ld['first_batch_seconds']*1000:.0f} ms after open; digest {ld['digest']}")
PYEOF

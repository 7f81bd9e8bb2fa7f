#!/usr/bin/env bash
# First batch and memory on an ImageNet-sized store: 1,281,167 records (the
# ImageNet-1k train count) of tiny images so the store fits on a small disk.
# The records come from a manifest that cycles over 64 tiny real JPEGs cut
# from the MATE photographs, so cachebuild does real decoding. Then a fresh
# `cachebench load` process reports open_seconds, first_batch_seconds and how
# much its memory grew, next to the same figures for a small store.
#   tests/bench/bench_first_batch.sh WORKDIR [COUNT]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bin
DIR=${1:?usage: $0 WORKDIR [COUNT]}
COUNT=${2:-1281167}
mkdir -p "$DIR/img"
/usr/bin/python3 - "$DIR" "$COUNT" <<'PYEOF'
import glob, os, sys
from PIL import Image
d, count = sys.argv[1], int(sys.argv[2])
photos = sorted(glob.glob("/usr/share/backgrounds/mate/nature/*.jpg"))
n = 64
for k in range(n):
    im = Image.open(photos[k % len(photos)]).convert("RGB")
    im.draft("RGB", (im.width // 8, im.height // 8))
    w, h = im.size
    s = min(w, h) // 4
    x, y = (k * 37) % (w - s), (k * 53) % (h - s)
    im.crop((x, y, x + s, y + s)).resize((24, 24), Image.BILINEAR).save(f"{d}/img/{k}.jpg", quality=90)
with open(f"{d}/manifest.tsv", "w") as f:
    for i in range(count):
        f.write(f"img/{i % n}.jpg\t{i % 1000}\n")
PYEOF
[ -f "$DIR/tiny.dlc" ] || "$BIN/cachebuild" "$DIR/manifest.tsv" -o "$DIR/tiny.dlc" --size 16 --json \
    >"$DIR/build.json"
for s in "$DIR/tiny.dlc"; do
    "$BIN/cacheinfo" "$s" | head -3
    "$BIN/cachebench" load "$s" --batch 256 --threads "$(nproc)" --crop 16 --dtype uint8 \
        --batches 20 --json >"$DIR/load.json"
    /usr/bin/python3 -c '
import json,sys; j=json.load(open(sys.argv[1]))
keys=["samples","open_seconds","first_batch_seconds","loader_rss_first_batch_bytes","loader_anon_first_batch_bytes","loader_rss_end_bytes","samples_per_s"]
print({k: j.get(k) for k in keys})' "$DIR/load.json"
done

#!/usr/bin/env bash
# Segmentation pairs end to end: real JPEGs from mkdemo, masks made from them as a labelling
# tool would (colours quantised to class ids, 8-bit gray PNGs); the store's images and masks are
# read back with python3-lmdb and compared with torchvision's Resize + CenterCrop of each source
# (bilinear for the image, nearest for the mask), byte for byte, so every mask pixel lies on its
# image pixel. The store is the same at 1 and 2 threads, raw and PNG masks hold the same ids,
# images without a good mask are skipped with the reason (or stop the build with --strict), a
# tar source cannot take masks, and cacheinfo --dump writes a mask that np.load reads back.
. "$(dirname "$0")/../lib/e2e.sh" build_masks

"$DLC_BIN/mkdemo" "$tmp/demo" --count 24 --classes 3 >/dev/null
tree=$tmp/demo/train
$PY "$DLC_SRC/tests/lib/make_masks.py" "$tree" "$tmp/masks" 6 >/dev/null
cd "$tmp"
digest() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["content_digest"])' "$1"; }

# The demo images are under 512 pixels a side: at --size 256 no DCT-scaled decode, so the image
# is torchvision's bit for bit too, and the check covers image and mask together.
"$DLC_BIN/cachebuild" "$tree" -o s1.dlc --masks masks --size 256 --threads 1 --json >b1.json 2>/dev/null
"$DLC_BIN/cachebuild" "$tree" -o s2.dlc --masks masks --size 256 --threads 2 --json >b2.json 2>/dev/null
[ "$(digest b1.json)" = "$(digest b2.json)" ] || fail "1 and 2 threads gave other stores"
$PY "$DLC_SRC/tests/lib/build_check.py" masks "$tree" masks s1.dlc b1.json 256

# PNG masks, with JPEG images and without a crop: the same ids, still nearest neighbour.
"$DLC_BIN/cachebuild" "$tree" -o p.dlc --masks masks --size 256 --crop none --encoding jpeg \
    --threads 2 --json >bp.json 2>/dev/null
"$DLC_BIN/cacheinfo" p.dlc --json >ip.json
$PY - <<'PYEOF'
import json
fields = {f["name"]: f for f in json.load(open("ip.json"))["fields"]}
m = fields["mask"]
assert m["encoding"] == "png" and "mask" in m["flags"] and m["shape"][2] == 1, m
assert fields["image"]["encoding"] == "jpeg", fields["image"]
assert m["bytes"] > 0 and abs(m["mean_bytes"] * 24 - m["bytes"]) < 1e-3 * m["bytes"], m
PYEOF

# Palette masks, as Pascal VOC stores them: the indices are the class ids, not the colours of
# the palette, so the store is the one the gray masks gave.
$PY - <<'PYEOF'
import os
from PIL import Image
for root, _, files in os.walk("masks"):
    for f in files:
        src = os.path.join(root, f)
        dst = os.path.join("pmasks", os.path.relpath(src, "masks"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        m = Image.open(src)
        p = Image.frombytes("P", m.size, m.tobytes())
        p.putpalette([v for i in range(256) for v in (i * 37 % 256, 255 - i, i * 91 % 256)])
        p.save(dst)
PYEOF
"$DLC_BIN/cachebuild" "$tree" -o pal.dlc --masks pmasks --size 256 --threads 2 --json \
    >bpal.json 2>/dev/null
[ "$(digest bpal.json)" = "$(digest b2.json)" ] || fail "palette masks did not give their indices"

# cacheinfo --dump of a mask: PNG, PGM and .npy hold the stored ids.
"$DLC_BIN/cacheinfo" s1.dlc --dump 5 --field mask -o m5.png 2>/dev/null
"$DLC_BIN/cacheinfo" s1.dlc --dump 5 --field mask -o m5.pgm 2>/dev/null
"$DLC_BIN/cacheinfo" s1.dlc --dump 5 --field mask -o m5.npy 2>/dev/null
"$DLC_BIN/cacheinfo" s1.dlc --dump 5 -o i5.png 2>/dev/null
$PY - "$DLC_SRC/tests/lib" <<'PYEOF'
import sys
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[1])
import build_check
s = build_check.Store("s1.dlc")
rec = s.record(5)
mask = np.frombuffer(rec["mask"][0], np.uint8).reshape(256, 256)
assert (np.load("m5.npy")[:, :, 0] == mask).all(), "npy"
assert (np.array(Image.open("m5.png")) == mask).all(), "png"
assert (np.array(Image.open("m5.pgm")) == mask).all(), "pgm"
img = np.frombuffer(rec["image"][0], np.uint8).reshape(256, 256, 3)
assert (np.array(Image.open("i5.png")) == img).all(), "image png"
print("build_masks: --dump round trips")
PYEOF

# Bad pairs: a missing mask, a mask of another size, a mask that is no PNG.
mapfile -t jpgs < <(cd "$tree" && ls */*.jpg | sort)
rm "masks/${jpgs[1]%.jpg}.png"
$PY -c 'from PIL import Image; Image.new("L", (10, 10)).save("masks/'"${jpgs[4]%.jpg}"'.png")'
echo "not a png" >"masks/${jpgs[7]%.jpg}.png"
"$DLC_BIN/cachebuild" "$tree" -o bad.dlc --masks masks --size 64 --json >bb.json 2>/dev/null
$PY "$DLC_SRC/tests/lib/build_check.py" skips bb.json "/${jpgs[1]}=no mask" \
    "/${jpgs[4]}=is 10x10, its image" "/${jpgs[7]}=cannot be decoded"
# The other records keep their masks (resized from full size while the images are DCT-scaled).
$PY "$DLC_SRC/tests/lib/build_check.py" masks "$tree" masks bad.dlc bb.json 64
if "$DLC_BIN/cachebuild" "$tree" -o strict.dlc --masks masks --size 64 --strict 2>err; then
    fail "--strict built a store with a missing mask"
fi
grep -q "${jpgs[1]}: no mask" err || { cat err >&2; fail "--strict does not name the image"; }
[ ! -e strict.dlc ] || fail "--strict left a store"

# A tar shard cannot take masks: its members have no path in a tree.
$PY -c 'import tarfile,sys; t=tarfile.open("s.tar","w"); t.add(sys.argv[1], "k.jpg"); t.close()' \
    "$tree/${jpgs[0]}"
if "$DLC_BIN/cachebuild" s.tar -o t.dlc --masks masks 2>err; then fail "masks with a tar source"; fi
grep -q "s.tar: masks are found by an image's path" err || { cat err >&2; fail "tar message"; }
echo "build_masks: ok"

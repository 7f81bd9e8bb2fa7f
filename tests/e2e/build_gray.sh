#!/usr/bin/env bash
# One-channel stores end to end. A grayscale data set (mkdemo's photos saved as grayscale JPEGs)
# built with --channels keep stays one channel, and each image is torchvision's Resize +
# CenterCrop of the gray source, byte for byte (read with python3-lmdb); --channels 1 makes a
# colour set gray; in a mixed set the first image decides and the others are converted, with a
# notice and a count. Every store is the same at 1 and 2 threads; cacheinfo says "gray".
. "$(dirname "$0")/../lib/e2e.sh" build_gray

"$DLC_BIN/mkdemo" "$tmp/demo" --count 18 --classes 3 >/dev/null
cd "$tmp"
$PY - <<'PYEOF'
import os
from PIL import Image
for root, _, files in os.walk("demo/train"):
    for f in files:
        out = os.path.join("gray", os.path.relpath(root, "demo/train"))
        os.makedirs(out, exist_ok=True)
        Image.open(os.path.join(root, f)).convert("L").save(os.path.join(out, f), quality=92)
PYEOF
digest() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["content_digest"])' "$1"; }
same_at_two_threads() { # STORE_BASE ARGS...
    local base=$1
    shift
    "$DLC_BIN/cachebuild" "$@" -o "$base.1.dlc" --threads 1 --json >"$base.1.json" 2>"$base.err"
    "$DLC_BIN/cachebuild" "$@" -o "$base.2.dlc" --threads 2 --json >"$base.2.json" 2>/dev/null
    [ "$(digest "$base.1.json")" = "$(digest "$base.2.json")" ] || fail "$base: 1 and 2 threads differ"
}

same_at_two_threads keep gray --channels keep --size 256
same_at_two_threads one demo/train --channels 1 --size 28
$PY - "$DLC_SRC/tests/lib" <<'PYEOF'
import json, os, sys
import torchvision.transforms as T
from PIL import Image
sys.path.insert(0, sys.argv[1])
import build_check
for base, size in (("keep", 256), ("one", 28)):
    b = json.load(open(f"{base}.1.json"))
    assert b["channels"] == 1 and b["converted"] == 0, b
    s = build_check.Store(f"{base}.1.dlc")
    img = s.field("image")
    assert img["shape"] == (size, size, 1), img
# The gray sources are under 512 px: no DCT scaling, so torchvision on PIL exactly.
_, samples = build_check.folder_samples("gray")
s = build_check.Store("keep.1.dlc")
tf = T.Compose([T.Resize(256), T.CenterCrop(256)])
for i, (path, _) in enumerate(samples):
    want = tf(Image.open(path)).tobytes()
    assert bytes(s.record(i)["image"][0]) == want, f"record {i} ({path})"
print(f"build_gray: {len(samples)} gray images are torchvision's, byte for byte")
PYEOF
"$DLC_BIN/cacheinfo" one.1.dlc | grep -q "^encoding     raw (uint8 gray, HWC)" || fail "cacheinfo: not gray"
"$DLC_BIN/cacheinfo" one.1.dlc | grep -q "^shape        28 x 28 x 1" || fail "cacheinfo: shape"

# A mixed set: a colour image in a gray tree is converted, and said so once.
first=$(cd gray && ls */*.jpg | sort | head -1)
cls=$(dirname "$first")
cp "demo/train/$(cd demo/train && ls */*.jpg | sort | sed -n 5p)" "gray/$cls/zz-colour.jpg"
same_at_two_threads mixed gray --channels keep --size 32
$PY -c 'import json,sys; b=json.load(open("mixed.1.json")); assert b["channels"]==1 and b["converted"]==1, b'
grep -q "zz-colour.jpg: 3 channels, stored as 1 like the first image (.*$first) decided" mixed.err ||
    { cat mixed.err >&2; fail "no notice of the conversion"; }
# The default stays RGB: a gray set is expanded to 3 channels, as before.
"$DLC_BIN/cachebuild" gray -o rgb.dlc --size 32 --json >rgb.json 2>/dev/null
$PY -c 'import json,sys; b=json.load(open("rgb.json")); assert b["channels"]==3 and b["converted"]==0, b'
echo "build_gray: ok"

#!/usr/bin/env bash
# cachebuild numbers labels and orders records exactly as torchvision's
# ImageFolder does on the same tree: class folders sorted by name (upper case
# before lower case), files sorted, subfolders of a class searched too, a
# .png keeping its place (skipped as not a JPEG). The store is read back with
# python3-lmdb and compared with torchvision, also at another thread count.
. "$(dirname "$0")/../lib/e2e.sh" build_labels

"$DLC_BIN/mkdemo" "$tmp/demo" --count 40 --classes 5 >/dev/null
tree=$tmp/demo/train
first=$(ls "$tree" | head -1)
# Odd but legal ImageFolder shapes.
mkdir "$tree/Zeta" "$tree/$first/sub" "$tree/$first/sub dir"
cp "$tree/$first"/$(ls "$tree/$first" | grep jpg | head -1) "$tree/Zeta/a.JPG"
cp "$tree/$first"/$(ls "$tree/$first" | grep jpg | sed -n 2p) "$tree/$first/sub/x.jpeg"
cp "$tree/$first"/$(ls "$tree/$first" | grep jpg | sed -n 3p) "$tree/$first/sub dir/y.jpg"
cp "$tree/$first"/$(ls "$tree/$first" | grep jpg | sed -n 4p) "$tree/$first/picture.png"
echo "not an image" > "$tree/$first/notes.txt"

"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s1.dlc" --size 64 --threads 1 --json > "$tmp/b1.json"
"$DLC_BIN/cacheinfo" "$tmp/s1.dlc" --json > "$tmp/i1.json"
$PY "$DLC_SRC/tests/lib/build_check.py" labels "$tree" "$tmp/s1.dlc" "$tmp/i1.json" "$tmp/b1.json"
$PY "$DLC_SRC/tests/lib/build_check.py" skips "$tmp/b1.json" "/picture.png=not a JPEG"

# Same store at two threads.
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s2.dlc" --size 64 --threads 2 --json > "$tmp/b2.json"
d1=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["content_digest"])' "$tmp/b1.json")
d2=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["content_digest"])' "$tmp/b2.json")
[ "$d1" = "$d2" ] || { echo "content digest differs: 1 thread $d1, 2 threads $d2" >&2; exit 1; }

# A class with no image keeps its number (torchvision's find_classes order).
mkdir "$tree/mmm_empty"
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s3.dlc" --size 32 --json > "$tmp/b3.json" 2>"$tmp/err3"
grep -q "mmm_empty: no image file" "$tmp/err3" || { cat "$tmp/err3" >&2; exit 1; }
"$DLC_BIN/cacheinfo" "$tmp/s3.dlc" --json > "$tmp/i3.json"
$PY "$DLC_SRC/tests/lib/build_check.py" labels "$tree" "$tmp/s3.dlc" "$tmp/i3.json" "$tmp/b3.json"
echo "build_labels: ok"

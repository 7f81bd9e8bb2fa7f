"""Segmentation masks for the JPEGs of a tree, as a labelling tool would make them: each image's
colours quantised to a few classes, the class ids stored as an 8-bit gray PNG of the image's size.

usage: make_masks.py TREE MASKS [COLORS]
For TREE/REL/STEM.jpg writes MASKS/REL/STEM.png (the rule of cachebuild --masks)."""
import os
import sys

from PIL import Image


def main(tree, masks, colors=6):
    n = 0
    for root, _, files in os.walk(tree):
        for f in sorted(files):
            if not f.lower().endswith((".jpg", ".jpeg")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, tree)
            out = os.path.join(masks, os.path.splitext(rel)[0] + ".png")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            # quantize() gives a palette image whose indices are the classes; keep the indices.
            ids = Image.open(path).convert("RGB").quantize(colors=int(colors))
            Image.frombytes("L", ids.size, ids.tobytes()).save(out)
            n += 1
    print(f"make_masks: {n} masks of {colors} classes under {masks}")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Helpers for the builder's end-to-end tests (tests/e2e/build_*.sh).

  build_check.py labels TREE STORE INFO.json BUILD.json
      The store's labels equal torchvision's ImageFolder on TREE: class names
      by label number, and per record the target of the sample it came from
      (samples the build skipped, as named in BUILD.json, are left out).
  build_check.py skips BUILD.json PATH=REASON...
      Each PATH (a suffix of the reported path) is reported with REASON in it,
      and nothing else is reported.
  build_check.py masks TREE MASKS STORE BUILD.json SIZE
      Every record's image and mask are torchvision's Resize(SIZE) + CenterCrop(SIZE) of its
      JPEG (bilinear, antialiased) and of its mask MASKS/REL/STEM.png (nearest), byte for byte:
      the mask lies on exactly the image's pixels. Images are compared where the source is
      smaller than twice SIZE on an axis (no DCT-scaled decode: torchvision's exactly); masks
      always (their resize is nearest neighbour from the full-size mask, whatever the image's
      decode). Skipped items (BUILD.json) have no record.

Records are read with python3-lmdb as docs/FORMAT.md describes, not with
dlcache, so the test also checks that a stranger can read a store.
"""
import json
import struct
import sys


IMAGE, NDARRAY, INT, FLOAT, BYTES = 1, 2, 3, 4, 5
VARIABLE, MASK, BOXES, LABEL = 1, 2, 4, 8


class Store:
    """A dlcache store read with python3-lmdb alone, as docs/FORMAT.md describes: the schema
    (format version 2; a version 1 store reads as "image" and "label") and record values."""

    def __init__(self, path):
        import lmdb

        self.env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=4)
        self.meta = self.env.open_db(b"meta", create=False)
        self.samples = self.env.open_db(b"samples", create=False)
        with self.env.begin() as txn:
            info = txn.get(b"format", db=self.meta)
            self.version = struct.unpack_from("<I", info, 8)[0]
            self.count = struct.unpack_from("<Q", info, 16)[0]
            self.fields = []
            schema = txn.get(b"schema", db=self.meta) or b""
            for f in range(len(schema) // 128):
                e = schema[128 * f:128 * (f + 1)]
                kind, dtype, enc, flags, ndim = struct.unpack_from("<5I", e, 32)
                shape = struct.unpack_from("<6I", e, 52)[:ndim]
                self.fields.append(dict(name=e[:32].rstrip(b"\0").decode(), kind=kind,
                                        dtype=dtype, encoding=enc, flags=flags, shape=shape))
        if self.version == 1:
            self.fields = [dict(name="image", kind=IMAGE, flags=0),
                           dict(name="label", kind=INT, flags=LABEL)]

    def field(self, name):
        return next(f for f in self.fields if f["name"] == name)

    def record(self, i):
        """{name: int or float (scalars), or (payload bytes, dim0, dim1)}."""
        with self.env.begin() as txn:
            value = txn.get(struct.pack(">Q", i), db=self.samples)
        if self.version == 1:
            label, h, w = struct.unpack_from("<qII", value, 8)
            return {"image": (value[48:], h, w), "label": label}
        assert struct.unpack_from("<I", value)[0] == 0x32524C44, f"record {i}: bad magic"
        assert struct.unpack_from("<Q", value, 8)[0] == i, f"record {i}: wrong number"
        out = {}
        for f, fd in enumerate(self.fields):
            word, size, dim0, dim1 = struct.unpack_from("<QQII", value, 16 + 32 * f)
            if fd["kind"] == INT:
                out[fd["name"]] = struct.unpack_from("<q", value, 16 + 32 * f)[0]
            elif fd["kind"] == FLOAT:
                out[fd["name"]] = struct.unpack_from("<d", value, 16 + 32 * f)[0]
            else:
                out[fd["name"]] = (value[word:word + size], dim0, dim1)
        return out

    def close(self):
        self.env.close()


def read_labels(store):
    s = Store(store)
    name = next(f["name"] for f in s.fields if f["flags"] & LABEL)
    labels = [s.record(i)[name] for i in range(s.count)]
    s.close()
    return labels


def check_labels(tree, store, info_path, build_path):
    from torchvision.datasets import ImageFolder

    info = json.load(open(info_path))
    build = json.load(open(build_path))
    try:
        ds = ImageFolder(tree)
        classes, samples = ds.classes, ds.samples
    except FileNotFoundError:
        # A class without images: torchvision refuses the tree; compare with
        # the same numbering it uses (find_classes) and the samples it would find.
        from torchvision.datasets.folder import find_classes, IMG_EXTENSIONS
        import os

        classes, class_to_idx = find_classes(tree)
        samples = []
        for c in sorted(class_to_idx):
            for root, _, fnames in sorted(os.walk(os.path.join(tree, c), followlinks=True)):
                for f in sorted(fnames):
                    if f.lower().endswith(IMG_EXTENSIONS):
                        samples.append((os.path.join(root, f), class_to_idx[c]))
    assert info["labels"] == classes, f"labels {info['labels']} != torchvision {classes}"
    skipped = {s["path"] for s in build["skipped"]}
    norm = lambda p: p.rstrip("/")
    want = [t for p, t in samples if norm(p) not in skipped]
    got = read_labels(store)
    assert len(got) == info["count"] == build["count"], (len(got), info["count"], build["count"])
    assert got == want, f"record labels differ from torchvision: {got[:20]} vs {want[:20]}"
    counts = [want.count(i) for i in range(len(classes))]
    assert info["label_counts"] == counts, (info["label_counts"], counts)
    print(f"build_check: {len(got)} records, {len(classes)} classes, "
          f"{len(skipped)} skipped: labels match torchvision's ImageFolder")


def folder_samples(tree):
    """torchvision's ImageFolder samples of TREE, also with a class that has no image."""
    from torchvision.datasets.folder import find_classes, IMG_EXTENSIONS
    import os

    classes, class_to_idx = find_classes(tree)
    samples = []
    for c in sorted(class_to_idx):
        for root, _, fnames in sorted(os.walk(os.path.join(tree, c), followlinks=True)):
            for f in sorted(fnames):
                if f.lower().endswith(IMG_EXTENSIONS):
                    samples.append((os.path.join(root, f), class_to_idx[c]))
    return classes, samples


def image_bytes(store, field, value):
    """The pixels of an image field's value (raw, or a PNG decoded with Pillow)."""
    import io
    from PIL import Image

    data, h, w = value
    if field["encoding"] == 0:
        return bytes(data)
    img = Image.open(io.BytesIO(bytes(data)))
    assert img.size == (w, h), (img.size, w, h)
    return img.tobytes()


def check_masks(tree, masks, store, build_path, size):
    import os
    import torchvision.transforms as T
    from PIL import Image

    size = int(size)
    build = json.load(open(build_path))
    skipped = {s["path"] for s in build["skipped"]}
    _, samples = folder_samples(tree)
    records = [p for p, _ in samples if p not in skipped]
    s = Store(store)
    assert s.count == len(records), (s.count, len(records))
    image_f, mask_f = s.field("image"), s.field("mask")
    assert mask_f["flags"] & MASK and mask_f["encoding"] in (0, 2), mask_f
    bilinear = T.Compose([T.Resize(size), T.CenterCrop(size)])
    nearest = T.Compose([T.Resize(size, interpolation=T.InterpolationMode.NEAREST),
                         T.CenterCrop(size)])
    images = 0
    for i, path in enumerate(records):
        rel = os.path.relpath(path, tree)
        mpath = os.path.join(masks, os.path.splitext(rel)[0] + ".png")
        rec = s.record(i)
        src = Image.open(path).convert("RGB")
        want_mask = nearest(Image.open(mpath))
        _, h, w = rec["image"]
        assert (w, h) == want_mask.size, (i, (w, h), want_mask.size)
        assert image_bytes(s, mask_f, rec["mask"]) == want_mask.tobytes(), f"record {i}: mask"
        if src.width < 2 * size or src.height < 2 * size:
            want_img = bilinear(src)
            assert image_bytes(s, image_f, rec["image"]) == want_img.tobytes(), f"record {i}: image"
            images += 1
    s.close()
    print(f"build_check: {len(records)} records: masks (and {images} images) are torchvision's, "
          f"pixel for pixel")


def check_skips(build_path, expected):
    build = json.load(open(build_path))
    reported = {s["path"]: s["reason"] for s in build["skipped"]}
    assert build["skipped_count"] == len(build["skipped"])
    for item in expected:
        suffix, reason = item.split("=", 1)
        hits = [p for p in reported if p.endswith(suffix)]
        assert len(hits) == 1, f"{suffix}: not reported exactly once in {sorted(reported)}"
        assert reason in reported[hits[0]], f"{hits[0]}: reason {reported[hits[0]]!r} lacks {reason!r}"
        del reported[hits[0]]
    assert not reported, f"unexpected skips: {reported}"
    print(f"build_check: {len(expected)} bad files reported with their reasons")


if __name__ == "__main__":
    if sys.argv[1] == "masks":
        check_masks(*sys.argv[2:7])
    elif sys.argv[1] == "labels":
        check_labels(*sys.argv[2:6])
    elif sys.argv[1] == "skips":
        check_skips(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown check {sys.argv[1]}")

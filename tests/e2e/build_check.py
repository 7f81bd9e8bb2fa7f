"""Helpers for the builder's end-to-end tests (tests/e2e/build_*.sh).

  build_check.py labels TREE STORE INFO.json BUILD.json
      The store's labels equal torchvision's ImageFolder on TREE: class names
      by label number, and per record the target of the sample it came from
      (samples the build skipped, as named in BUILD.json, are left out).
  build_check.py skips BUILD.json PATH=REASON...
      Each PATH (a suffix of the reported path) is reported with REASON in it,
      and nothing else is reported.

Records are read with python3-lmdb as docs/FORMAT.md describes, not with
dlcache, so the test also checks that a stranger can read a store.
"""
import json
import struct
import sys


def read_labels(store):
    import lmdb

    env = lmdb.open(store, subdir=False, readonly=True, lock=False, max_dbs=2)
    samples = env.open_db(b"samples", create=False)
    labels = []
    with env.begin() as txn:
        cur = txn.cursor(db=samples)
        for i, (key, value) in enumerate(cur):
            assert struct.unpack(">Q", key)[0] == i, f"record key {key!r} is not {i}"
            labels.append(struct.unpack_from("<q", value, 8)[0])
    env.close()
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
    if sys.argv[1] == "labels":
        check_labels(*sys.argv[2:6])
    elif sys.argv[1] == "skips":
        check_skips(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown check {sys.argv[1]}")

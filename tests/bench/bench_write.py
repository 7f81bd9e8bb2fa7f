"""Throughput of dlcache.write() on an ImageFolder tree decoded with PIL (not a test: a program).

    PYTHONPATH=python /usr/bin/python3 tests/bench/bench_write.py /tmp/demo/train \\
        --workers 1 2 [--repeat 3] [--size 256] [--encoding raw|jpeg|png] [--json]

Each sample is what a torch Dataset over the folder would return: {"image": the PIL image
(decoded on dlcache.write()'s worker threads, as np.asarray() asks for its pixels), "label":
the class index}. --size resizes the shorter side and center-crops, as cachebuild --size does
(PIL's BILINEAR). Prints samples/s per worker count and the ratio of the last to the first,
measured in one run: the worker counts alternate --repeat times and each count's median is
kept, so that the load of other jobs on a shared machine falls on both alike. Beside each, the
same samples read and converted to numpy on as many threads without writing anything (the
ceiling write() could reach), and write()'s share of it. The stores are written to a temporary
directory and removed.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import dlcache


def read_only(ds, threads):
    """Samples per second of reading every sample and taking its pixels, on @p threads."""
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for _ in ex.map(lambda i: np.asarray(ds[i]["image"]).shape, range(len(ds)),
                        chunksize=16):
            pass
    return len(ds) / (time.monotonic() - t0)


class Folder:
    """A minimal torchvision.datasets.ImageFolder: (path, class index) sorted like it."""

    def __init__(self, root, size):
        from PIL import Image
        self.Image = Image
        self.size = size
        self.classes = sorted(d for d in os.listdir(root)
                              if os.path.isdir(os.path.join(root, d)))
        self.items = [(os.path.join(root, c, f), k) for k, c in enumerate(self.classes)
                      for f in sorted(os.listdir(os.path.join(root, c)))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        img = self.Image.open(path).convert("RGB")
        if self.size:
            w, h = img.size
            s = self.size / min(w, h)
            img = img.resize((max(self.size, round(w * s)), max(self.size, round(h * s))),
                             self.Image.BILINEAR)
            w, h = img.size
            left, top = (w - self.size) // 2, (h - self.size) // 2
            img = img.crop((left, top, left + self.size, top + self.size))
        return {"image": img, "label": label}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--size", type=int, default=0)
    ap.add_argument("--encoding", default="raw", choices=["raw", "jpeg", "png"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ds = Folder(a.root, a.size)
    tmp = tempfile.mkdtemp(prefix="bench_write.")
    runs = {k: [] for k in a.workers}
    ceiling = {k: [] for k in a.workers}
    try:
        for _ in range(a.repeat):
            for k in a.workers:
                ceiling[k].append(read_only(ds, k))
                r = dlcache.write(ds, os.path.join(tmp, "w.dlc"), workers=k, progress=False,
                                  label_names=ds.classes, force=True,
                                  fields={"image": {"kind": "image", "encoding": a.encoding,
                                                    "variable": True}})  # full-size photos
                runs[k].append(r)
    finally:
        shutil.rmtree(tmp)
    rows = []
    for k in a.workers:
        rs = sorted(runs[k], key=lambda r: r.samples_per_s)
        r = rs[len(rs) // 2]
        c = sorted(ceiling[k])[len(ceiling[k]) // 2]
        rows.append({"workers": k, "count": r.count, "seconds": round(r.seconds, 3),
                     "samples_per_s": round(r.samples_per_s, 1),
                     "read_only_samples_per_s": round(c, 1),
                     "share_of_read_only": round(r.samples_per_s / c, 2),
                     "all_samples_per_s": [round(x.samples_per_s) for x in runs[k]],
                     "file_mib": round(r.file_bytes / 2**20, 1),
                     "content_digest": "%016x" % r.content_digest})
    out = {"root": a.root, "size": a.size, "encoding": a.encoding, "cores": len(
        os.sched_getaffinity(0)), "load_average": os.getloadavg()[0], "runs": rows,
        "speedup_last_vs_first": round(rows[-1]["samples_per_s"] / rows[0]["samples_per_s"], 2)}
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return
    for r in rows:
        print("workers %(workers)d: %(count)d samples in %(seconds).2f s, median "
              "%(samples_per_s).0f samples/s (runs: %(all_samples_per_s)s), %(file_mib).1f MiB, "
              "digest %(content_digest)s; reading alone %(read_only_samples_per_s).0f "
              "samples/s, write() at %(share_of_read_only).2f of it" % r)
    print("speedup %d -> %d workers: %.2fx (%d cores, load average %.1f)" % (
        rows[0]["workers"], rows[-1]["workers"], out["speedup_last_vs_first"], out["cores"],
        out["load_average"]))


if __name__ == "__main__":
    main()

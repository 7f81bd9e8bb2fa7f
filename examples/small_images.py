#!/usr/bin/env python3
"""Small images (an MNIST-sized set: 60,000 one-channel 28 x 28 images with
labels) fed by dlcache and by torch's TensorDataset + DataLoader, side by side,
in one run.

The data: --count crops of real photographs (the demo's: build/bin/mkdemo cuts
ImageNet-like JPEGs from the photos in /usr/share/backgrounds/mate/nature, one
class per photo; each of --photos-count JPEGs gives count / photos-count square
crops of a random 25 to 60% of its shorter side at a random place), turned gray
and downscaled to 28 x 28 with PIL; the label is the photo's class (10).

* dlcache: written once with ``dlcache.write(list of (uint8 28x28, label),
  store, fields={"image": "image", "label": "label"})`` (raw pixels), loaded
  with ``dlcache.Loader(store, batch_size=256, crop=None, flip=0,
  dtype="float32", mean=MEAN, std=STD, threads=T)`` (normalized NCHW
  [256, 1, 28, 28] and int64 labels) and with dtype="uint8" (NHWC, as stored),
  through the Python package; and the C loader alone, without Python:
  ``cachebench load STORE --batch 256 --threads T --crop 0 --flip 0 --dtype
  float32|uint8 --seconds S --json`` (its samples/s, and its memcpy ceiling).
* torch: the same 60,000 images already in memory as tensors, normalized float32
  [60000, 1, 28, 28] (and uint8 for the uint8 row) with int64 labels, in a
  ``TensorDataset`` and ``DataLoader(batch_size=256, shuffle=True)``, with
  num_workers=0 and with T worker processes.

MEAN and STD are the data's own (as MNIST's 0.1307, 0.3081 are). It checks first
that one unshuffled epoch of dlcache is, value for value, the torch tensors. The
issue's target for the C loader on 2 threads: 1.5 million samples/s or more for
float32, uint8 faster. The figures are of one run on a possibly busy machine:
compare the ratios.

    /usr/bin/python3 examples/small_images.py                  # a few minutes on 2 cores
    /usr/bin/python3 examples/small_images.py --workdir /tmp/small --bench-seconds 10
"""

import argparse
import json
import os
import subprocess
import time

import _common as C

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import dlcache  # noqa: E402

TARGET_F32 = 1.5e6


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=60000, help="images (default 60000)")
    p.add_argument("--photos-count", type=int, default=1000,
                   help="demo JPEGs the crops are cut from (default 1000)")
    p.add_argument("--side", type=int, default=28, help="image side (default 28)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--data-seconds", type=float, default=5.0,
                   help="timed window of each Python pipeline (default 5 s)")
    p.add_argument("--bench-seconds", type=float, default=6.0,
                   help="cachebench --seconds (default 6; 0 skips cachebench)")
    p.add_argument("--cachebench", help="path of build/bin/cachebench (default: the build of "
                   "$DLCACHE_BUILD_DIR or $DLCACHE_LIB, else the repository's build/)")
    C.add_common_args(p)
    args = p.parse_args(argv)
    if args.count < args.photos_count or args.batch_size > args.count:
        p.error("--count must be at least --photos-count and --batch-size")
    return args


def _crops(job):
    path, label, n, side, seed = job
    rng = np.random.default_rng(seed)
    im = Image.open(path).convert("L")
    w, h = im.size
    out = np.empty((n, side, side), np.uint8)
    for k in range(n):
        s = int(min(w, h) * rng.uniform(0.25, 0.6))
        x, y = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
        out[k] = np.asarray(im.resize((side, side), Image.BILINEAR, box=(x, y, x + s, y + s)))
    return out, np.full(n, label, np.int64)


def make_images(args, root):
    """(uint8 [count, side, side], int64 [count]) crops of the demo photos, cached in root."""
    import concurrent.futures
    cache = os.path.join(root, "small-%d-%d-%d-%d.npz" % (args.count, args.photos_count,
                                                          args.side, args.seed))
    if os.path.exists(cache):
        with np.load(cache) as z:
            return z["x"], z["y"]
    photos = C.demo_photos(args, root, args.photos_count)
    per = [args.count // len(photos) + (1 if i < args.count % len(photos) else 0)
           for i in range(len(photos))]
    jobs = [(path, label, n, args.side, args.seed * 1000003 + i)
            for i, ((path, label), n) in enumerate(zip(photos, per))]
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(C.cores()) as ex:
        parts = list(ex.map(_crops, jobs, chunksize=16))
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    # Interleave the classes, as a data set's files usually are not sorted by class.
    order = np.random.default_rng(args.seed).permutation(len(x))
    x, y = x[order], y[order]
    np.savez(cache + ".tmp.npz", x=x, y=y)
    os.rename(cache + ".tmp.npz", cache)
    print("made %d gray %dx%d crops of %d demo photos in %.1f s"
          % (len(x), args.side, args.side, len(photos), time.perf_counter() - t0), flush=True)
    return x, y


def write_store(args, root, x, y):
    store = os.path.join(root, "small-%d-%d-%d-%d.dlc" % (args.count, args.photos_count,
                                                          args.side, args.seed))
    params = {"count": args.count, "photos": args.photos_count, "side": args.side,
              "seed": args.seed}
    if C.done_marker(store, params):
        print("reusing %s" % store)
        return store, None
    samples = [(x[i], int(y[i])) for i in range(len(x))]
    r = dlcache.write(samples, store, fields={"image": "image", "label": "label"},
                      workers=args.workers, force=True, progress=False)
    C.mark_done(store, params)
    print("dlcache.write: %d samples in %.1f s (%.0f samples/s), %.1f MB"
          % (r.count, r.seconds, r.samples_per_s, r.file_bytes / 1e6), flush=True)
    return store, r


def dlcache_loader(args, store, dtype, mean, std, shuffle=True, threads=None):
    norm = {"mean": (mean,), "std": (std,)} if dtype != "uint8" else {}
    return dlcache.Loader(store, batch_size=args.batch_size, shuffle=shuffle, seed=args.seed,
                          crop=None, flip=0, dtype=dtype, threads=threads or args.workers,
                          **norm)


def torch_loader(args, ds, workers, shuffle=True):
    g = torch.Generator()
    g.manual_seed(args.seed)
    return torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=shuffle,
                                       num_workers=workers, generator=g,
                                       persistent_workers=workers > 0)


def check_same(args, store, mean, std, xf, xu, y):
    """One unshuffled epoch of each dtype: dlcache's batches are the torch tensors."""
    for dtype, xs in (("float32", xf), ("uint8", xu)):
        at = 0
        with dlcache_loader(args, store, dtype, mean, std, shuffle=False, threads=1) as L:
            for images, labels in L:
                n = images.shape[0]
                C.check(images.dtype == xs.dtype and torch.equal(images, xs[at:at + n]),
                        "%s batch at %d: the images differ from the torch tensors" % (dtype, at))
                C.check(torch.equal(labels, y[at:at + n]), "labels at %d differ" % at)
                at += n
        C.check(at == len(y), "%s: %d samples in the epoch, expected %d" % (dtype, at, len(y)))


def cachebench(args, store, dtype):
    cmd = [C.tool("cachebench", args.cachebench), "load", store, "--batch",
           str(args.batch_size), "--threads", str(args.workers), "--crop", "0", "--flip", "0",
           "--dtype", dtype, "--seconds", "%g" % args.bench_seconds, "--json"]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    shown = os.path.relpath(cmd[0], C.REPO) if cmd[0].startswith(C.REPO + os.sep) else cmd[0]
    return " ".join([shown] + cmd[1:]), json.loads(r.stdout)


def run(args):
    # No model here: torch's own ops (the collate's stack) run on one thread, as in its
    # DataLoader workers. With 2 intra-op threads on a busy 2-core machine tokens.py's
    # pad_sequence ran up to 10 times slower (OpenMP threads waiting for a core).
    torch.set_num_threads(1)
    results, bench = [], {}
    with C.workdir(args.workdir, "dlcache-small-") as root:
        x, y = make_images(args, root)
        mean, std = float(x.mean() / 255.0), float(x.std() / 255.0)
        store, report = write_store(args, root, x, y)
        # The torch side: the same images in memory, as the first thing a user would try.
        xu = torch.from_numpy(x).unsqueeze(-1).contiguous()                  # [N, H, W, 1]
        m32, s32 = torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)
        xf = ((torch.from_numpy(x).unsqueeze(1).float() / 255.0 - m32) / s32).contiguous()
        yt = torch.from_numpy(y)
        check_same(args, store, mean, std, xf, xu, yt)
        print("checked: one unshuffled epoch of dlcache (float32 and uint8) equals the torch "
              "tensors", flush=True)
        load0 = C.load_avg()
        for dtype, xs in (("float32", xf), ("uint8", xu)):
            ds = torch.utils.data.TensorDataset(xs, yt)
            runs = [("dlcache Python Loader, %d threads" % args.workers, None),
                    ("torch TensorDataset + DataLoader, 0 workers", 0)]
            if args.workers > 0:
                runs.append(("torch TensorDataset + DataLoader, %d workers" % args.workers,
                             args.workers))
            for what, workers in runs:
                loader = dlcache_loader(args, store, dtype, mean, std) if workers is None \
                    else torch_loader(args, ds, workers)
                rate, n, secs = C.data_rate(C.forever(loader), lambda b: b[0].shape[0],
                                            args.data_seconds)
                results.append((dtype, what, rate))
                print("%s %s: %.0f samples/s" % (dtype, what, rate), flush=True)
                if workers is None:
                    loader.close()
                else:
                    C.close_torch_loader(loader)
            if args.bench_seconds > 0:
                cmd, j = cachebench(args, store, dtype)
                bench[dtype] = (cmd, j)
                results.append((dtype, "dlcache C loader alone (cachebench), %d threads"
                                % args.workers, j["samples_per_s"]))
                print("%s cachebench: %.0f samples/s" % (dtype, j["samples_per_s"]), flush=True)
        load1 = C.load_avg()

    print("\nsmall images: %d gray %dx%d crops of real photos, 10 classes; batch %d, shuffled, "
          "no augmentation; float32 normalized (mean %.4f, std %.4f) NCHW, or uint8 as stored"
          % (len(x), args.side, args.side, args.batch_size, mean, std))
    print("Python pipelines: 3 warm-up batches untimed, then at least %g s each; cachebench: "
          "its own window of %g s (ceiling measured before and after); torch intra-op "
          "threads 1; load average %.2f before, %.2f after"
          % (args.data_seconds, args.bench_seconds, load0, load1))
    rows = []
    for dtype in ("float32", "uint8"):
        mine = [r for r in results if r[0] == dtype]
        py = next(r[2] for r in mine if r[1].startswith("dlcache Python"))
        for _, what, rate in mine:
            rows.append((dtype, what, "%.0f" % rate,
                         "%.1fx" % (py / rate) if what.startswith("torch") else ""))
    print(C.table(("dtype", "pipeline", "samples/s", "dlcache Python is"), rows,
                  ["<", "<", ">", ">"]))
    for dtype in ("float32", "uint8"):
        if dtype in bench:
            cmd, j = bench[dtype]
            # The ceiling copies blocks of one sample's output bytes (image and label), before
            # and after the loader: a ceiling that moved between the two says the machine did.
            print("%s: %s -> %.0f samples/s, %.2f GB/s of output, %.0f%% of the memcpy ceiling "
                  "(%.0f samples/s; %.2f GB/s before the loader, %.2f after)"
                  % (dtype, cmd, j["samples_per_s"], j["gbytes_per_s"],
                     100 * j["ratio_to_ceiling"], j["ceiling_samples_per_s"],
                     j["ceiling_before_gbytes_per_s"], j["ceiling_after_gbytes_per_s"]))
    if "float32" in bench and "uint8" in bench:
        f, u = bench["float32"][1]["samples_per_s"], bench["uint8"][1]["samples_per_s"]
        print("issue's target, C loader on %d threads: float32 >= 1.5M samples/s: %s "
              "(%.2fM); uint8 faster than float32: %s (%.2fM)"
              % (args.workers, "met" if f >= TARGET_F32 else "NOT met", f / 1e6,
                 "yes" if u > f else "no", u / 1e6))
    if report is not None:
        print("store written by dlcache.write in %.1f s (%.0f samples/s)"
              % (report.seconds, report.samples_per_s))
    return results, bench


def main(argv=None):
    args = parse_args(argv)
    t0 = time.perf_counter()
    run(args)
    print("done in %.0f s" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()

"""Speed of each augmentation op against torchvision on one image (not a test: a program).

    DLCACHE_LIB=build/lib/libdlcache.so PYTHONPATH=python /usr/bin/python3 \\
        tests/bench/bench_ops.py [--size 224] [--repeat 30] [--json] [--accuracy N]

For every op of dlcache.ops, the time of dlcache.ops.apply() (which copies the image and
allocates its output and scratch, as a caller of the Python API does; the loader's worker pass
does neither) and of torchvision.transforms.functional on the same uint8 tensor with one torch
thread, measured in one run: the two alternate --repeat times and each keeps its median, so the
load of other jobs on a shared machine falls on both alike. Prints milliseconds per image and
the ratio torchvision / dlcache.

--accuracy N instead runs every op N times on random images (3 to 79 pixels a side, 1 or 3
channels, a quarter of them low-range) with random parameters against torchvision and prints,
per op, the largest absolute difference and the share of identical values and pixels
(rotate:bilinear and affine:bilinear: with interpolation="bilinear", fill None or given).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

CASES = [
    ("adjust_brightness", dict(brightness_factor=1.3)),
    ("adjust_contrast", dict(contrast_factor=1.3)),
    ("adjust_saturation", dict(saturation_factor=1.3)),
    ("adjust_hue", dict(hue_factor=0.1)),
    ("adjust_sharpness", dict(sharpness_factor=1.5)),
    ("posterize", dict(bits=4)),
    ("solarize", dict(threshold=128)),
    ("autocontrast", {}),
    ("equalize", {}),
    ("rgb_to_grayscale", dict(num_output_channels=3)),
    ("gaussian_blur", dict(kernel_size=23, sigma=1.5)),
    ("rotate", dict(angle=30.0)),
    ("affine", dict(angle=10.0, translate=[3, 2], scale=1.1, shear=[5.0, 0.0])),
]


def _random_params(rng, op, h, w, c):
    u = rng.uniform
    factor = {"adjust_brightness": "brightness_factor", "adjust_contrast": "contrast_factor",
              "adjust_saturation": "saturation_factor", "adjust_sharpness": "sharpness_factor"}
    if op in factor:
        return {factor[op]: u(0, 5 if op == "adjust_sharpness" else 3)}
    if op == "adjust_hue":
        return dict(hue_factor=u(-0.5, 0.5))
    if op == "posterize":
        return dict(bits=int(rng.integers(0, 9)))
    if op == "solarize":
        return dict(threshold=u(0, 255))
    if op == "rgb_to_grayscale":
        return dict(num_output_channels=int(rng.choice([1, 3])) if c == 3 else 1)
    if op == "gaussian_blur":
        kx = min(int(rng.integers(0, min(w, 12))) * 2 + 1, 2 * w - 1)
        ky = min(int(rng.integers(0, min(h, 12))) * 2 + 1, 2 * h - 1)
        return dict(kernel_size=[kx, ky], sigma=[u(0.1, 5), u(0.1, 5)])
    fill = [int(v) for v in rng.integers(0, 256, c)]
    if op == "rotate":
        return dict(angle=u(-180, 180), fill=fill)
    if op == "affine":
        return dict(angle=u(-180, 180), translate=[int(v) for v in rng.integers(-10, 11, 2)],
                    scale=u(0.5, 2), shear=[u(-40, 40), u(-40, 40)], fill=fill)
    return {}


def accuracy(n):
    import torch
    import torchvision.transforms.functional as F
    from dlcache import ops

    rng = np.random.default_rng(2026)
    names = ["adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
             "adjust_sharpness", "posterize", "solarize", "autocontrast", "equalize", "invert",
             "rgb_to_grayscale", "gaussian_blur", "rotate", "affine", "rotate:bilinear",
             "affine:bilinear"]
    print("%-18s %9s %17s %17s %10s" % ("op", "max|diff|", "identical values", "identical pixels",
                                         "values"))
    from torchvision.transforms import InterpolationMode
    for name in names:
        op, _, interp = name.partition(":")
        worst = same_v = all_v = same_p = all_p = 0
        for i in range(n):
            h, w = (int(v) for v in rng.integers(3, 80, 2))
            c = int(rng.choice([1, 3]))
            img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
            if i % 4 == 0:
                img = (img // int(rng.integers(1, 64))).astype(np.uint8)
            kw = _random_params(rng, op, h, w, c)
            if interp:
                kw = dict(kw, fill=None if i % 2 else kw["fill"])
            a = ops.apply(img, op, **kw, **({"interpolation": interp} if interp else {}))
            a = a if a.ndim == 3 else a[:, :, None]
            t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
            if interp:
                kw = dict(kw, interpolation=InterpolationMode(interp))
            b = getattr(F, op)(t, **kw).numpy().transpose(1, 2, 0)
            d = np.abs(a.astype(np.int16) - b.astype(np.int16))
            worst = max(worst, int(d.max()))
            same_v += int((d == 0).sum())
            all_v += d.size
            same_p += int((d == 0).all(axis=2).sum())
            all_p += d.shape[0] * d.shape[1]
        print("%-18s %9d %16.4f%% %16.4f%% %10d" % (name, worst, 100.0 * same_v / all_v,
                                                    100.0 * same_p / all_p, all_v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--accuracy", type=int, default=0, metavar="N")
    args = ap.parse_args()
    if args.accuracy:
        accuracy(args.accuracy)
        return
    import torch
    import torchvision.transforms.functional as F
    from dlcache import ops

    torch.set_num_threads(1)
    img = np.random.default_rng(0).integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    rows = []
    for op, kw in CASES:
        ours, theirs = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ops.apply(img, op, **kw)
            t1 = time.perf_counter()
            getattr(F, op)(t, **kw)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
        a, b = statistics.median(ours), statistics.median(theirs)
        rows.append({"op": op, "dlcache_ms": a * 1e3, "torchvision_ms": b * 1e3, "ratio": b / a})
    if args.json:
        json.dump({"size": args.size, "repeat": args.repeat, "ops": rows}, sys.stdout, indent=1)
        print()
        return
    print("%-18s %12s %15s %7s" % ("op", "dlcache ms", "torchvision ms", "ratio"))
    for r in rows:
        print("%-18s %12.3f %15.3f %6.1fx" % (r["op"], r["dlcache_ms"], r["torchvision_ms"],
                                             r["ratio"]))


if __name__ == "__main__":
    main()

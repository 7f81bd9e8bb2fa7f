#!/usr/bin/env python3
"""Today's recipe against RRC + flip alone and against torch's best path (issue 33, "Speed").

In one run, on the same store, with the same thread count (default 2):

* recipe: dlcache.Loader with the issue's torchvision recipe: RandomResizedCrop 224, flip,
  TrivialAugmentWide, RandomErasing 0.1, normalized float16. Parts this build of dlcache lacks
  (the per-sample ops of issue 33 come from other branches) are left out, and the output says
  which;
* recipe+mix: the same with torchvision's MixUp 0.2 / CutMix 1.0 and label smoothing 0.1 (the
  rest of its published recipe), as an extra figure;
* plain: the same Loader with RandomResizedCrop and flip alone (float16);
* torch: a torch DataLoader with as many worker processes over the store's pixels already in
  memory (a uint8 tensor: no decoding, no I/O), applying torchvision's tensor transforms per
  sample (RandomResizedCrop(antialias), flip, TrivialAugmentWide, ConvertImageDtype,
  Normalize, RandomErasing, .half()), the parts the dlcache recipe has.

Prints samples/s of each and the ratios recipe / plain and recipe / torch (the issue asks 0.5
or more and 10 or more). Ratios are of one run on a shared machine; no pass or fail.

    python3 tests/bench/bench_recipes.py STORE [--threads 2] [--seconds 3] [--json OUT]
"""

import argparse
import inspect
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torchvision.transforms as T  # noqa: E402

import dlcache  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def recipe_args(have):
    """torchvision's recipe as Loader arguments, and the parts this dlcache lacks."""
    kw = dict(crop=224, random_resized_crop=True, flip=0.5, dtype="float16", mean=MEAN, std=STD)
    missing = []
    for name, value in (("auto_augment", "trivial_augment_wide"), ("random_erasing", 0.1)):
        if name in have:
            kw[name] = value
        else:
            missing.append(name)
    return kw, missing


def rate_dlcache(store, threads, seconds, batch, **kw):
    with dlcache.Loader(store, batch, threads=threads, seed=0, drop_last=True, **kw) as ld:
        return _rate(ld, seconds)


def _rate(loader, seconds, per_batch=None):
    """Samples per second after a warm-up of 3 batches, over about @p seconds."""
    n = 0
    t0 = None
    while True:
        for b in loader:
            x = b[0] if isinstance(b, (tuple, list)) else b
            if per_batch is not None:
                per_batch(b)
            if t0 is None:
                n += 1
                if n == 3:
                    t0, n = time.perf_counter(), 0
                continue
            n += x.shape[0]
            el = time.perf_counter() - t0
            if el >= seconds:
                return n / el


class InMemory(torch.utils.data.Dataset):
    """The store's pixels as one uint8 tensor [N, H, W, C]; torchvision's tensor transforms."""

    def __init__(self, pixels, labels, tf):
        self.pixels, self.labels, self.tf = pixels, labels, tf

    def __len__(self):
        return len(self.pixels)

    def __getitem__(self, i):
        return self.tf(self.pixels[i].permute(2, 0, 1)), self.labels[i]


def load_pixels(store):
    s = dlcache.Store(store)
    recs = [s[i] for i in range(len(s))]
    pixels = torch.stack([torch.from_numpy(r["image"]) for r in recs])
    labels = torch.tensor([int(r["label"]) for r in recs])
    return pixels, labels


def mix_batch(x, y, classes, rng):
    """timm's Mixup(0.2 / 1.0, switch 0.5, smoothing 0.1) on a batch, in place."""
    off = 0.1 / classes
    t = torch.full((len(y), classes), off)
    t.scatter_(1, y.view(-1, 1), 1 - 0.1 + off)
    if rng.random() < 0.5:
        lam = float(rng.beta(1.0, 1.0))
        h, w = x.shape[-2:]
        r = (1 - lam) ** 0.5
        ch, cw = int(h * r), int(w * r)
        cy, cx = rng.integers(h), rng.integers(w)
        yl, yh = max(cy - ch // 2, 0), min(cy + ch // 2, h)
        xl, xh = max(cx - cw // 2, 0), min(cx + cw // 2, w)
        x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        lam = 1 - (yh - yl) * (xh - xl) / (h * w)
    else:
        lam = float(rng.beta(0.2, 0.2))
        x.mul_(lam).add_(x.flip(0).mul_(1 - lam))
    return t * lam + t.flip(0) * (1 - lam)


def rate_torch(store, threads, seconds, batch, with_ta, with_re, with_mix):
    import numpy as np
    pixels, labels = load_pixels(store)
    steps = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()]
    if with_ta:
        steps.append(T.TrivialAugmentWide())
    steps += [T.ConvertImageDtype(torch.float32), T.Normalize(MEAN, STD)]
    if with_re:
        steps.append(T.RandomErasing(0.1))
    steps.append(T.Lambda(lambda t: t.half()))
    ds = InMemory(pixels, labels, T.Compose(steps))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                                     num_workers=threads, persistent_workers=True)
    rng = np.random.default_rng(0)
    classes = int(labels.max()) + 1
    per = (lambda b: mix_batch(b[0], b[1], max(classes, 2), rng)) if with_mix else None
    return _rate(dl, seconds, per)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("store")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(1)
    have = set(inspect.signature(dlcache.Loader.__init__).parameters)
    kw, missing = recipe_args(have)
    plain = dict(crop=224, random_resized_crop=True, flip=0.5, dtype="float16", mean=MEAN,
                 std=STD)
    out = {"threads": a.threads, "batch_size": a.batch_size, "recipe_missing": missing}
    print("recipe: %s%s" % (", ".join(k for k in kw if k not in plain) or "(RRC + flip only)",
                            "; not in this dlcache: " + ", ".join(missing) if missing else ""))
    out["recipe"] = rate_dlcache(a.store, a.threads, a.seconds, a.batch_size, **kw)
    out["plain"] = rate_dlcache(a.store, a.threads, a.seconds, a.batch_size, **plain)
    out["torch"] = rate_torch(a.store, a.threads, a.seconds, a.batch_size,
                              "auto_augment" in kw, "random_erasing" in kw, False)
    if "mixup" in have:
        out["recipe_mix"] = rate_dlcache(a.store, a.threads, a.seconds, a.batch_size, mixup=0.2,
                                         cutmix=1.0, label_smoothing=0.1, **kw)
    out["recipe_over_plain"] = out["recipe"] / out["plain"]
    out["recipe_over_torch"] = out["recipe"] / out["torch"]
    print("samples/s: recipe %.0f, RRC+flip %.0f, torch DataLoader (%d workers, in memory) %.0f"
          % (out["recipe"], out["plain"], a.threads, out["torch"]))
    print("recipe / RRC+flip = %.2f (issue: >= 0.5); recipe / torch = %.1fx (issue: >= 10x)"
          % (out["recipe_over_plain"], out["recipe_over_torch"]))
    if "recipe_mix" in out:
        out["mix_over_recipe"] = out["recipe_mix"] / out["recipe"]
        print("with MixUp 0.2 / CutMix 1.0 and label smoothing: %.0f samples/s, %.2f of the "
              "recipe without them" % (out["recipe_mix"], out["mix_over_recipe"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Train torchvision's resnet18 on the demo data twice, once fed by dlcache and
once by torch's DataLoader over the same JPEGs, and print for both:

* data images/s: the input pipeline alone (iterating without the model);
* step time: data wait + forward + backward + SGD step, per batch;
* the loss curve, so one sees that training is real.

Both pipelines do the same augmentation: RandomResizedCrop to --crop,
horizontal flip with p = 0.5, float32 normalized with ImageNet's mean/std,
NCHW, with the same number of workers (--workers dlcache threads vs.
DataLoader worker processes). dlcache reads a store built once from the JPEGs
(decoded, resized to --store-size and center-cropped); torch decodes every
JPEG every epoch, which is the cost dlcache removes.

    /usr/bin/python3 examples/train.py                 # makes demo data if needed
    /usr/bin/python3 examples/train.py --data demo-data/train --steps 300

Runs on CPU by default (a few minutes on 2 cores); --device cuda uses a GPU.
The figures are of one run on a possibly busy machine: compare the ratio.

--recipe trains with one of today's published recipes instead, dlcache only
(docs/RECIPES.md maps each to its arguments line by line):

    classic       RandomResizedCrop + flip (the 2017 ImageNet recipe)
    torchvision   torchvision's ImageNet recipe: TrivialAugmentWide, RandomErasing
                  0.1, MixUp 0.2 / CutMix 1.0, label smoothing 0.1, repeated
                  augmentation 4
    timm          timm's rand-m9-mstd0.5: RandAugment, RandomErasing 0.25,
                  MixUp 0.8 / CutMix 1.0, label smoothing 0.1
    ffcv          FFCV's ResNet recipe: progressive resizing (a linear ramp over
                  the epochs), label smoothing 0.1, bfloat16 batches
    dino          DINO's multi-crop: 2 global and 6 local views with color jitter,
                  grayscale, blur and solarize, trained with a small DINO loss

    /usr/bin/python3 examples/train.py --recipe timm --steps 50

A recipe whose options this dlcache does not have yet says which and exits
with status 3.
"""

import argparse
import copy
import inspect
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision import transforms  # noqa: E402

import dlcache  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="ImageFolder directory of JPEGs (default: demo-data/train, "
                   "made with build/bin/mkdemo when missing)")
    p.add_argument("--store", help="store file (default: next to the data; built when missing)")
    p.add_argument("--count", type=int, default=3000, help="demo images to make (default 3000)")
    p.add_argument("--steps", type=int, default=200, help="training steps per pipeline (200)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--crop", type=int, default=112, help="training crop (112)")
    p.add_argument("--store-size", type=int, default=None,
                   help="store resolution (default crop * 256 / 224)")
    p.add_argument("--workers", type=int, default=2,
                   help="dlcache threads = DataLoader workers (default 2)")
    p.add_argument("--data-batches", type=int, default=40,
                   help="batches timed for the data-only measurement (40)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["dlcache", "torch"], help="run one pipeline only")
    p.add_argument("--recipe", choices=sorted(RECIPES),
                   help="train with a published recipe (dlcache only; see docs/RECIPES.md)")
    args = p.parse_args()
    if args.recipe:
        args.only = "dlcache"
    return args


def ensure_data(args):
    if args.data:
        return args.data
    data = os.path.join(REPO, "demo-data", "train")
    if os.path.isdir(data) and os.listdir(data):
        return data
    mkdemo = os.path.join(REPO, "build", "bin", "mkdemo")
    if not os.access(mkdemo, os.X_OK):
        sys.exit("no --data given and %s is missing: run `make build` first" % mkdemo)
    out = os.path.join(REPO, "demo-data")
    print("making %d demo JPEGs in %s" % (args.count, out), flush=True)
    subprocess.run([mkdemo, out, "--count", str(args.count)], check=True)
    return data


def ensure_store(args, data):
    size = args.store_size or int(round(args.crop * 256 / 224))
    store = args.store or os.path.join(os.path.dirname(os.path.abspath(data)),
                                       "train-%d.dlc" % size)
    if not os.path.exists(store):
        print("building %s (size %d) from %s" % (store, size, data), flush=True)
        r = dlcache.build(data, store, size=size)
        print("  %d images in %.1f s (%.0f images/s)" % (r.count, r.seconds, r.images_per_s))
    return store


# ---- Published recipes as Loader arguments (docs/RECIPES.md) ---------------------------------
# Each returns the keyword arguments of dlcache.Loader for a crop of args.crop (the recipes'
# 224 / 176 scaled to the example's small images) and the names of the arguments it needs.

def _classic(args):
    return dict(crop=args.crop, random_resized_crop=True, flip=0.5, dtype="float32")


def _torchvision(args):
    # torchvision references/classification, the "new recipe" (v0.13 weights):
    # --auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0
    # --label-smoothing 0.1 (RandomChoice of MixUp and CutMix: switch 0.5) --ra-sampler
    # --ra-reps 4.
    return dict(crop=args.crop, random_resized_crop=True, flip=0.5,
                auto_augment="trivial_augment_wide", random_erasing=0.1,
                mixup=0.2, cutmix=1.0, switch_prob=0.5, mix_prob=1.0, label_smoothing=0.1,
                aug_repeats=4, dtype="float16")


def _timm(args):
    # timm train.py: --aa rand-m9-mstd0.5 --reprob 0.25 --remode pixel --mixup 0.8
    # --cutmix 1.0 --smoothing 0.1 (mixup_prob 1.0, mixup_switch_prob 0.5); no color jitter
    # when an auto-augment policy is set.
    return dict(crop=args.crop, random_resized_crop=True, flip=0.5,
                auto_augment="rand-m9-mstd0.5",  # timm's own op set and grammar
                random_erasing=dict(p=0.25, value="random"),
                mixup=0.8, cutmix=1.0, switch_prob=0.5, mix_prob=1.0, label_smoothing=0.1,
                dtype="float16")


def _ffcv(args):
    # FFCV's rn50 config: res from 160 to 192 (start_ramp to end_ramp epochs), label
    # smoothing 0.1, flip; here scaled: from crop * 160/192 up to crop over 3 epochs.
    lo = max(16, int(round(args.crop * 160 / 192 / 8)) * 8)

    def ramp(epoch, lo=lo, hi=args.crop, epochs=3):
        return int(round((lo + (hi - lo) * min(epoch, epochs - 1) / (epochs - 1)) / 8) * 8)

    return dict(resolution=ramp, max_resolution=args.crop, random_resized_crop=True, flip=0.5,
                label_smoothing=0.1, dtype="bfloat16")


def _dino(args):
    # DINO (Caron et al. 2021) / its main_dino.py DataAugmentationDINO: global crops 224 with
    # scale (0.4, 1), local crops 96 with scale (0.05, 0.4); flip, color jitter (0.4, 0.4,
    # 0.2, 0.1) with p 0.8, grayscale 0.2; blur 1.0 / 0.1 / 0.5 and solarize 0 / 0.2 / 0.
    g, l = args.crop, max(16, args.crop * 96 // 224)
    # A Gaussian kernel of about 10% of the crop's side, odd (SimCLR's rule; DINO's PIL blur has
    # no kernel size): 23 at 224, 9 at 96.
    kg, kl = (max(3, int(side * 0.1) | 1) for side in (g, l))
    jitter = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1, p=0.8)
    common = dict(flip=0.5, color_jitter=jitter, grayscale=0.2)
    return dict(views=[
        dict(name="global1", count=1, crop=g, scale=(0.4, 1.0),
             blur=dict(p=1.0, sigma=(0.1, 2.0), kernel_size=kg), **common),
        dict(name="global2", count=1, crop=g, scale=(0.4, 1.0),
             blur=dict(p=0.1, sigma=(0.1, 2.0), kernel_size=kg),
             solarize=dict(p=0.2, threshold=128), **common),
        dict(name="local", count=6, crop=l, scale=(0.05, 0.4),
             blur=dict(p=0.5, sigma=(0.1, 2.0), kernel_size=kl), **common),
    ], dtype="float32", fields=["image"])


RECIPES = {"classic": _classic, "torchvision": _torchvision, "timm": _timm, "ffcv": _ffcv,
           "dino": _dino}
# Arguments of the recipes that older (or partial) builds of dlcache may not have.
OPTIONAL_ARGS = ("auto_augment", "auto_augment_options", "random_erasing", "mixup", "cutmix",
                 "label_smoothing", "resolution", "color_jitter", "grayscale", "blur", "solarize",
                 "aug_repeats")


def recipe_kwargs(args):
    """The recipe's Loader arguments; exits with status 3, naming them, when this dlcache lacks
    some (another part of issue 33 not merged yet)."""
    kw = RECIPES[args.recipe](args)
    have = set(inspect.signature(dlcache.Loader.__init__).parameters)
    used = set(kw) | {k for v in kw.get("views", []) for k in v}
    missing = sorted(k for k in OPTIONAL_ARGS if k in used and k not in have)
    if missing:
        print("recipe %r needs dlcache.Loader(%s), which this dlcache does not have"
              % (args.recipe, ", ".join("%s=" % k for k in missing)), file=sys.stderr)
        sys.exit(3)
    return kw


def dlcache_loader(args, store):
    if args.recipe:
        return dlcache.Loader(store, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                              drop_last=True, mean=MEAN, std=STD, threads=args.workers,
                              **recipe_kwargs(args))
    return dlcache.Loader(store, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                          drop_last=True, crop=args.crop, random_resized_crop=True, flip=0.5,
                          dtype="float32", mean=MEAN, std=STD, threads=args.workers)


def torch_loader(args, data):
    tf = transforms.Compose([
        transforms.RandomResizedCrop(args.crop),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = torchvision.datasets.ImageFolder(data, transform=tf)
    g = torch.Generator()
    g.manual_seed(args.seed)
    return torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                       drop_last=True, num_workers=args.workers, generator=g,
                                       persistent_workers=args.workers > 0)


def forever(loader):
    """Batches across epoch boundaries (a new iter() is the next epoch for both)."""
    while True:
        for batch in loader:
            if isinstance(batch, dict):  # multi-crop: the views, no label
                yield [batch[k] for k in sorted(batch) if k.startswith("image_")], None
                continue
            yield batch[0], batch[1]


def train_dino(loader, args):
    """A small DINO: a student sees every view, an EMA teacher the global ones; cross-entropy
    between the teacher's centered, sharpened softmax and the student's (other views only)."""
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    student = torchvision.models.resnet18(num_classes=64).to(device)
    teacher = copy.deepcopy(student)
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(student.parameters(), lr=args.lr, momentum=0.9)
    center = torch.zeros(64, device=device)
    it = forever(loader)
    losses, times, waits = [], [], []
    t_prev = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        views, _ = next(it)  # image_global1 [N,1,C,H,W], image_global2, image_local [N,K,...]
        crops = [v[:, k].to(device).float() for v in views for k in range(v.shape[1])]
        waits.append(time.perf_counter() - t0)
        n_global = 2
        # Outputs on the unit sphere (DINO's head ends with an L2-normalized layer).
        norm = torch.nn.functional.normalize
        with torch.no_grad():
            t_out = [norm(teacher(c), dim=1) for c in crops[:n_global]]
            t_prob = [torch.softmax((o - center) / 0.04, dim=1) for o in t_out]
        s_out = [norm(student(c), dim=1) for c in crops]
        loss, terms = 0.0, 0
        for i, tp in enumerate(t_prob):
            for j, so in enumerate(s_out):
                if i == j:
                    continue
                loss = loss + torch.sum(-tp * torch.log_softmax(so / 0.1, dim=1), dim=1).mean()
                terms += 1
        loss = loss / terms
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for ps, pt in zip(student.parameters(), teacher.parameters()):
                pt.mul_(0.996).add_(ps.detach(), alpha=0.004)
            center.mul_(0.9).add_(torch.cat(t_out).mean(0), alpha=0.1)
        losses.append(loss.item())
        now = time.perf_counter()
        times.append(now - t_prev)
        t_prev = now
        if step % 20 == 0 or step == args.steps - 1:
            print("  %-8s step %4d  loss %.3f  step %.3f s (data wait %.3f s)"
                  % ("dino", step, loss.item(), times[-1], waits[-1]), flush=True)
    skip = min(5, len(times) - 1)
    return losses, sum(times[skip:]) / len(times[skip:]), sum(waits[skip:]) / len(waits[skip:])


def data_rate(loader, n_batches):
    """Images/s of the input pipeline alone; the first batches (worker start,
    page cache) are not timed."""
    it = forever(loader)
    for _ in range(min(3, n_batches)):
        next(it)
    t0 = time.perf_counter()
    images = 0
    for _ in range(n_batches):
        x, _ = next(it)
        images += (x[0] if isinstance(x, list) else x).shape[0]
    return images / (time.perf_counter() - t0)


def train(name, loader, num_classes, args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = torchvision.models.resnet18(num_classes=num_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    it = forever(loader)
    losses, times, waits = [], [], []
    t_prev = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        x, y = next(it)
        # dlcache's tensors are views of its batch slot, valid until the next
        # batch: using them inside the step is fine, .to(device) copies.
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        # Recipes with MixUp / CutMix / label smoothing give soft float32 targets [N, classes],
        # which CrossEntropyLoss takes as probabilities; 16-bit images go to float32 here (on a
        # GPU one would run the model under autocast instead).
        x = x.float()
        waits.append(time.perf_counter() - t0)
        out = model(x)
        loss = loss_fn(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        now = time.perf_counter()
        times.append(now - t_prev)
        t_prev = now
        if step % 20 == 0 or step == args.steps - 1:
            print("  %-8s step %4d  loss %.3f  step %.3f s (data wait %.3f s)"
                  % (name, step, loss.item(), times[-1], waits[-1]), flush=True)
    skip = min(5, len(times) - 1)  # the first steps pay for worker start-up
    return losses, sum(times[skip:]) / len(times[skip:]), sum(waits[skip:]) / len(waits[skip:])


def main():
    args = parse_args()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    data = ensure_data(args)
    store = ensure_store(args, data)
    info = dlcache.info(store)
    print("store %s: %d images, %d classes, %dx%d" % (store, info.count, info.num_labels,
                                                      info.height, info.width))
    results = {}
    for name in ("dlcache", "torch"):
        if args.only and args.only != name:
            continue
        loader = dlcache_loader(args, store) if name == "dlcache" else torch_loader(args, data)
        rate = data_rate(loader, args.data_batches)
        print("%s: data path alone %.0f images/s" % (name, rate), flush=True)
        if args.recipe == "dino":
            losses, step_s, wait_s = train_dino(loader, args)
        else:
            losses, step_s, wait_s = train(name, loader, info.num_labels, args)
        results[name] = (rate, step_s, wait_s, losses)
        if name == "dlcache":
            loader.close()
        del loader

    if args.recipe:
        print("\nrecipe %s, crop %d, batch %d, %d workers, %s"
              % (args.recipe, args.crop, args.batch_size, args.workers, args.device))
    else:
        print("\nsame augmentation (RandomResizedCrop %d, flip, float32 normalized), batch %d, "
              "%d workers, %s" % (args.crop, args.batch_size, args.workers, args.device))
    print("%-8s %14s %12s %14s %11s %11s" % ("pipeline", "data images/s", "step (s)",
                                            "data wait (s)", "first loss", "last loss"))
    for name, (rate, step_s, wait_s, losses) in results.items():
        k = min(10, len(losses))
        print("%-8s %14.0f %12.3f %14.3f %11.3f %11.3f"
              % (name, rate, step_s, wait_s, sum(losses[:k]) / k, sum(losses[-k:]) / k))
    if len(results) == 2:
        d, t = results["dlcache"], results["torch"]
        print("dlcache / torch: data path %.1fx faster" % (d[0] / t[0]))
        # Say which step was faster, and why: where the model bounds both steps (on a few CPU
        # cores), the data wait is small in both and the loader's threads share the cores with
        # the model's, so dlcache's step can be the slower one.
        faster, slower = ("dlcache", "torch") if d[1] <= t[1] else ("torch", "dlcache")
        print("step time: %s's %.3f s is %.2fx faster than %s's %.3f s"
              % (faster, min(d[1], t[1]), max(d[1], t[1]) / min(d[1], t[1]), slower,
                 max(d[1], t[1])))
        if max(d[2], t[2]) < 0.25 * min(d[1], t[1]):
            print("  the model bounds both steps: each waited at most %.3f s a step for data "
                  "(%d CPU cores; the loader's threads share them with the model's)"
                  % (max(d[2], t[2]), os.cpu_count() or 1))
    print("\nloss curve (mean of each 10 steps):")
    for name, (_, _, _, losses) in results.items():
        pts = [sum(losses[i:i + 10]) / len(losses[i:i + 10]) for i in range(0, len(losses), 10)]
        print("  %-8s %s" % (name, " ".join("%.2f" % v for v in pts)))
    if any(math.isnan(v) for r in results.values() for v in r[3]):
        sys.exit("loss became NaN")


if __name__ == "__main__":
    main()

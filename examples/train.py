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
"""

import argparse
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
    return p.parse_args()


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


def dlcache_loader(args, store):
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
            yield batch[0], batch[1]


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
        images += x.shape[0]
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
        losses, step_s, wait_s = train(name, loader, info.num_labels, args)
        results[name] = (rate, step_s, wait_s, losses)
        if name == "dlcache":
            loader.close()
        del loader

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

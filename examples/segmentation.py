#!/usr/bin/env python3
"""Semantic segmentation fed by dlcache and by torch's DataLoader, side by side:
images and masks from real photos, the same joint augmentation, one run.

The data (examples/_common.py, "scenes"): --count demo JPEGs that build/bin/mkdemo
cuts from real photographs, resized and center-cropped to --size and saved as
JPEGs, each with a mask of 5 classes made by colour quantisation of its pixels
(dark, pale, warm, green, blue; not semantic labels, but real image structure a
model can learn), saved as an 8-bit PNG.

* dlcache: the pairs are written once with
  ``dlcache.write(dataset, store, fields={"image": "image", "mask": "mask"})``
  (pixels raw, the mask PNG-encoded, lossless), then loaded with
  ``dlcache.Loader(store, ..., crop=C, random_resized_crop=(scale, ratio),
  flip=0.5, dtype="float32")``: one RandomResizedCrop box and one flip per
  sample, applied to the image (antialiased bilinear, normalized NCHW) and to the
  mask (nearest neighbour, class ids never blended). Batches are dicts
  {"image": float32 [N, 3, C, C], "mask": uint8 [N, C, C, 1]}.
* torch: a Dataset that opens the JPEG and the PNG with PIL and applies the same
  joint transform with torchvision.transforms.functional
  (RandomResizedCrop.get_params, resized_crop bilinear for the image and nearest
  for the mask, hflip, to_tensor, normalize), in a DataLoader with the same batch
  size and --workers worker processes (default: the cores).

For both it prints the data path alone (samples/s, iterating without a model),
then trains torchvision's LR-ASPP MobileNetV3-Large (no pretrained weights,
5 classes) for --steps steps and prints the step time, the time the step waited
for data, and the loss. The figures are of one run on a possibly busy machine:
compare the ratio.

    /usr/bin/python3 examples/segmentation.py                  # a few minutes on 2 cores
    /usr/bin/python3 examples/segmentation.py --workdir /tmp/seg --steps 30
"""

import argparse
import math
import os
import random
import time

import _common as C

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import functional as TF  # noqa: E402

import dlcache  # noqa: E402

RATIO = (3 / 4, 4 / 3)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000, help="images (default 1000)")
    p.add_argument("--size", type=int, default=160,
                   help="side of the stored images and masks (default 160)")
    p.add_argument("--crop", type=int, default=128, help="training crop (default 128)")
    p.add_argument("--scale", type=float, nargs=2, default=(0.25, 1.0), metavar=("LO", "HI"),
                   help="RandomResizedCrop area range (default 0.25 1); ratio 3/4..4/3")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20,
                   help="training steps per pipeline (20; 0: the data path only)")
    p.add_argument("--data-seconds", type=float, default=5.0,
                   help="length of the data-only window of each pipeline (default 5 s)")
    p.add_argument("--mask-encoding", choices=["png", "raw"], default="png",
                   help="how the store holds the masks (default png, write()'s default)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", choices=["dlcache", "torch"], help="run one pipeline only")
    C.add_common_args(p)
    args = p.parse_args(argv)
    if args.crop > args.size or args.batch_size > args.count:
        p.error("--crop must be at most --size, --batch-size at most --count")
    return args


class SceneFiles(torch.utils.data.Dataset):
    """(image, mask) of the scene files, as PIL images: what dlcache.write() reads."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        return {"image": Image.open(it["image"]).convert("RGB"), "mask": Image.open(it["mask"])}


class SegmentationFiles(torch.utils.data.Dataset):
    """The torch pipeline: JPEG + PNG decoded by PIL every epoch, the joint
    RandomResizedCrop + flip of torchvision.transforms.functional, normalize."""

    def __init__(self, items, crop, scale):
        self.items, self.crop, self.scale = items, crop, tuple(scale)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        img = Image.open(it["image"]).convert("RGB")
        mask = Image.open(it["mask"])
        top, left, h, w = torchvision.transforms.RandomResizedCrop.get_params(
            img, self.scale, RATIO)
        size = [self.crop, self.crop]
        img = TF.resized_crop(img, top, left, h, w, size, InterpolationMode.BILINEAR)
        mask = TF.resized_crop(mask, top, left, h, w, size, InterpolationMode.NEAREST)
        if random.random() < 0.5:
            img, mask = TF.hflip(img), TF.hflip(mask)
        x = TF.normalize(TF.to_tensor(img), C.MEAN, C.STD)
        return x, torch.from_numpy(np.array(mask, dtype=np.uint8))


def write_store(args, root, items):
    store = os.path.join(root, "segmentation-%d-%d-%s.dlc" % (args.count, args.size,
                                                             args.mask_encoding))
    params = {"count": args.count, "size": args.size, "seed": args.seed,
              "mask": args.mask_encoding}
    if C.done_marker(store, params):
        print("reusing %s" % store)
        return store, None
    mask = "mask" if args.mask_encoding == "png" else {"kind": "mask", "encoding": "raw"}
    r = dlcache.write(SceneFiles(items), store, fields={"image": "image", "mask": mask},
                      workers=args.workers, force=True, progress=False)
    C.mark_done(store, params)
    print("dlcache.write: %d samples in %.1f s (%.0f samples/s), %.1f MB"
          % (r.count, r.seconds, r.samples_per_s, r.file_bytes / 1e6), flush=True)
    return store, r


def check_store(store, items, n=8):
    """The first records, loaded without augmentation, are the files' pixels and masks."""
    with dlcache.Loader(store, batch_size=min(n, len(items)), shuffle=False, crop=None,
                        random_crop=False, flip=0, dtype="uint8", threads=1) as L:
        b = next(iter(L))
        for i in range(b["image"].shape[0]):
            want = np.asarray(Image.open(items[i]["image"]).convert("RGB"))
            C.check(np.array_equal(b["image"][i].numpy(), want),
                    "record %d: the image differs from %s" % (i, items[i]["image"]))
            want = np.asarray(Image.open(items[i]["mask"]))
            C.check(np.array_equal(b["mask"][i, :, :, 0].numpy(), want),
                    "record %d: the mask differs from %s" % (i, items[i]["mask"]))


def dlcache_loader(args, store):
    return dlcache.Loader(store, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                          drop_last=True, crop=args.crop,
                          random_resized_crop=(tuple(args.scale), RATIO), flip=0.5,
                          dtype="float32", mean=C.MEAN, std=C.STD, threads=args.workers,
                          as_dict=True)


def torch_loader(args, items):
    g = torch.Generator()
    g.manual_seed(args.seed)
    return torch.utils.data.DataLoader(
        SegmentationFiles(items, args.crop, args.scale), batch_size=args.batch_size,
        shuffle=True, drop_last=True, num_workers=args.workers, generator=g,
        persistent_workers=args.workers > 0)


def pairs(name, loader):
    """(images float32 [N, 3, C, C], masks uint8 [N, C, C]) from either pipeline. dlcache's
    tensors are views of its batch slot, valid until the next batch: used within the step."""
    for b in C.forever(loader):
        if name == "dlcache":
            yield b["image"], b["mask"][..., 0]
        else:
            yield b


def check_batch(x, y, args):
    n, c = args.batch_size, args.crop
    C.check(tuple(x.shape) == (n, 3, c, c) and x.dtype == torch.float32,
            "images: %s %s" % (tuple(x.shape), x.dtype))
    C.check(tuple(y.shape) == (n, c, c) and y.dtype == torch.uint8,
            "masks: %s %s" % (tuple(y.shape), y.dtype))
    C.check(int(y.max()) < len(C.SCENE_CLASSES), "a mask value is not a class id")
    C.check(bool(torch.isfinite(x).all()), "an image holds a NaN or an infinity")


def train(name, batches, args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=len(C.SCENE_CLASSES)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()

    def step(batch):
        x, y = batch
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True).long()
        loss = loss_fn(model(x)["out"], y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return C.train_steps(name, batches, step, args.steps)


def run(args):
    torch.set_num_threads(max(1, C.cores()))
    with C.workdir(args.workdir, "dlcache-segmentation-") as root:
        items = C.scenes(args, root, args.count, args.size)
        load0 = C.load_avg()
        results, write_report = {}, None
        for name in ("dlcache", "torch"):
            if args.only and args.only != name:
                continue
            if name == "dlcache":
                store, write_report = write_store(args, root, items)
                check_store(store, items)
                loader = dlcache_loader(args, store)
            else:
                loader = torch_loader(args, items)
            batches = pairs(name, loader)
            check_batch(*next(batches), args)
            rate, n, secs = C.data_rate(batches, lambda b: b[0].shape[0], args.data_seconds)
            print("%s: data path alone %.0f samples/s (%d samples in %.1f s)"
                  % (name, rate, n, secs), flush=True)
            if args.steps > 0:
                results[name] = (rate,) + C.summarize_steps(train(name, batches, args))
            else:
                results[name] = (rate,) + (math.nan,) * 4
            if name == "dlcache":
                loader.close()
            else:
                C.close_torch_loader(loader)
            del batches, loader
        load1 = C.load_avg()

    print("\nsegmentation: %d images %dx%d + masks (%d classes), RandomResizedCrop %d "
          "scale %g..%g + flip, applied jointly; float32 normalized images, uint8 masks; "
          "batch %d, %d workers, %s; LR-ASPP MobileNetV3-Large, Adam"
          % (args.count, args.size, args.size, len(C.SCENE_CLASSES), args.crop,
             args.scale[0], args.scale[1], args.batch_size, args.workers, args.device))
    print("data path: 3 warm-up batches untimed, then at least %g s; %sload average %.2f "
          "before, %.2f after" % (args.data_seconds, "step: mean of steps %d..%d (the first "
                                  "pay for start-up); " % (C.steps_skipped(args.steps),
                                                            args.steps - 1)
                                  if args.steps else "", load0, load1))
    rows = []
    def fmt(v, spec="%.3f"):
        return "-" if math.isnan(v) else spec % v
    for name, (rate, step_s, wait_s, first, last) in results.items():
        what = ("dlcache (store: raw pixels + %s masks)" % args.mask_encoding
                if name == "dlcache" else "torch DataLoader (PIL JPEG + PNG, TF transforms)")
        rows.append((what, "%.0f" % rate, fmt(step_s), fmt(wait_s),
                     fmt(first) + " -> " + fmt(last)))
    print(C.table(("pipeline", "data samples/s", "step (s)", "data wait (s)", "loss"), rows))
    if len(results) == 2:
        d, t = results["dlcache"], results["torch"]
        print("data path: dlcache / torch = %.1fx; step time: torch / dlcache = %s"
              % (d[0] / t[0], fmt(t[1] / d[1], "%.2f")))
    if write_report is not None:
        print("store written by dlcache.write in %.1f s (%.0f samples/s)"
              % (write_report.seconds, write_report.samples_per_s))
    if args.steps > 0 and any(math.isnan(r[3]) or math.isnan(r[4])
                              for r in results.values()):
        raise AssertionError("the loss became NaN")
    return results


def main(argv=None):
    args = parse_args(argv)
    t0 = time.perf_counter()
    run(args)
    print("done in %.0f s" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Object detection fed by dlcache and by torch's DataLoader, side by side:
images with boxes and their classes from real photos, the same crop and flip
that move, clip and drop the boxes, one run.

The data (examples/_common.py, "scenes"): --count demo JPEGs that build/bin/mkdemo
cuts from real photographs, resized and center-cropped to --size and saved as
JPEGs. Their boxes are the bounding boxes of the connected regions of a
5-class colour quantisation of the pixels (dark, pale, warm, green, blue; each
region of at least 1.5% of the image, at most 12 per image), each with the
region's class. Not objects a person would name, but real image structure.

* dlcache: written once with ``dlcache.write(dataset, store, fields={"image":
  "image", "boxes": {"kind": "boxes", "classes": "classes"}, "classes":
  "ndarray"})``, loaded with ``dlcache.Loader(store, ..., crop=C,
  random_resized_crop=(scale, ratio), flip=0.5, dtype="float32", mean=0, std=1)``:
  the crop box and the flip of each sample move and scale its boxes, which are
  clipped to the crop and dropped (with their classes) when nothing is left.
  Batches are dicts: image float32 [N, 3, C, C] (0..1: the model normalizes),
  boxes float32 [N, M, 4] zero-padded to the most boxes M of the batch,
  boxes_lengths int64 [N], classes int64 [N, M], classes_lengths.
* torch: a Dataset that opens the JPEG with PIL, takes the boxes from the
  annotations in memory, and applies the same transform written by hand
  (RandomResizedCrop.get_params, resized_crop, the same box arithmetic, clip and
  drop, hflip, to_tensor), in a DataLoader with a collate that keeps the targets
  as a list, the same batch size and --workers worker processes.

For both it prints the data path alone (samples/s; for dlcache including the
split of the padded boxes into the list of targets the model takes), then trains
torchvision's Faster R-CNN MobileNetV3-Large FPN (no pretrained weights; its
resize set to the crop, fewer proposals and a 256-wide box head so that a step
fits 2 CPU cores) for --steps steps: step time, data wait and loss. The figures
are of one run on a possibly busy machine: compare the ratio.

    /usr/bin/python3 examples/detection.py                     # a few minutes on 2 cores
    /usr/bin/python3 examples/detection.py --workdir /tmp/det --steps 20
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
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import functional as TF  # noqa: E402

import dlcache  # noqa: E402

RATIO = (3 / 4, 4 / 3)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000, help="images (default 1000)")
    p.add_argument("--size", type=int, default=160, help="side of the stored images (160)")
    p.add_argument("--crop", type=int, default=128, help="training crop (default 128)")
    p.add_argument("--scale", type=float, nargs=2, default=(0.3, 1.0), metavar=("LO", "HI"),
                   help="RandomResizedCrop area range (default 0.3 1); ratio 3/4..4/3")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=10,
                   help="training steps per pipeline (10; 0: the data path only)")
    p.add_argument("--data-seconds", type=float, default=5.0,
                   help="length of the data-only window of each pipeline (default 5 s)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", choices=["dlcache", "torch"], help="run one pipeline only")
    C.add_common_args(p)
    args = p.parse_args(argv)
    if args.crop > args.size or args.batch_size > args.count:
        p.error("--crop must be at most --size, --batch-size at most --count")
    return args


class SceneRecords(torch.utils.data.Dataset):
    """What dlcache.write() reads: the image as a PIL image, the boxes and classes."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        return {"image": Image.open(it["image"]).convert("RGB"),
                "boxes": np.array(it["boxes"], dtype=np.float32).reshape(-1, 4),
                "classes": np.array(it["classes"], dtype=np.int64)}


def transform_boxes(boxes, left, top, w, h, crop, flip):
    """Boxes (x0, y0, x1, y1) of the source image into the crop box (left, top, w, h)
    resized to crop x crop, mirrored when @p flip, clipped to the output; boxes left
    with no area are dropped. Returns the boxes and the mask of those kept."""
    sx, sy = crop / w, crop / h
    b = boxes.double()
    x0, y0 = (b[:, 0] - left) * sx, (b[:, 1] - top) * sy
    x1, y1 = (b[:, 2] - left) * sx, (b[:, 3] - top) * sy
    if flip:
        x0, x1 = crop - x1, crop - x0
    out = torch.stack([x0.clamp(0, crop), y0.clamp(0, crop), x1.clamp(0, crop),
                       y1.clamp(0, crop)], 1).float()
    # Decided on the float32 values the model gets: a box on the crop's edge can end
    # 1e-14 inside it in double ((128 / 49) * 49 < 128) and be empty once rounded.
    keep = (out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])
    return out[keep], keep


class DetectionFiles(torch.utils.data.Dataset):
    """The torch pipeline: the JPEG decoded by PIL every epoch, RandomResizedCrop + flip of
    the image and its boxes by hand, to_tensor."""

    def __init__(self, items, crop, scale):
        self.items, self.crop, self.scale = items, crop, tuple(scale)
        self.boxes = [torch.tensor(it["boxes"], dtype=torch.float32).reshape(-1, 4)
                      for it in items]
        self.classes = [torch.tensor(it["classes"], dtype=torch.int64) for it in items]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        img = Image.open(self.items[i]["image"]).convert("RGB")
        top, left, h, w = torchvision.transforms.RandomResizedCrop.get_params(
            img, self.scale, RATIO)
        img = TF.resized_crop(img, top, left, h, w, [self.crop, self.crop],
                              InterpolationMode.BILINEAR)
        flip = random.random() < 0.5
        if flip:
            img = TF.hflip(img)
        boxes, keep = transform_boxes(self.boxes[i], left, top, w, h, self.crop, flip)
        return TF.to_tensor(img), boxes, self.classes[i][keep]


def collate(samples):
    return (torch.stack([s[0] for s in samples]),
            [{"boxes": s[1], "labels": s[2] + 1} for s in samples])


def write_store(args, root, items):
    store = os.path.join(root, "detection-%d-%d.dlc" % (args.count, args.size))
    params = {"count": args.count, "size": args.size, "seed": args.seed}
    if C.done_marker(store, params):
        print("reusing %s" % store)
        return store, None
    r = dlcache.write(SceneRecords(items), store,
                      fields={"image": "image", "boxes": {"kind": "boxes", "classes": "classes"},
                              "classes": "ndarray"},
                      workers=args.workers, force=True, progress=False)
    C.mark_done(store, params)
    print("dlcache.write: %d samples in %.1f s (%.0f samples/s), %.1f MB"
          % (r.count, r.seconds, r.samples_per_s, r.file_bytes / 1e6), flush=True)
    return store, r


def check_store(store, items, n=8):
    """The first records, loaded without augmentation, are the files' pixels and boxes."""
    with dlcache.Loader(store, batch_size=min(n, len(items)), shuffle=False, crop=None,
                        random_crop=False, flip=0, dtype="uint8", threads=1) as L:
        b = next(iter(L))
        for i in range(b["image"].shape[0]):
            it = items[i]
            C.check(np.array_equal(b["image"][i].numpy(),
                                   np.asarray(Image.open(it["image"]).convert("RGB"))),
                    "record %d: the image differs from %s" % (i, it["image"]))
            k = int(b["boxes_lengths"][i])
            C.check(k == len(it["boxes"]) and int(b["classes_lengths"][i]) == k,
                    "record %d: %d boxes, the annotation has %d" % (i, k, len(it["boxes"])))
            C.check(np.array_equal(b["boxes"][i, :k].numpy(),
                                   np.array(it["boxes"], np.float32).reshape(-1, 4)) and
                    b["classes"][i, :k].tolist() == it["classes"],
                    "record %d: the boxes or classes differ from the annotation" % i)


def dlcache_loader(args, store):
    return dlcache.Loader(store, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                          drop_last=True, crop=args.crop,
                          random_resized_crop=(tuple(args.scale), RATIO), flip=0.5,
                          dtype="float32", mean=(0.0,), std=(1.0,), threads=args.workers,
                          as_dict=True)


def torch_loader(args, items):
    g = torch.Generator()
    g.manual_seed(args.seed)
    return torch.utils.data.DataLoader(
        DetectionFiles(items, args.crop, args.scale), batch_size=args.batch_size, shuffle=True,
        drop_last=True, num_workers=args.workers, generator=g, collate_fn=collate,
        persistent_workers=args.workers > 0)


# Boxes with no area in float32 that a pipeline delivered, by pipeline: dropped before the
# model, which refuses them, and counted in the report. Both pipelines decide on the float32
# values (loader/augment.c, dlc__boxes_transform; transform_boxes above), so the count is 0; a
# box that starts on the crop's far edge would otherwise survive as [x, 128, x', 128].
EMPTY_BOXES = {"dlcache": 0, "torch": 0}


def model_inputs(name, loader):
    """(images [N, 3, C, C], [{"boxes": [k, 4], "labels": [k]}...]) from either pipeline.
    dlcache's padded boxes become per-image slices (views of the slot, valid until the next
    batch); labels are the classes + 1 (0 is torchvision's background)."""
    for b in C.forever(loader):
        if name == "dlcache":
            lengths = b["boxes_lengths"].tolist()
            images, targets = b["image"], [
                {"boxes": b["boxes"][i, :k], "labels": b["classes"][i, :k] + 1}
                for i, k in enumerate(lengths)]
        else:
            images, targets = b
        for t in targets:
            bx = t["boxes"]
            ok = (bx[:, 2] > bx[:, 0]) & (bx[:, 3] > bx[:, 1])
            if not bool(ok.all()):
                EMPTY_BOXES[name] += int((~ok).sum())
                t["boxes"], t["labels"] = bx[ok], t["labels"][ok]
        yield images, targets


def check_batch(x, targets, args):
    n, c = args.batch_size, args.crop
    C.check(tuple(x.shape) == (n, 3, c, c) and x.dtype == torch.float32,
            "images: %s %s" % (tuple(x.shape), x.dtype))
    C.check(float(x.min()) >= 0 and float(x.max()) <= 1, "images are not on the 0..1 scale")
    for t in targets:
        b, lab = t["boxes"], t["labels"]
        C.check(b.shape[0] == lab.shape[0] and b.shape[1:] == (4,), "boxes %s, labels %s"
                % (tuple(b.shape), tuple(lab.shape)))
        if b.shape[0]:
            C.check(bool((b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all() and
                         (b >= 0).all() and (b <= c).all()),
                    "a box out of the crop or empty: %s" % b.tolist())
            C.check(int(lab.min()) >= 1 and int(lab.max()) <= len(C.SCENE_CLASSES),
                    "labels %s" % lab.tolist())


def make_model(args):
    k = len(C.SCENE_CLASSES) + 1
    m = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=k, min_size=args.crop,
        max_size=args.crop, rpn_pre_nms_top_n_train=500, rpn_post_nms_top_n_train=250,
        box_batch_size_per_image=64)
    # The default box head is 12544 x 1024 x 1024: most of a CPU step. 256 wide here.
    m.roi_heads.box_head = TwoMLPHead(256 * 7 * 7, 256)
    m.roi_heads.box_predictor = FastRCNNPredictor(256, k)
    return m


def train(name, batches, args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = make_model(args).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()

    def step(batch):
        x, targets = batch
        x = x.to(device, non_blocking=True)
        targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
        losses = model(list(x), targets)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return C.train_steps(name, batches, step, args.steps)


def run(args):
    torch.set_num_threads(max(1, C.cores()))
    with C.workdir(args.workdir, "dlcache-detection-") as root:
        items = C.scenes(args, root, args.count, args.size)
        nboxes = sum(len(it["boxes"]) for it in items)
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
            batches = model_inputs(name, loader)
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

    print("\ndetection: %d images %dx%d with %d boxes (%.1f per image, %d classes), "
          "RandomResizedCrop %d scale %g..%g + flip moving, clipping and dropping the boxes; "
          "float32 images 0..1; batch %d, %d workers, %s; Faster R-CNN MobileNetV3-Large FPN, "
          "Adam" % (args.count, args.size, args.size, nboxes, nboxes / len(items),
                    len(C.SCENE_CLASSES), args.crop, args.scale[0], args.scale[1],
                    args.batch_size, args.workers, args.device))
    print("data path: 3 warm-up batches untimed, then at least %g s; %sload average %.2f "
          "before, %.2f after" % (args.data_seconds, "step: mean of steps %d..%d (the first "
                                  "pay for start-up); " % (C.steps_skipped(args.steps),
                                                            args.steps - 1)
                                  if args.steps else "", load0, load1))
    rows = []
    def fmt(v, spec="%.3f"):
        return "-" if math.isnan(v) else spec % v
    for name, (rate, step_s, wait_s, first, last) in results.items():
        what = ("dlcache (raw pixels, boxes + classes)" if name == "dlcache"
                else "torch DataLoader (PIL JPEG, boxes by hand)")
        rows.append((what, "%.0f" % rate, fmt(step_s), fmt(wait_s),
                     fmt(first) + " -> " + fmt(last)))
    print(C.table(("pipeline", "data samples/s", "step (s)", "data wait (s)", "loss"), rows))
    if len(results) == 2:
        d, t = results["dlcache"], results["torch"]
        print("data path: dlcache / torch = %.1fx; step time: torch / dlcache = %s"
              % (d[0] / t[0], fmt(t[1] / d[1], "%.2f")))
    for name in results:
        if EMPTY_BOXES[name]:
            print("%s delivered %d boxes with no area in float32 (dropped before the model)"
                  % (name, EMPTY_BOXES[name]))
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

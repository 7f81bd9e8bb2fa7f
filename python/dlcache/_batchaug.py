"""The batch and epoch part of Loader's augmentation (issue 33): MixUp / CutMix with soft targets,
and progressive resizing. Parsed here, so that loader.py only passes the arguments through.

MixUp and CutMix follow timm's ``Mixup`` (mode "batch", correct_lam=True): ``mixup`` and
``cutmix`` are the Beta alphas, ``mix_prob`` the probability that a batch is mixed at all,
``switch_prob`` the probability of CutMix when both are on, ``label_smoothing`` and
``num_classes`` those of timm's ``mixup_target``. With any of them the label becomes float32
[N, num_classes]. The images must be a float dtype (float32, float16 or bfloat16): uint8 pixels
are not mixed.

``resolution`` is the output size per epoch: an int or (height, width), a list with one entry per
epoch (epochs past its end keep its last entry), or a function of the epoch returning one. A list
sizes the slots for its largest entry; a function cannot be evaluated for every epoch ahead, so
it needs ``max_resolution`` (the largest size it will return), and a size above it is an error
when its epoch starts. ``Loader.set_resolution(h, w)`` sets a fixed size from the next epoch on
(replacing a schedule); it also needs room: ``max_resolution``, or a schedule's largest size.
"""

import ctypes
import numbers

import torch

from . import _lib as L
from ._lib import lib
from .errors import check


def _hw(value, name):
    """An int or (height, width) as a pair of positive ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        h = w = int(value)
    else:
        try:
            h, w = value
        except (TypeError, ValueError):
            raise ValueError("%s must be an int or (height, width), got %r" % (name, value)) from None
        # Integers only: "48" unpacked as ("4", "8"), and 32.7 was cut to 32.
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in (h, w)):
            raise ValueError("%s must be an int or (height, width) of ints, got %r"
                             % (name, value))
        h, w = int(h), int(w)
    if not (1 <= h <= 65535 and 1 <= w <= 65535):
        raise ValueError("%s must be 1..65535 on each side, got %r" % (name, value))
    return h, w


def _prob(value, name, default):
    value = default if value is None else value
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a probability in [0, 1], got %r" % (name, value)) from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("%s must be a probability in [0, 1], got %r" % (name, value))
    return value


def _alpha(value, name):
    if value is None or value is False:
        return 0.0
    if isinstance(value, (str, bytes)):  # "4" was read as 4.0
        raise ValueError("%s must be a Beta alpha >= 0 (0: off), got %r" % (name, value))
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a Beta alpha >= 0 (0: off), got %r" % (name, value)) from None
    if not 0.0 <= value <= 1e6:
        raise ValueError("%s must be a Beta alpha in [0, 1e6] (0: off), got %r" % (name, value))
    return value


class Resolution:
    """The output size of each epoch, and the room the slots need."""

    def __init__(self, resolution, max_resolution):
        self.fn = None
        self.table = None
        self.fixed = None
        self.max = _hw(max_resolution, "max_resolution") if max_resolution is not None else None
        if callable(resolution):
            if self.max is None:
                raise ValueError("resolution= as a function of the epoch needs max_resolution= "
                                 "(the largest size it returns: the batch slots are sized for it "
                                 "when the Loader opens)")
            self.fn = resolution
        elif isinstance(resolution, (list, tuple)) and resolution and \
                not all(isinstance(v, numbers.Integral) for v in resolution):
            self.table = [_hw(v, "resolution[%d]" % i) for i, v in enumerate(resolution)]
            big = (max(h for h, _ in self.table), max(w for _, w in self.table))
            self.max = big if self.max is None else self.max
        elif isinstance(resolution, list):
            self.table = [_hw(v, "resolution[%d]" % i) for i, v in enumerate(resolution)]
            if not self.table:
                raise ValueError("resolution= as a list needs an entry per epoch, got []")
            big = (max(h for h, _ in self.table), max(w for _, w in self.table))
            self.max = big if self.max is None else self.max
        else:
            self.fixed = _hw(resolution, "resolution")
        if self.max is not None:
            for h, w in ([self.fixed] if self.fixed else self.table or []):
                if h > self.max[0] or w > self.max[1]:
                    raise ValueError("resolution %dx%d is larger than max_resolution %dx%d"
                                     % ((h, w) + self.max))

    def at(self, epoch):
        """(height, width) of epoch @p epoch."""
        if self.fixed is not None:
            return self.fixed
        if self.table is not None:
            return self.table[min(epoch, len(self.table) - 1)]
        hw = _hw(self.fn(epoch), "resolution(%d)" % epoch)
        if hw[0] > self.max[0] or hw[1] > self.max[1]:
            raise ValueError("resolution(%d) = %dx%d is larger than max_resolution %dx%d"
                             % ((epoch,) + hw + self.max))
        return hw


def apply(cfg, *, mixup, cutmix, mix_prob, switch_prob, label_smoothing, num_classes,
          resolution, max_resolution):
    """Set the C config's batch fields; returns the Resolution schedule, or None."""
    cfg.mixup_alpha = _alpha(mixup, "mixup")
    cfg.cutmix_alpha = _alpha(cutmix, "cutmix")
    cfg.mix_prob = _prob(mix_prob, "mix_prob", 1.0)
    cfg.switch_prob = _prob(switch_prob, "switch_prob", 0.5)
    ls = _prob(label_smoothing, "label_smoothing", 0.0)
    if ls >= 1.0:
        raise ValueError("label_smoothing must be in [0, 1), got %r" % (label_smoothing,))
    cfg.label_smoothing = ls
    if num_classes is not None:
        if not isinstance(num_classes, numbers.Integral) or not 2 <= num_classes <= 65536:
            raise ValueError("num_classes must be an int in 2..65536, got %r" % (num_classes,))
        if not (cfg.mixup_alpha or cfg.cutmix_alpha or ls):
            raise ValueError("num_classes= is for soft targets: give mixup=, cutmix= or "
                             "label_smoothing=")
        cfg.num_classes = int(num_classes)
    if cfg.mixup_alpha or cfg.cutmix_alpha:
        if cfg.dtype == L.DTYPE_UINT8:
            raise ValueError("mixup= and cutmix= mix normalized images: give dtype='float32', "
                             "'float16' or 'bfloat16' (uint8 pixels are not mixed)")
    if resolution is None and max_resolution is None:
        return None
    if resolution is None:
        if not cfg.crop_h:
            raise ValueError("max_resolution= needs crop= (progressive resizing changes the crop)")
        resolution = (cfg.crop_h, cfg.crop_w)
    sched = Resolution(resolution, max_resolution)
    cfg.crop_h, cfg.crop_w = sched.at(cfg.epoch)
    if sched.max is not None:
        cfg.max_crop_h, cfg.max_crop_w = sched.max
    return sched


def soft(cfg):
    """Whether the label comes as soft targets."""
    return bool(cfg.mixup_alpha or cfg.cutmix_alpha or cfg.label_smoothing)


def soft_labels(batch, own):
    """The soft targets of a host batch (the label field's output), as a tensor of its own."""
    for i in range(batch.num_fields):
        bf = batch.fields[i]
        if bf.kind == L.FIELD_INT and bf.dtype == L.DTYPE_FLOAT32 and bf.ndim == 2:
            return own(bf.data, bf.dtype, (int(bf.shape[0]), int(bf.shape[1])))
    raise RuntimeError("dlcache: soft targets were configured but the batch has none")


def set_resolution(ptr, h, w, ctx):
    check(lib.dlc_loader_set_resolution(ptr, h, w), ctx)


def mixup_params(ptr, epoch, batch_index, h, w):
    """The draw of one batch as a dict: mode ("none", "mixup", "cutmix"), lam, box."""
    p = L.MixupParams()
    p.struct_size = ctypes.sizeof(p)
    check(lib.dlc_loader_mixup_params(ptr, epoch, batch_index, h, w, ctypes.byref(p)),
          "dlcache.Loader.mixup_params")
    return {"mode": ("none", "mixup", "cutmix")[p.mode], "lam": p.lam,
            "box": tuple(int(v) for v in p.box) if p.mode == 2 else None}


def draw(mix, seed, epoch, rank, world_size, batch_index, h, w):
    """dlc_mixup_draw(): the loader's draw of one batch from its keys, as mixup_params()."""
    p = L.MixupParams()
    p.struct_size = ctypes.sizeof(p)
    check(lib.dlc_mixup_draw(mix["mixup"], mix["cutmix"], mix["mix_prob"], mix["switch_prob"],
                             seed, epoch, rank, world_size, batch_index, h, w, ctypes.byref(p)),
          "dlcache: the MixUp / CutMix draw")
    return {"mode": ("none", "mixup", "cutmix")[p.mode], "lam": p.lam,
            "box": tuple(int(v) for v in p.box) if p.mode == 2 else None}


def take_mix(cfg):
    """The mixing options of @p cfg, cleared there (for a C loader of uint8 batches that torch
    converts and mixes: the torch device backend), or None."""
    if not (cfg.mixup_alpha or cfg.cutmix_alpha or cfg.label_smoothing):
        return None
    mix = {"mixup": cfg.mixup_alpha, "cutmix": cfg.cutmix_alpha, "mix_prob": cfg.mix_prob,
           "switch_prob": cfg.switch_prob, "smoothing": cfg.label_smoothing,
           "classes": cfg.num_classes}
    cfg.mixup_alpha = cfg.cutmix_alpha = 0.0
    cfg.label_smoothing = 0.0
    cfg.num_classes = 0
    return mix


def put_mix(cfg, mix):
    """Undo take_mix() on @p cfg."""
    if mix is None:
        return
    cfg.mixup_alpha, cfg.cutmix_alpha = mix["mixup"], mix["cutmix"]
    cfg.label_smoothing, cfg.num_classes = mix["smoothing"], mix["classes"]


def torch_mix(images, labels, p, classes, smoothing):
    """The loader's MixUp / CutMix and soft targets with torch operations, the same bits as the
    C loader's (batchaug.c): each product and the sum rounded in float32, then to the images'
    16-bit type; the targets in float32. @p images: float [N, C, H, W] tensors (any memory
    format, any device), mixed in place; @p labels: int64 [N]. Returns the targets."""
    dev = labels.device
    off = smoothing / classes
    on = 1.0 - smoothing + off
    y1 = torch.full((labels.shape[0], classes), off, dtype=torch.float32, device=dev)
    y1.scatter_(1, labels.view(-1, 1), on)
    lam = p["lam"]
    lam_t = torch.tensor(lam, dtype=torch.float32, device=dev)
    oml_t = torch.tensor(1.0 - lam, dtype=torch.float32, device=dev)
    targets = y1 * lam_t + y1.flip(0) * oml_t
    if p["mode"] == "none":
        return targets
    for x in images:
        if p["mode"] == "cutmix":
            yl, yh, xl, xh = p["box"]
            x[..., yl:yh, xl:xh] = x.flip(0)[..., yl:yh, xl:xh]
            continue
        lx, ox = lam_t.to(x.device), oml_t.to(x.device)
        if x.dtype == torch.float32:
            x.copy_(x * lx + x.flip(0) * ox)
        else:
            f = x.float()
            x.copy_(((f * lx).to(x.dtype).float() + (f.flip(0) * ox).to(x.dtype).float())
                    .to(x.dtype))
    return targets


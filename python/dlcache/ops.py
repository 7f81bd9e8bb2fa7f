"""The loader's per-sample augmentation ops, one at a time (include/dlcache/ops.h).

``apply(image, op, **params)`` applies one op with fixed parameters to a uint8
HWC numpy array (H x W x C, or H x W for one channel) and returns a new array.
The ops and their parameters are torchvision 0.14's functional ones
(``torchvision.transforms.functional``), and each gives what torchvision gives
on the same uint8 tensor: the color and histogram ops within 1 per channel
value, the geometric ops with nearest interpolation on all pixels but rare
rounding ties, with bilinear interpolation on all values but rare rounding ties
(which may differ by 1). Where torchvision's tensor and PIL paths differ, the
tensor path is followed.

=====================  ============================================================
op                     parameters
=====================  ============================================================
adjust_brightness      brightness_factor
adjust_contrast        contrast_factor
adjust_saturation      saturation_factor
adjust_hue             hue_factor
adjust_sharpness       sharpness_factor
posterize              bits
solarize               threshold
solarize_add           addition, threshold=128 (timm's SolarizeAdd; no torchvision
                       function: values below threshold get min(255, v + addition))
autocontrast           -
equalize               -
invert                 -
rgb_to_grayscale       num_output_channels=1 (torchvision's default) or 3
gaussian_blur          kernel_size, sigma=None
rotate                 angle, interpolation="nearest", expand=False, center=None,
                       fill=None
affine                 angle, translate, scale, shear, interpolation="nearest",
                       fill=None, center=None
=====================  ============================================================

``interpolation`` is "nearest" or "bilinear" (or torchvision's InterpolationMode
NEAREST or BILINEAR). With bilinear, ``fill=None`` and a given fill differ as in
torchvision: None lets the outside count 0 in the weighted sum, a fill (even of
zeros) is blended in by the outside's weight.

Color ops take 1 or 3 (RGB) channels; gaussian_blur and the geometric ops take
1 to 4. A bad parameter raises ValueError naming the op and the parameter.
"""

import ctypes
import numbers

from ._lib import Image, OpParams, lib
from .errors import check

__all__ = ["apply", "call_of", "OPS", "OP_NAMES"]

# torchvision's name: (dlc_op value, the parameters it takes, those it requires).
OPS = {
    "identity": (0, (), ()),
    "adjust_brightness": (1, ("brightness_factor",), ("brightness_factor",)),
    "adjust_contrast": (2, ("contrast_factor",), ("contrast_factor",)),
    "adjust_saturation": (3, ("saturation_factor",), ("saturation_factor",)),
    "adjust_hue": (4, ("hue_factor",), ("hue_factor",)),
    "adjust_sharpness": (5, ("sharpness_factor",), ("sharpness_factor",)),
    "posterize": (6, ("bits",), ("bits",)),
    "solarize": (7, ("threshold",), ("threshold",)),
    "autocontrast": (8, (), ()),
    "equalize": (9, (), ()),
    "invert": (10, (), ()),
    "rgb_to_grayscale": (11, ("num_output_channels",), ()),
    "gaussian_blur": (12, ("kernel_size", "sigma"), ("kernel_size",)),
    "rotate": (13, ("angle", "interpolation", "expand", "center", "fill"), ("angle",)),
    "affine": (14, ("angle", "translate", "scale", "shear", "interpolation", "fill", "center"),
               ("angle", "translate", "scale", "shear")),
    "solarize_add": (19, ("addition", "threshold"), ("addition",)),
}


# The names of the op ids of include/dlcache/ops.h (dlc_op), as the records of drawn parameters
# hold them: the policies' ShearX/ShearY/TranslateX/TranslateY are affine() calls.
OP_NAMES = ["identity", "adjust_brightness", "adjust_contrast", "adjust_saturation",
            "adjust_hue", "adjust_sharpness", "posterize", "solarize", "autocontrast",
            "equalize", "invert", "rgb_to_grayscale", "gaussian_blur", "rotate", "affine",
            "shear_x", "shear_y", "translate_x", "translate_y", "solarize_add"]

_FACTOR = {1: "brightness_factor", 2: "contrast_factor", 3: "saturation_factor",
           4: "hue_factor", 5: "sharpness_factor"}


def call_of(op, arg, flags=0, fill=(0, 0, 0, 0), channels=3):
    """The torchvision functional call of one drawn op: (name, kwargs) such that
    ``apply(image, name, **kwargs)`` (or ``getattr(torchvision.transforms.functional,
    name)(tensor, **kwargs)``) applies it. @p op is its id (OP_NAMES' index), @p arg its 8
    float arguments, @p flags its flags (1: arg[6], arg[7] are a center; 2: arg[1] is a blend's
    1 - factor; 4: bilinear; 8: with bilinear, the fill was given), @p fill its 4 fill values
    (the first @p channels are used). A bilinear op has ``interpolation="bilinear"`` (torchvision
    takes ``InterpolationMode(kwargs["interpolation"])``) and, without flag 8, ``fill=None``."""
    op = int(op)
    a = [float(x) for x in arg]
    if op in _FACTOR:
        # With flag 2 (DLC__AUG_F_WEIGHT) arg[1] is 1 - factor as torch computed it from a double
        # factor (the policies' 1 + magnitude): that double is 1 - arg[1], exactly.
        return OP_NAMES[op], {_FACTOR[op]: 1.0 - a[1] if flags & 2 and op != 4 else a[0]}
    if op == 6:
        return "posterize", {"bits": int(a[0])}
    if op == 7:
        return "solarize", {"threshold": a[0]}
    if op == 19:
        return "solarize_add", {"addition": int(a[0]), "threshold": a[1]}
    if op == 11:
        return "rgb_to_grayscale", {"num_output_channels": channels}
    if op == 12:
        return "gaussian_blur", {"kernel_size": [int(a[0]), int(a[1])], "sigma": [a[2], a[3]]}
    if op in (0, 8, 9, 10):
        return OP_NAMES[op], {}
    if 13 <= op <= 18:
        kw = {"angle": a[0], "fill": [int(f) for f in list(fill)[:channels]]}
        if flags & 4:
            kw["interpolation"] = "bilinear"
            if not flags & 8:
                kw["fill"] = None
        if flags & 1:
            kw["center"] = [a[6], a[7]]
        if op == 13:
            return "rotate", kw
        kw.update(translate=[a[1], a[2]], scale=a[3], shear=[a[4], a[5]])
        return "affine", kw
    raise ValueError("unknown op id %r" % (op,))


def _bad(op, name, value, why):
    return ValueError("%s: %s (%r) %s" % (op, name, value, why))


def _number(op, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(op, name, value, "is not a number")
    return float(value)


def _pair(op, name, value, kind):
    """torchvision's int-or-sequence parameters: a number stands for both."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            value = (value[0], value[0])
        if len(value) != 2:
            raise _bad(op, name, value, "is not a number or a sequence of 1 or 2")
        return tuple(kind(op, name, v) for v in value)
    v = kind(op, name, value)
    return (v, v)


def _int(op, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _bad(op, name, value, "is not an integer")
    return int(value)


def _fill(op, value, channels):
    if value is None:
        return [0] * channels
    vals = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(vals) == 1:
        vals = vals * channels
    if len(vals) != channels:
        raise _bad(op, "fill", value, "has neither 1 nor %d values (the image's channels)"
                   % channels)
    out = []
    for v in vals:
        f = _number(op, "fill", v)
        if not 0 <= f <= 255:
            raise _bad(op, "fill", value, "is not within 0..255 (uint8 pixels)")
        out.append(int(round(f)))
    return out


def _params(op, image_channels, kw):
    code, allowed, required = OPS[op]
    for k in kw:
        if k not in allowed:
            raise ValueError("%s: unknown parameter %r (it takes %s)"
                             % (op, k, ", ".join(allowed) or "no parameter"))
    for k in required:
        if k not in kw:
            raise ValueError("%s: parameter %r is required" % (op, k))
    p = OpParams()
    lib.dlc_op_params_init(ctypes.byref(p))
    p.op = code
    if op.startswith("adjust_"):
        name = allowed[0]
        p.factor = _number(op, name, kw[name])
    elif op == "posterize":
        bits = _int(op, "bits", kw["bits"])
        if not 0 <= bits <= 8:
            raise _bad(op, "bits", bits, "is not in 0..8")
        p.bits = bits
    elif op == "solarize":
        p.threshold = _number(op, "threshold", kw["threshold"])
    elif op == "solarize_add":
        add = _int(op, "addition", kw["addition"])
        if not 0 <= add <= 255:
            raise _bad(op, "addition", add, "is not in 0..255")
        p.addition = add
        p.threshold = _number(op, "threshold", kw.get("threshold", 128))
    elif op == "rgb_to_grayscale":
        n = kw.get("num_output_channels", 1)
        if n not in (1, 3) or isinstance(n, bool):
            raise _bad(op, "num_output_channels", n, "is neither 1 nor 3")
        p.num_output_channels = int(n)  # 3.0 is 3, as torchvision takes it
    elif op == "gaussian_blur":
        ks = _pair(op, "kernel_size", kw["kernel_size"], _int)
        for k in ks:
            # At most 255, as the Loader's blur: the C field is 32 bits, and 2**32 + 3 was 3.
            if k <= 0 or k % 2 == 0 or k > 255:
                raise _bad(op, "kernel_size", kw["kernel_size"],
                           "is not odd integers in 1..255")
        sigma = kw.get("sigma")
        # torchvision's default sigma for each kernel side.
        sg = tuple(k * 0.15 + 0.35 for k in ks) if sigma is None else \
            _pair(op, "sigma", sigma, _number)
        for s in sg:
            if s <= 0:
                raise _bad(op, "sigma", sigma, "is not positive")
        p.kernel_size[0], p.kernel_size[1] = ks
        p.sigma[0], p.sigma[1] = sg
    elif op in ("rotate", "affine"):
        p.angle = _number(op, "angle", kw["angle"])
        interp = kw.get("interpolation", "nearest")
        mode = getattr(interp, "value", interp)
        if mode not in ("nearest", "bilinear"):
            raise _bad(op, "interpolation", interp,
                       "is not supported: nearest or bilinear (InterpolationMode) are")
        p.interpolation = 1 if mode == "bilinear" else 0
        p.has_fill = 0 if kw.get("fill") is None else 1
        if kw.get("expand", False):
            raise _bad(op, "expand", kw["expand"], "is not supported: only expand=False is")
        center = kw.get("center")
        if center is not None:
            if not isinstance(center, (list, tuple)) or len(center) != 2:
                raise _bad(op, "center", center, "is not a sequence of 2 numbers")
            p.has_center = 1
            p.center[0], p.center[1] = (_number(op, "center", c) for c in center)
        fill = _fill(op, kw.get("fill"), image_channels)
        for i, v in enumerate(fill):
            p.fill[i] = v
        if op == "affine":
            tr = kw["translate"]
            if not isinstance(tr, (list, tuple)) or len(tr) != 2:
                raise _bad(op, "translate", tr, "is not a sequence of 2 numbers")
            p.translate[0], p.translate[1] = (_number(op, "translate", t) for t in tr)
            p.scale = _number(op, "scale", kw["scale"])
            if p.scale <= 0:
                raise _bad(op, "scale", kw["scale"], "is not positive")
            sh = kw["shear"]
            if isinstance(sh, (list, tuple)) and len(sh) == 1:
                sh = (sh[0], sh[0])  # torchvision's F.affine: [s] shears along both axes.
            elif not isinstance(sh, (list, tuple)):
                sh = (sh, 0.0)  # torchvision: a number shears along x only.
            if len(sh) != 2:
                raise _bad(op, "shear", kw["shear"], "is not a number or a sequence of 1 or 2")
            p.shear[0], p.shear[1] = (_number(op, "shear", s) for s in sh)
    return p


def apply(image, op, **params):
    """Apply the op named @p op (torchvision's functional name) with @p params to @p image, a
    uint8 numpy array of H x W x C (C in 1..4) or H x W pixels; return a new array of the same
    shape (rgb_to_grayscale: H x W x num_output_channels)."""
    import numpy as np

    if not isinstance(op, str) or op not in OPS:
        raise ValueError("unknown op %r: one of %s" % (op, ", ".join(sorted(OPS))))
    a = np.asarray(image)
    if a.dtype != np.uint8:
        raise ValueError("%s: image has dtype %s, not uint8" % (op, a.dtype))
    if a.ndim == 2:
        squeeze = True
        a = a[:, :, None]
    elif a.ndim == 3:
        squeeze = False
    else:
        raise ValueError("%s: image has shape %r, not H x W x C or H x W" % (op, a.shape))
    h, w, c = a.shape
    if h == 0 or w == 0 or not 1 <= c <= 4:
        raise ValueError("%s: image has shape %r: needs H, W > 0 and 1 to 4 channels"
                         % (op, a.shape))
    if h > 0xFFFFFFFF or w > 0xFFFFFFFF:
        # dlc_image's sides are 32-bit: a width of 2^32 + 2 was 2 to C, which changed 2 pixels.
        raise ValueError("%s: image has shape %r: its sides are at most 2^32 - 1" % (op, a.shape))
    p = _params(op, c, params)
    gray1 = op == "rgb_to_grayscale" and p.num_output_channels == 1
    src = np.ascontiguousarray(a)
    if gray1:
        out = np.empty((h, w, 1), dtype=np.uint8)
    else:
        out = np.array(src, dtype=np.uint8, order="C", copy=True)
    simg = Image(src.ctypes.data if gray1 else out.ctypes.data, w, h, c, w * c)
    dimg = Image(out.ctypes.data, w, h, out.shape[2], w * out.shape[2])
    n = lib.dlc_op_scratch_bound(w, h, c)
    scratch = np.empty(max(n, 1), dtype=np.uint8)
    check(lib.dlc_op_apply(ctypes.byref(p), ctypes.byref(simg), ctypes.byref(dimg),
                           scratch.ctypes.data, n), "dlcache.ops.apply(%r)" % op)
    if squeeze and out.shape[2] == 1:
        return out[:, :, 0]
    return out

"""The per-sample augmentation arguments of dlcache.Loader (issue 33): color_jitter, grayscale,
blur, solarize, auto_augment (+ auto_augment_options) and random_erasing, for the loader's own
view and for each entry of views=[...], as dlc_augment_spec structs; and the drawn parameters of
return_params=True as ops that dlcache.ops.apply() takes one at a time."""

import ctypes
import math
import numbers
from typing import Any, Dict, List, Optional, Tuple

from . import _lib as L
from ._lib import lib
from .ops import call_of

__all__ = ["KEYS", "specs", "ops_of"]

# The Loader's keyword arguments, also accepted as keys of a views=[...] entry.
KEYS = ("color_jitter", "grayscale", "blur", "solarize", "auto_augment", "auto_augment_options",
        "random_erasing")

POLICIES = {
    "trivial_augment_wide": L.AUTO_AUGMENT_TRIVIAL_WIDE,
    "rand_augment": L.AUTO_AUGMENT_RAND,
    "auto_augment_imagenet": L.AUTO_AUGMENT_IMAGENET,
}
# Which auto_augment_options each policy reads (torchvision's arguments, and timm's mstd).
_POLICY_OPTIONS = {
    "trivial_augment_wide": {"num_magnitude_bins", "fill", "interpolation"},
    "rand_augment": {"num_ops", "magnitude", "num_magnitude_bins", "mstd", "fill",
                     "interpolation"},
    "auto_augment_imagenet": {"fill", "interpolation"},
}


def _number(value, name, lo=None, hi=None):
    # numbers.Real takes numpy's scalars too (np.float32(0.4) from a config array).
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("%s must be a number, got %r" % (name, value))
    v = float(value)
    if math.isnan(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError("%s must be in [%s, %s], got %r"
                         % (name, "-inf" if lo is None else lo, "inf" if hi is None else hi,
                            value))
    return v


def _prob(value, name):
    return _number(value, name, 0.0, 1.0)


def _int(value, name, lo, hi):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("%s must be an integer, got %r" % (name, value))
    if not lo <= value <= hi:
        raise ValueError("%s must be in [%d, %d], got %d" % (name, lo, hi, value))
    return int(value)


def _range(value, name, lo, hi):
    """A pair (lo, hi) with lo <= hi inside [lo, hi]."""
    try:
        a, b = value
    except (TypeError, ValueError):
        raise ValueError("%s must be a pair (lo, hi), got %r" % (name, value)) from None
    a = _number(a, name + " lo", lo, hi)
    b = _number(b, name + " hi", lo, hi)
    if a > b:
        raise ValueError("%s must satisfy lo <= hi, got %r" % (name, value))
    return a, b


def _unknown(d, known, name):
    if not isinstance(d, dict):
        raise ValueError("%s must be a dict, got %r" % (name, d))
    extra = set(d) - set(known)
    if extra:
        raise ValueError("%s: unknown keys %s (known: %s)"
                         % (name, sorted(map(str, extra)), ", ".join(sorted(known))))


def _jitter_part(value, name, center, bound):
    """torchvision ColorJitter's _check_input: a number x is (center - x, center + x) (clipped at
    0 for the factors), a pair is taken as it is; 0 or None is off."""
    if value is None:
        return (center, center)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        x = _number(value, name, 0.0, 0.5 if center == 0.0 else None)
        return (max(center - x, 0.0) if center else -x, center + x)
    return _range(value, name, -bound if center == 0.0 else 0.0, bound)


def _color_jitter(value, spec, name):
    parts = ("brightness", "contrast", "saturation", "hue")
    p = 1.0
    if isinstance(value, dict):
        _unknown(value, parts + ("p",), name)
        p = _prob(value.get("p", 1.0), name + "['p']")
        vals = [value.get(k) for k in parts]
    else:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or \
                not 1 <= len(value) <= 4:
            raise ValueError("%s must be (brightness, contrast, saturation, hue) or a dict with "
                             "those keys and 'p', got %r" % (name, value))
        vals = list(value) + [None] * (4 - len(value))
    for key, v in zip(parts, vals):
        center = 0.0 if key == "hue" else 1.0
        lo, hi = _jitter_part(v, "%s %s" % (name, key), center, 0.5 if key == "hue" else 1e6)
        arr = getattr(spec, key)
        arr[0], arr[1] = lo, hi
    spec.jitter_prob = p


def _blur(value, spec, name):
    _unknown(value, ("p", "sigma", "kernel_size"), name)
    if "kernel_size" not in value:
        raise ValueError("%s needs kernel_size (an odd int, or (width, height))" % name)
    k = value["kernel_size"]
    kw, kh = (k, k) if isinstance(k, numbers.Integral) and not isinstance(k, bool) else \
        (tuple(k) if isinstance(k, (tuple, list)) and len(k) == 2 else (None, None))
    for side in (kw, kh):
        if isinstance(side, bool) or not isinstance(side, numbers.Integral) or side < 1 or \
                side % 2 == 0 or side > 255:
            raise ValueError("%s kernel_size must be an odd int in 1..255 or a pair of them, "
                             "got %r" % (name, k))
    kw, kh = int(kw), int(kh)
    sigma = value.get("sigma", (0.1, 2.0))
    if isinstance(sigma, numbers.Real) and not isinstance(sigma, bool):
        sigma = (sigma, sigma)
    lo, hi = _range(sigma, name + " sigma", 0.0, 1e6)
    if lo <= 0:
        raise ValueError("%s sigma must be positive, got %r" % (name, value.get("sigma")))
    spec.blur_prob = _prob(value.get("p", 1.0), name + "['p']")
    spec.blur_sigma[0], spec.blur_sigma[1] = lo, hi
    spec.blur_kernel[0], spec.blur_kernel[1] = kw, kh


def _solarize(value, spec, name):
    if isinstance(value, dict):
        _unknown(value, ("p", "threshold"), name)
        spec.solarize_prob = _prob(value.get("p", 0.5), name + "['p']")
        # torchvision's RandomSolarize takes any threshold; above 255 nothing would change.
        spec.solarize_threshold = _number(value.get("threshold", 128), name + " threshold",
                                          None, 255.0)
    else:
        spec.solarize_prob = _prob(value, name)


def _fill(value, spec, name):
    vals = [value] * 3 if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
        else value
    try:
        vals = list(vals)
    except TypeError:
        raise ValueError("%s must be an int in 0..255 or one per channel, got %r"
                         % (name, value)) from None
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3:
        raise ValueError("%s must be one int in 0..255 or three, got %r" % (name, value))
    for i, v in enumerate(vals):
        spec.fill[i] = _int(v, name, 0, 255)


# ImageNet's mean pixel, round(255 * mean): timm's img_mean, the fill of its geometric ops.
_TIMM_FILL = (124, 116, 104)


def timm_rand(config: str, name: str = "auto_augment") -> Dict[str, Any]:
    """timm's RandAugment config string (rand_augment_transform's grammar) as its options:
    "rand" then dash-separated sections, each a key and its number: m (magnitude, an int; 10),
    n (ops per image; 2), p (each op's probability; 0.5), mstd (magnitude noise; above 100:
    uniform), mmax (magnitude clip, an int; 0 is timm's default 10), inc (the increasing op set:
    timm turns it on for any value, inc0 included). Transform-set sections (t...) and anything
    else are a ValueError naming the section."""
    parts = config.split("-")
    if parts[0] != "rand":
        raise ValueError("%s %r: a timm RandAugment string starts with 'rand'" % (name, config))
    out = {"num_ops": 2, "magnitude": 10.0, "mstd": 0.0, "mmax": 10.0, "increasing": False,
           "p": 0.5}
    for sec in parts[1:]:
        if sec.startswith("t"):
            raise ValueError("%s %r: section %r picks one of timm's other transform sets "
                             "(weights, 3a, 3aw), which dlcache does not have" % (name, config, sec))
        cut = next((i for i, ch in enumerate(sec) if ch.isdigit()), None)
        key, val = (sec, "") if cut is None else (sec[:cut], sec[cut:])
        try:
            if cut is None:
                raise ValueError("no value")
            if key == "mstd":
                v = float(val)
                out["mstd"] = float("inf") if v > 100 else v
            elif key == "mmax":
                out["mmax"] = float(int(val) or 10)
            elif key == "inc":
                out["increasing"] = True  # timm: bool(val), true for any value
            elif key == "m":
                out["magnitude"] = float(int(val))
            elif key == "n":
                out["num_ops"] = int(val)
            elif key == "p":
                out["p"] = float(val)
            else:
                raise ValueError("unknown key %r (timm's are m, n, p, mstd, mmax, inc)" % key)
        except (ValueError, OverflowError) as e:
            raise ValueError("%s %r: section %r: %s" % (name, config, sec, e)) from None
    if not 1 <= out["num_ops"] <= 8:
        raise ValueError("%s %r: n%d: dlcache draws 1 to 8 ops" % (name, config, out["num_ops"]))
    if not 0.0 <= out["p"] <= 1.0:
        raise ValueError("%s %r: p%g is not a probability" % (name, config, out["p"]))
    # timm's magnitudes run 0..10 (mmax 10); far beyond, a shear's angle rounds to 90 degrees
    # and each record would fail at next() rather than here.
    for key in ("magnitude", "mmax"):
        if out.get(key) is not None and out[key] > 1000:
            raise ValueError("%s %r: %s %g is beyond 1000 (timm's scale is 0..10)"
                             % (name, config, "m" if key == "magnitude" else "mmax", out[key]))
    return out


def _timm_auto_augment(policy, options, spec, name, oname, mean):
    t = timm_rand(policy, name)
    spec.auto_augment = L.AUTO_AUGMENT_TIMM_RAND
    spec.num_ops = t["num_ops"]
    spec.magnitude = t["magnitude"]
    spec.magnitude_std = t["mstd"]
    spec.magnitude_max = t["mmax"]
    spec.increasing = 1 if t["increasing"] else 0
    spec.op_prob = t["p"]
    fill = tuple(min(255, max(0, int(round(255 * m)))) for m in mean) if mean else _TIMM_FILL
    for i in range(3):
        spec.fill[i] = fill[i]
    spec.has_fill = 1  # timm always fills (img_mean): with bilinear, blended in as given
    if options is None:
        return
    _unknown(options, ("num_ops", "magnitude", "num_magnitude_bins", "mstd", "fill",
                       "interpolation"), oname)
    unused = set(options) - {"fill", "interpolation"}
    if unused:
        raise ValueError("%s: %s do not apply to %r (the string carries timm's options; "
                         "auto_augment_options reads: fill, interpolation)"
                         % (oname, sorted(unused), policy))
    if "fill" in options:
        _fill(options["fill"], spec, oname + " fill")
    _interpolation(options, spec, oname)


def _auto_augment(policy, options, spec, name, oname, mean=None):
    if isinstance(policy, str) and (policy == "rand" or policy.startswith("rand-")):
        _timm_auto_augment(policy, options, spec, name, oname, mean)
        return
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError("%s must be one of %s, or a timm RandAugment string such as "
                         "'rand-m9-mstd0.5-inc1', got %r"
                         % (name, ", ".join(repr(p) for p in POLICIES), policy))
    spec.auto_augment = POLICIES[policy]
    if options is None:
        return
    _unknown(options, ("num_ops", "magnitude", "num_magnitude_bins", "mstd", "fill",
                       "interpolation"), oname)
    unused = set(options) - _POLICY_OPTIONS[policy]
    if unused:
        raise ValueError("%s: %s do not apply to %r (it reads: %s)"
                         % (oname, sorted(unused), policy,
                            ", ".join(sorted(_POLICY_OPTIONS[policy]))))
    if "num_ops" in options:
        spec.num_ops = _int(options["num_ops"], oname + " num_ops", 1, 8)
    if "num_magnitude_bins" in options:
        spec.num_magnitude_bins = _int(options["num_magnitude_bins"],
                                       oname + " num_magnitude_bins", 2, 1024)
    if "magnitude" in options:
        spec.magnitude = _number(options["magnitude"], oname + " magnitude", 0.0,
                                 spec.num_magnitude_bins - 1)
    elif policy == "rand_augment" and spec.magnitude > spec.num_magnitude_bins - 1:
        raise ValueError("%s: the default magnitude 9 is beyond num_magnitude_bins %d: give one"
                         % (oname, spec.num_magnitude_bins))
    if "mstd" in options:
        spec.magnitude_std = _number(options["mstd"], oname + " mstd", 0.0)
    if options.get("fill") is not None:
        _fill(options["fill"], spec, oname + " fill")
        spec.has_fill = 1
    _interpolation(options, spec, oname)


def _interpolation(options, spec, oname):
    if "interpolation" in options:
        interp = options["interpolation"]
        mode = getattr(interp, "value", interp)
        if mode not in ("nearest", "bilinear"):
            raise ValueError("%s interpolation must be \"nearest\" or \"bilinear\" "
                             "(InterpolationMode NEAREST or BILINEAR), got %r" % (oname, interp))
        spec.interpolation = 1 if mode == "bilinear" else 0


def _random_erasing(value, spec, name, channels=0):
    if not isinstance(value, dict):
        spec.erase_prob = _prob(value, name)
        return
    _unknown(value, ("p", "scale", "ratio", "value"), name)
    spec.erase_prob = _prob(value.get("p", 0.5), name + "['p']")
    if "scale" in value:
        lo, hi = _range(value["scale"], name + " scale", 0.0, 1.0)
        if lo <= 0:
            raise ValueError("%s scale must satisfy 0 < lo <= hi <= 1, got %r"
                             % (name, value["scale"]))
        spec.erase_scale[0], spec.erase_scale[1] = lo, hi
    if "ratio" in value:
        lo, hi = _range(value["ratio"], name + " ratio", 0.0, 1e6)
        if lo <= 0 or hi >= 1e6:  # the C check's bound: hi below 1e6
            raise ValueError("%s ratio must satisfy 0 < lo <= hi < 1e6, got %r"
                             % (name, value["ratio"]))
        spec.erase_ratio[0], spec.erase_ratio[1] = lo, hi
    v = value.get("value", 0)
    if isinstance(v, str):
        if v != "random":
            raise ValueError("%s value must be a number, one per channel, or 'random', got %r"
                             % (name, v))
        spec.erase_value = L.ERASE_NOISE
        return
    vals = [v] if isinstance(v, numbers.Real) and not isinstance(v, bool) else v
    try:
        vals = [_number(x, name + " value") for x in vals]
    except TypeError:
        raise ValueError("%s value must be a number, one per channel, or 'random', got %r"
                         % (name, v)) from None
    if not 1 <= len(vals) <= 4:
        raise ValueError("%s value must have 1 to 4 values (one per channel), got %r"
                         % (name, v))
    if channels and len(vals) not in (1, channels):
        # torchvision: "should have either a single value or 3 values"; the channels left
        # out were erased with 0.
        raise ValueError("%s value has %d values, but the store's images have %d channels: "
                         "give one value, or one per channel" % (name, len(vals), channels))
    if len(vals) == 1:
        vals = vals * 4
    if all(x == 0 for x in vals):
        spec.erase_value = L.ERASE_ZERO
        return
    spec.erase_value = L.ERASE_CONSTANT
    for i, x in enumerate(vals):
        spec.erase_constant[i] = x


def _spec(opts, where, mean=None, channels=0):
    """One dlc_augment_spec from the options dict @p opts (keys of KEYS, None = off); @p where
    prefixes the names in messages ("" for the Loader's own arguments); @p mean: the Loader's,
    whose pixel value is timm's fill."""
    spec = L.AugmentSpec()
    lib.dlc_augment_spec_init(ctypes.byref(spec))
    on = False
    for key in KEYS:
        v = opts.get(key)
        if v is None or key == "auto_augment_options":
            continue
        name = where + key
        on = True
        if key == "color_jitter":
            _color_jitter(v, spec, name)
        elif key == "grayscale":
            spec.grayscale_prob = _prob(v, name)
        elif key == "blur":
            _blur(v, spec, name)
        elif key == "solarize":
            _solarize(v, spec, name)
        elif key == "auto_augment":
            _auto_augment(v, opts.get("auto_augment_options"), spec, name,
                          where + "auto_augment_options", mean)
        elif key == "random_erasing":
            _random_erasing(v, spec, name, channels)
    if opts.get("auto_augment_options") is not None and opts.get("auto_augment") is None:
        raise ValueError("%sauto_augment_options given without auto_augment" % where)
    return spec, on, spec.erase_prob > 0


def specs(loader_opts: Dict[str, Any], views: "Optional[List[Dict[str, Any]]]",
          device: bool, float_dtype: bool,
          mean: "Optional[Tuple[float, ...]]" = None,
          channels: int = 0) -> "Optional[ctypes.Array]":
    """The dlc_augment_spec array of a Loader: one for its own view, or one per entry of views
    (each entry's keys override the Loader's: a key given as None turns that op off there).
    None when nothing is on. @p device: batches go to a CUDA device (RandomErasing runs there
    after the conversion; see erasing()); @p float_dtype: the images are converted to float."""
    groups = []
    if views is None:
        groups.append((loader_opts, ""))
    else:
        for i, v in enumerate(views):
            merged = dict(loader_opts)
            if isinstance(v, dict):
                for key in KEYS:
                    if key in v:
                        merged[key] = v[key]
                # The Loader's options belong to its policy: a view that names another policy
                # starts from that one's defaults, one that restates the same keeps them.
                if "auto_augment" in v and "auto_augment_options" not in v and \
                        v["auto_augment"] != loader_opts.get("auto_augment"):
                    merged["auto_augment_options"] = None
            groups.append((merged, "views[%d] " % i))
    made = [_spec(opts, where, mean, channels) for opts, where in groups]
    if not any(on for _, on, _ in made):
        return None
    for (spec, _, erase), (opts, where) in zip(made, groups):
        if not erase:
            continue
        if not float_dtype and spec.erase_value == L.ERASE_NOISE:
            raise ValueError("%srandom_erasing value='random' needs dtype 'float32' or "
                             "'float16' (normal noise has no uint8 value)" % where)
        if not float_dtype and spec.erase_value == L.ERASE_CONSTANT and any(
                not (0 <= spec.erase_constant[c] <= 255 and
                     spec.erase_constant[c] == int(spec.erase_constant[c])) for c in range(3)):
            raise ValueError("%srandom_erasing value: with dtype 'uint8' the value is a pixel "
                             "value, an integer in 0..255" % where)
    arr = (L.AugmentSpec * len(made))()
    for i, (spec, _, _) in enumerate(made):
        arr[i] = spec
    return arr


# ---------------------------------------------------------------- return_params -> ops.apply
def ops_of(batch: Dict[str, Any], index: int, view: "Optional[int]" = None, group: str = "",
           fill: "Tuple[int, ...]" = (0, 0, 0),
           channels: int = 3) -> "List[Tuple[str, Dict[str, Any]]]":
    """The uint8 ops that sample @p index (view @p view of group @p group) of a batch made with
    return_params=True went through, in order, as (name, kwargs) for dlcache.ops.apply()
    (dlcache.ops.call_of() of each); the affine family (shear, translate) as "affine". @p fill:
    the policy's fill; @p channels: the image's (1 or 3)."""
    suffix = "_" + group if group else ""
    ops = batch["params_ops" + suffix][index]
    args = batch["params_args" + suffix][index]
    if view is not None:
        ops, args = ops[view], args[view]
    out = []
    for i in range(ops.shape[0]):
        op, flags = int(ops[i][0]), int(ops[i][1])
        if op < 0:
            break
        out.append(call_of(op, [float(x) for x in args[i]], flags, tuple(fill) + (0,),
                           channels))
    return out

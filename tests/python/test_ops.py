"""dlcache.ops.apply() against torchvision.transforms.functional (0.14's tensor path).

Each op runs on the same random uint8 images (several sizes, odd ones, 1 and 3
channels where torchvision takes them) with the same parameters, edge values
included. The color and histogram ops must agree within 1 per channel value,
the geometric ops (nearest) on at least 99 % of the pixels, bilinear within 1
and on at least 99 % of the values. Bad parameters raise ValueError naming the
op and the parameter."""

import numpy as np
import pytest

from conftest import require_lib

require_lib()

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")

from dlcache import ops  # noqa: E402

SHAPES = [(31, 47, 3), (64, 64, 1), (96, 128, 3), (7, 5, 3), (3, 3, 1), (57, 33, 1)]

COLOR = (
    [("adjust_brightness", dict(brightness_factor=f)) for f in (0.0, 0.5, 1.0, 1.3, 2.7)]
    + [("adjust_contrast", dict(contrast_factor=f)) for f in (0.0, 0.4, 1.0, 1.7, 5.0)]
    + [("adjust_saturation", dict(saturation_factor=f)) for f in (0.0, 0.3, 1.0, 1.9)]
    + [("adjust_hue", dict(hue_factor=f)) for f in (-0.5, -0.2, 0.0, 0.13, 0.5)]
    + [("adjust_sharpness", dict(sharpness_factor=f)) for f in (0.0, 0.5, 1.0, 2.0, 9.0)]
    + [("posterize", dict(bits=b)) for b in (0, 1, 4, 7, 8)]
    + [("solarize", dict(threshold=t)) for t in (0, 1, 100.5, 128, 254.9, 255)]
    + [("autocontrast", {}), ("equalize", {}), ("invert", {})]
    + [("rgb_to_grayscale", dict(num_output_channels=n)) for n in (1, 3, 3.0)]
    + [("gaussian_blur", dict(kernel_size=k, sigma=s))
       for k, s in ((1, 0.5), (3, 0.8), ((5, 9), (1.5, 3.0)), (23, 2.1), (3, 10.0))]
    + [("gaussian_blur", dict(kernel_size=5))]
)

GEOM = (
    [("rotate", dict(angle=a)) for a in (0.0, 30.0, -45.5, 90.0, 180.0, 17.3, -170.0)]
    + [("rotate", dict(angle=20.0, fill=7, center=[3, 5]))]
    + [("affine", dict(angle=a, translate=t, scale=s, shear=sh))
       for a, t, s, sh in ((0.0, [5, -3], 1.0, [0.0, 0.0]), (10.0, [2, 1], 1.2, [15.0, -7.0]),
                           (-30.0, [0, 0], 0.8, [0.0, 20.0]), (0.0, [0, 0], 1.0, 12.0),
                           (45.0, [-9, 4], 2.5, [-30.0, 0.0]), (5.0, [1, 2], 1.0, [11.0]))]
    # The policies' ShearX / TranslateY, as torchvision's _apply_op calls affine.
    + [("affine", dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[16.7, 0.0], center=[0, 0])),
       ("affine", dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, -16.7],
                       center=[0, 0])),
       ("affine", dict(angle=0.0, translate=[0, -14], scale=1.0, shear=[0.0, 0.0]))]
)

# Bilinear (InterpolationMode.BILINEAR): torchvision's fill=None (the outside counts 0) and a
# given fill (blended in by the outside's weight, even a fill of 0) differ.
BILINEAR = (
    [("rotate", dict(angle=a, interpolation="bilinear", fill=f))
     for a, f in ((30.0, None), (-45.5, 0), (17.3, 200), (90.0, None), (-170.0, [9]))]
    + [("affine", dict(angle=a, translate=t, scale=s, shear=sh, interpolation="bilinear",
                       fill=f))
       for a, t, s, sh, f in ((0.0, [5, -3], 1.0, [0.0, 0.0], None),
                              (10.0, [2, 1], 1.2, [15.0, -7.0], 0),
                              (-30.0, [0, 0], 0.8, [0.0, 20.0], 128),
                              (45.0, [-9, 4], 2.5, [-30.0, 0.0], None),
                              (0.0, [0, 0], 1.0, [16.7, 0.0], 77))]
)


def reference(img, op, kw):
    from torchvision.transforms import InterpolationMode
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    if op in ("rotate", "affine") and kw.get("fill") is not None:
        fill = kw["fill"] if isinstance(kw["fill"], list) else [kw["fill"]]
        kw = dict(kw, fill=[float(f) for f in fill])
    if "interpolation" in kw:
        kw = dict(kw, interpolation=InterpolationMode(kw["interpolation"]))
    out = getattr(F, op)(t, **kw)
    return out.numpy().transpose(1, 2, 0)


def images():
    rng = np.random.default_rng(33)
    for shape in SHAPES:
        yield rng.integers(0, 256, size=shape, dtype=np.uint8)
    # Few values and flat areas: histogram ops' edge cases (one value, two values).
    yield np.full((20, 30, 3), 77, dtype=np.uint8)
    two = np.zeros((16, 16, 3), dtype=np.uint8)
    two[::2] = 200
    yield two
    yield rng.integers(100, 104, size=(40, 41, 3), dtype=np.uint8)


def applicable(img, op, kw):
    h, w, c = img.shape
    if op == "gaussian_blur":
        ks = kw["kernel_size"]
        ks = (ks, ks) if isinstance(ks, int) else ks
        return ks[0] // 2 < w and ks[1] // 2 < h
    if op == "rgb_to_grayscale" and c == 1:
        return kw.get("num_output_channels", 1) == 1
    return True


def compare(op, kw, per_value=False):
    worst, same, total = 0, 0, 0
    for img in images():
        if not applicable(img, op, kw):
            continue
        ours = ops.apply(img, op, **kw)
        ref = reference(img, op, dict(kw))
        if ours.ndim == 2:
            ours = ours[:, :, None]
        assert ours.shape == ref.shape, (op, kw, img.shape)
        assert ours.dtype == np.uint8
        d = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
        worst = max(worst, int(d.max()))
        if per_value:
            same += int((d == 0).sum())
            total += d.size
        else:
            same += int((d == 0).all(axis=2).sum())
            total += d.shape[0] * d.shape[1]
    return worst, same / total


@pytest.mark.parametrize("op,kw", COLOR, ids=["%s-%s" % (o, k) for o, k in COLOR])
def test_color_ops_match_torchvision(op, kw):
    worst, _ = compare(op, kw)
    assert worst <= 1, "%s %s: max abs difference %d" % (op, kw, worst)


@pytest.mark.parametrize("op,kw", GEOM, ids=["%s-%s" % (o, k) for o, k in GEOM])
def test_geometric_ops_match_torchvision(op, kw):
    _, frac = compare(op, kw)
    assert frac >= 0.99, "%s %s: %.4f of pixels identical" % (op, kw, frac)


@pytest.mark.parametrize("op,kw", BILINEAR, ids=["%s-%s" % (o, k) for o, k in BILINEAR])
def test_bilinear_matches_torchvision(op, kw):
    """The same sums of the same products, rounded half to even; a value on a rounding tie
    (torch's build may fuse a multiply-add) may differ by 1."""
    worst, frac = compare(op, kw, per_value=True)
    assert worst <= 1, "%s %s: max abs difference %d" % (op, kw, worst)
    assert frac >= 0.99, "%s %s: %.4f of values identical" % (op, kw, frac)


def test_interpolation_takes_torchvision_modes_and_fill_none_differs_from_zero():
    from torchvision.transforms import InterpolationMode
    img = np.random.default_rng(3).integers(0, 256, size=(30, 40, 3), dtype=np.uint8)
    a = ops.apply(img, "rotate", angle=33.0, interpolation=InterpolationMode.BILINEAR)
    b = ops.apply(img, "rotate", angle=33.0, interpolation="bilinear")
    assert np.array_equal(a, b)
    n = ops.apply(img, "rotate", angle=33.0, interpolation=InterpolationMode.NEAREST)
    assert np.array_equal(n, ops.apply(img, "rotate", angle=33.0))
    assert not np.array_equal(a, n)
    # At the corners the outside has weight: None counts it 0 in the sum, a fill of 0 is
    # blended in by that weight again (torchvision's mask channel), so the two differ.
    z = ops.apply(img, "rotate", angle=33.0, interpolation="bilinear", fill=0)
    assert not np.array_equal(a, z)


def test_input_is_not_modified_and_2d_stays_2d():
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, size=(12, 9), dtype=np.uint8)
    keep = img.copy()
    out = ops.apply(img, "adjust_brightness", brightness_factor=1.5)
    assert np.array_equal(img, keep)
    assert out.shape == (12, 9)
    ref = reference(img[:, :, None], "adjust_brightness", dict(brightness_factor=1.5))
    assert np.array_equal(out, ref[:, :, 0])
    # A non-contiguous view is read correctly.
    big = rng.integers(0, 256, size=(20, 30, 3), dtype=np.uint8)
    view = big[::2, 5:25]
    assert np.array_equal(ops.apply(view, "invert"), 255 - view)


def test_geometric_ops_take_four_channels():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, size=(33, 21, 4), dtype=np.uint8)
    out = ops.apply(img, "rotate", angle=33.0, fill=[1, 2, 3, 4])
    ref = reference(img, "rotate", dict(angle=33.0, fill=[1, 2, 3, 4]))
    assert (out == ref).all(axis=2).mean() >= 0.99


@pytest.mark.parametrize("op,kw,param", [
    ("adjust_brightness", dict(brightness_factor=-0.1), "brightness_factor"),
    ("adjust_contrast", dict(contrast_factor=float("nan")), "contrast_factor"),
    ("adjust_saturation", dict(saturation_factor=-1), "saturation_factor"),
    ("adjust_hue", dict(hue_factor=0.6), "hue_factor"),
    ("adjust_sharpness", dict(sharpness_factor="x"), "sharpness_factor"),
    ("posterize", dict(bits=9), "bits"),
    ("posterize", dict(bits=2.5), "bits"),
    ("solarize", dict(threshold=256), "threshold"),
    ("solarize", dict(threshold=float("nan")), "threshold is NaN"),
    ("rgb_to_grayscale", dict(num_output_channels=2), "num_output_channels"),
    ("gaussian_blur", dict(kernel_size=4, sigma=1.0), "kernel_size"),
    ("gaussian_blur", dict(kernel_size=3, sigma=0.0), "sigma"),
    ("gaussian_blur", dict(kernel_size=99, sigma=1.0), "kernel_size"),
    # The C field is 32 bits: 2**32 + 3 was a kernel of 3.
    ("gaussian_blur", dict(kernel_size=2**32 + 3, sigma=1.0), "kernel_size"),
    ("rotate", dict(angle=float("inf")), "angle"),
    ("rotate", dict(angle=1.0, fill=[1, 2]), "fill"),
    ("rotate", dict(angle=1.0, expand=True), "expand"),
    ("rotate", dict(angle=1.0, interpolation="bicubic"), "interpolation"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=1.0, shear=0.0, interpolation=2),
     "interpolation"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=0.0, shear=0.0), "scale"),
    ("affine", dict(angle=0.0, translate=[0], scale=1.0, shear=0.0), "translate"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[90.0, 0.0]), "shear"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=1.0), "shear"),
    ("adjust_brightness", dict(brightness_factor=1.0, gamma=2), "gamma"),
])
def test_bad_parameters_raise_value_error_naming_op_and_parameter(op, kw, param):
    img = np.zeros((10, 12, 3), dtype=np.uint8)
    with pytest.raises(ValueError) as e:
        ops.apply(img, op, **kw)
    assert op in str(e.value) and param in str(e.value), str(e.value)


def test_bad_images_and_ops():
    with pytest.raises(ValueError, match="unknown op"):
        ops.apply(np.zeros((4, 4, 3), np.uint8), "adjust_gamma", gamma=1.0)
    with pytest.raises(ValueError, match="uint8"):
        ops.apply(np.zeros((4, 4, 3), np.float32), "invert")
    # Color ops take 1 or 3 channels, as torchvision's _assert_channels.
    with pytest.raises(ValueError, match="adjust_hue.*channels"):
        ops.apply(np.zeros((4, 4, 4), np.uint8), "adjust_hue", hue_factor=0.1)
    with pytest.raises(ValueError, match="channels"):
        ops.apply(np.zeros((4, 4, 5), np.uint8), "rotate", angle=3.0)


def _record_entry(name, m):
    """The record entry loader/augment/aug_policy.c makes for torchvision's _apply_op(name, m):
    (op id, arg, flags)."""
    import math
    arg = [0.0] * 8
    arg[3] = 1.0
    if name in ("ShearX", "ShearY"):
        arg[4 if name == "ShearX" else 5] = math.degrees(math.atan(m))
        return (15 if name == "ShearX" else 16), arg, 1
    if name in ("TranslateX", "TranslateY"):
        arg[1 if name == "TranslateX" else 2] = float(int(m))
        return (17 if name == "TranslateX" else 18), arg, 0
    if name == "Rotate":
        arg[0] = m
        return 13, arg, 0
    ids = {"Brightness": 1, "Color": 3, "Contrast": 2, "Sharpness": 5}
    if name in ids:
        # The factor as a float32, and 1 - factor as torch computes it from the double (flag 2).
        arg[0] = float(np.float32(1.0 + m))
        arg[1] = float(np.float32(-m))
        return ids[name], arg, 2
    if name == "Posterize":
        arg[0] = float(int(m))
        return 6, arg, 0
    if name == "Solarize":
        arg[0] = m
        return 7, arg, 0
    return {"AutoContrast": 8, "Equalize": 9, "Invert": 10, "Identity": 0}[name], arg, 0


@pytest.mark.parametrize("name,m", [
    ("ShearX", 0.3), ("ShearX", -0.99), ("ShearY", 0.21), ("TranslateX", -14.7),
    ("TranslateY", 32.0), ("Rotate", -135.0), ("Rotate", 21.0), ("Brightness", 0.9),
    ("Color", -0.66), ("Contrast", 0.33), ("Sharpness", -0.99), ("Posterize", 5.0),
    ("Solarize", 110.5), ("AutoContrast", 0.0), ("Equalize", 0.0), ("Invert", 0.0),
    ("Identity", 0.0),
])
def test_a_drawn_op_applies_as_torchvision_apply_op(name, m):
    """call_of() turns a record entry into the functional call that torchvision's policies make
    (autoaugment._apply_op: shears about the corner, int translations, 1 + m factors)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, size=(45, 61, 3), dtype=np.uint8)
    op, arg, flags = _record_entry(name, m)
    fname, kw = ops.call_of(op, arg, flags, fill=(3, 4, 5, 0))
    ours = ops.apply(img, fname, **kw)
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    ref = _apply_op(t, name, m, InterpolationMode.NEAREST, [3.0, 4.0, 5.0]).numpy()
    ref = ref.transpose(1, 2, 0)
    d = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    if op >= 13:
        assert (d == 0).all(axis=2).mean() >= 0.99
    else:
        assert d.max() <= 1


@pytest.mark.parametrize("name,m", [("ShearX", 0.3), ("ShearY", -0.21), ("TranslateX", -14.7),
                                    ("TranslateY", 32.0), ("Rotate", -135.0), ("Rotate", 21.0)])
@pytest.mark.parametrize("fill", [None, (3, 4, 5)])
def test_a_drawn_bilinear_op_applies_as_torchvision_apply_op(name, m, fill):
    """A policy's geometric op with interpolation=BILINEAR: flag 4, and flag 8 when the policy
    was given a fill (without it call_of() passes fill=None, as the policy does). Within 1 of
    _apply_op; identical to torchvision's affine with the parameters as the op carries them
    (float32: a shear's degrees rounded to float32 move a whole row whose coordinates sit on a
    .5 tie, 1 % of the values for ShearX 0.3)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op
    img = np.random.default_rng(8).integers(0, 256, size=(45, 61, 3), dtype=np.uint8)
    op, arg, flags = _record_entry(name, m)
    flags |= 4 | (8 if fill else 0)
    fname, kw = ops.call_of(op, arg, flags, fill=(fill or (0, 0, 0)) + (0,))
    assert kw["interpolation"] == "bilinear" and (kw["fill"] is None) == (fill is None)
    ours = ops.apply(img, fname, **kw)
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    ref = _apply_op(t, name, m, InterpolationMode.BILINEAR,
                    None if fill is None else [float(f) for f in fill]).numpy()
    d = np.abs(ours.astype(np.int16) - ref.transpose(1, 2, 0).astype(np.int16))
    assert d.max() <= 1 and (d == 0).mean() >= 0.98
    f32 = {k: ([float(np.float32(x)) for x in v] if isinstance(v, list) and k != "fill" else
               float(np.float32(v)) if isinstance(v, float) else v) for k, v in kw.items()}
    f32["interpolation"] = InterpolationMode.BILINEAR
    if f32["fill"] is not None:
        f32["fill"] = [float(f) for f in f32["fill"]]
    exact = getattr(F, fname)(t, **f32).numpy().transpose(1, 2, 0)
    assert (ours == exact).mean() >= 0.999


@pytest.mark.parametrize("op", ["adjust_brightness", "adjust_contrast", "adjust_saturation",
                                "adjust_sharpness", "adjust_hue"])
def test_random_factors_match_torchvision(op):
    """Factors that are no float32 (Python floats): torch weighs the other image by 1 - factor
    computed in double, then rounded; a weight derived from the rounded factor moved values by 1."""
    rng = np.random.default_rng(hash(op) % 1000)
    name = OPS_PARAM[op]
    same = total = 0
    for _ in range(40):
        h, w = rng.integers(3, 40, 2)
        c = int(rng.choice([1, 3]))
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        f = float(rng.uniform(-0.5, 0.5)) if op == "adjust_hue" else float(rng.uniform(0, 3))
        ours = ops.apply(img, op, **{name: f})
        ours = ours if ours.ndim == 3 else ours[:, :, None]
        ref = reference(img, op, {name: f})
        d = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
        assert d.max() <= 1
        same += int((d == 0).sum())
        total += d.size
    # Off-by-one values come only from float sums in another order: rare. (A weight derived from
    # the rounded factor made 1.5 % of adjust_sharpness's values differ.)
    assert same / total >= 0.999, same / total


OPS_PARAM = {"adjust_brightness": "brightness_factor", "adjust_contrast": "contrast_factor",
             "adjust_saturation": "saturation_factor", "adjust_sharpness": "sharpness_factor",
             "adjust_hue": "hue_factor"}


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 5, 3), (5, 1, 3), (2, 2, 1), (2, 3, 3), (3, 2, 3)])
def test_tiny_images(shape):
    """1- and 2-pixel sides: sharpness leaves them, blur kernels must fit the reflect padding."""
    rng = np.random.default_rng(sum(shape))
    img = rng.integers(0, 256, shape, dtype=np.uint8)
    h, w, c = shape
    for op, kw in COLOR + GEOM:
        if not applicable(img, op, kw):
            continue
        ours = ops.apply(img, op, **kw)
        ours = ours if ours.ndim == 3 else ours[:, :, None]
        ref = reference(img, op, dict(kw))
        assert ours.shape == ref.shape
        d = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
        # Geometric ops: identical (no pixel of these fixed images lies on a tie).
        assert d.max() <= (0 if op in ("rotate", "affine") else 1), (op, kw)


@pytest.mark.skipif(__import__("platform").machine() != "x86_64",
                    reason="torch's NaN-to-uint8 conversion is x86's (0) only there")
@pytest.mark.parametrize("op,kw", [("adjust_saturation", {"saturation_factor": 3e38}),
                                   ("adjust_sharpness", {"sharpness_factor": 3e38})])
def test_factors_near_float_max_match_torchvision(op, kw):
    """r * x + (1 - r) * y is inf - inf = NaN near FLT_MAX: the clamp passed NaN on to a cast
    to int, which C leaves undefined (UBSan's float-cast-overflow); it is 0 now, which is what
    torch's conversion of its own NaN gives on x86."""
    worst, _ = compare(op, kw)
    assert worst == 0, "%s %s: max abs difference %d" % (op, kw, worst)


@pytest.mark.parametrize("angle", [10000000.5, 123456789.25, -725.5])
def test_large_angles_match_torchvision(angle):
    """torchvision takes the cosine and sine of the double angle; the float the op carries
    rounded 10000000.5 to 10000000 (442 of 4185 values off by up to 249). Reduced modulo 360
    first, exactly, the matrix is torchvision's."""
    worst, _ = compare("affine", dict(angle=angle, translate=[0, 0], scale=1.0,
                                      shear=[0.0, 0.0]))
    assert worst == 0, "angle %r: max abs difference %d" % (angle, worst)
    worst, _ = compare("rotate", dict(angle=angle))
    assert worst == 0, "rotate %r: max abs difference %d" % (angle, worst)


@pytest.mark.parametrize("op,kw,said", [
    ("gaussian_blur", dict(kernel_size=3, sigma=1e-50), "sigma[0] (1e-50) is below"),
    ("gaussian_blur", dict(kernel_size=3, sigma=[1.0, 1e300]), "sigma[1] (1e+300) is beyond"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=1e-50, shear=0.0), "scale (1e-50)"),
    ("affine", dict(angle=0.0, translate=[0, -1e300], scale=1.0, shear=0.0),
     "translate[1] (-1e+300)"),
    ("affine", dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, 1e300]),
     "shear[1] (1e+300)"),
    ("rotate", dict(angle=3.0, center=[1e300, 0]), "center[0] (1e+300)"),
    ("adjust_brightness", dict(brightness_factor=1e300), "brightness_factor (1e+300)"),
    ("adjust_hue", dict(hue_factor=-1e300), "hue_factor (-1e+300)"),
    ("solarize_add", dict(addition=1e300), "addition (1e+300)"),
])
def test_values_a_float_cannot_carry_are_quoted_as_given(op, kw, said):
    """The ops run in float: a value beyond a float's range, or a positive one below its
    smallest normal, was quoted after the narrowing ("sigma[0] (0) is not a finite positive
    number" for a sigma of 1e-50). It is refused with the value the caller gave."""
    img = np.zeros((10, 12, 3), dtype=np.uint8)
    with pytest.raises(ValueError) as e:
        ops.apply(img, op, **kw)
    assert said in str(e.value), str(e.value)


def test_a_side_beyond_32_bits_is_refused_not_wrapped():
    """A width of 2^32 + 2 was 2 to C: invert changed 2 pixels of 4,294,967,298."""
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(1, 2**32 + 2),
                                           strides=(0, 0))
    with pytest.raises(ValueError, match=r"invert: image has shape.*at most 2\^32 - 1"):
        ops.apply(huge, "invert")

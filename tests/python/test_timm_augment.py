"""timm's RandAugment in the loader (auto_augment="rand-m9-mstd0.5-inc1" and the rest of
rand_augment_transform's grammar): the config strings and their errors, the op set's frequencies,
per-op probability and arguments against a transcription of timm's own sampling (a chi-square
test with fixed seeds), the drawn ops replayed one at a time with dlcache.ops.apply, and timm's
SolarizeAdd op against a numpy reference."""

import math
import random

import pytest

from conftest import require_lib

require_lib("dlc_augment_spec_init_sized")

import numpy as np  # noqa: E402

import dlcache  # noqa: E402
from dlcache import _augment  # noqa: E402
from dlcache import _lib as L  # noqa: E402
from dlcache.errors import UnsupportedError  # noqa: E402

# timm's _RAND_TRANSFORMS / _RAND_INCREASING_TRANSFORMS, in order.
RAND = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
        "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
        "TranslateYRel"]
RAND_INC = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
            "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
            "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
            "TranslateYRel"]
# What each of timm's ops is among the loader's recorded ops (dlcache.ops.OP_NAMES).
KIND = {"AutoContrast": "autocontrast", "Equalize": "equalize", "Invert": "invert",
        "Rotate": "rotate", "Posterize": "posterize", "Solarize": "solarize",
        "SolarizeAdd": "solarize_add", "Color": "adjust_saturation",
        "Contrast": "adjust_contrast", "Brightness": "adjust_brightness",
        "Sharpness": "adjust_sharpness", "ShearX": "shear_x", "ShearY": "shear_y",
        "TranslateXRel": "translate_x", "TranslateYRel": "translate_y"}
CROP = 24


# ---- A transcription of timm/data/auto_augment.py's sampling (no PIL: the arguments only).
def _negate(rng, v):
    return -v if rng.random() > 0.5 else v


def _level_to_arg(name, level, rng):
    base = name.replace("Increasing", "")
    inc = name.endswith("Increasing")
    if base == "Rotate":
        return _negate(rng, (level / 10.) * 30.)
    if base == "Posterize":
        bits = int((level / 10.) * 4)
        return 4 - bits if inc else bits
    if base == "Solarize":
        t = min(256, int((level / 10.) * 256))
        return 256 - t if inc else t
    if base == "SolarizeAdd":
        return min(128, int((level / 10.) * 110))
    if base in ("Color", "Contrast", "Brightness", "Sharpness"):
        if inc:
            return max(0.1, 1.0 + _negate(rng, (level / 10.) * .9))
        return (level / 10.) * 1.8 + 0.1
    if base in ("ShearX", "ShearY"):
        return _negate(rng, (level / 10.) * 0.3)
    if base in ("TranslateXRel", "TranslateYRel"):
        return _negate(rng, (level / 10.) * 0.45)
    return 0.0  # AutoContrast, Equalize, Invert


def timm_draws(opts, views, seed):
    """Per view: the list of (kind, argument) of the ops timm's RandAugment applies, drawn as
    RandAugment.__call__ and AugmentOp.__call__ do."""
    rng = random.Random(seed)
    nprng = np.random.RandomState(seed)
    names = RAND_INC if opts["increasing"] else RAND
    out = []
    for _ in range(views):
        ops = []
        for i in nprng.choice(len(names), opts["num_ops"], replace=True):
            name = names[i]
            if opts["p"] < 1.0 and rng.random() > opts["p"]:
                continue
            m = opts["magnitude"]
            if opts["mstd"] > 0:
                m = rng.uniform(0, m) if math.isinf(opts["mstd"]) else rng.gauss(m, opts["mstd"])
            m = max(0., min(m, opts["mmax"]))
            ops.append((KIND[name.replace("Increasing", "")], _level_to_arg(name, m, rng)))
        out.append(ops)
    return out


def loader_draws(store, config, epochs):
    """Per view: (kind, recorded magnitude) of the ops the loader drew."""
    out = []
    views = [{"name": "v", "count": 8, "crop": CROP, "scale": (0.5, 1.0)}]
    try:
        ld = dlcache.Loader(store, 50, seed=3, threads=2, views=views, dtype="uint8",
                            auto_augment=config, return_params=True)
    except UnsupportedError as e:
        pytest.skip("the ops of loader/augment/ are not in this build: %s" % e)
    with ld:
        for epoch in range(epochs):
            ld.set_epoch(epoch)
            for b in ld:
                ops = b["params_ops_v"].numpy()
                mag = b["params_magnitude_v"].numpy()
                for i in range(ops.shape[0]):
                    for k in range(ops.shape[1]):
                        view = []
                        for j in range(ops.shape[2]):
                            op = int(ops[i, k, j, 0])
                            if op < 0:
                                break
                            # Solarize at 256 inverts nothing: recorded as identity.
                            name = "solarize" if op == 0 else dlcache.ops.OP_NAMES[op]
                            view.append((name, float(mag[i, k, j])))
                        out.append(view)
    return out


def _crit(df, z=3.719):
    """The 1 - 1e-4 quantile of chi-square with df degrees of freedom (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _chi2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    ka, kb = np.sqrt(b.sum() / a.sum()), np.sqrt(a.sum() / b.sum())
    return float((((a * ka - b * kb) ** 2) / (a + b)).sum()), int(keep.sum()) - 1


def _check(what, a, b):
    stat, df = _chi2(a, b)
    if df > 0:
        assert stat < _crit(df), (what, stat, df, list(a), list(b))


@pytest.mark.parametrize("config", ["rand-m9-mstd0.5", "rand-m9-mstd0.5-inc1",
                                    "rand-m7-n3-mstd101-mmax12-p0.7", "rand-m10-n1",
                                    "rand-m15-mmax20-mstd2-inc1"])
def test_draws_match_timm(store, config):
    opts = _augment.timm_rand(config)
    ours = loader_draws(store, config, 3)
    theirs = timm_draws(opts, len(ours), seed=12345)
    # Ops applied per view (the per-op probability).
    n = opts["num_ops"]
    _check("ops per view", np.bincount([len(v) for v in ours], minlength=n + 1),
           np.bincount([len(v) for v in theirs], minlength=n + 1))
    kinds = sorted(set(KIND.values()))
    flat_o = [o for v in ours for o in v]
    flat_t = [o for v in theirs for o in v]
    _check("op frequencies", [sum(1 for k, _ in flat_o if k == x) for x in kinds],
           [sum(1 for k, _ in flat_t if k == x) for x in kinds])
    # Each op's arguments (the sign and the magnitude's level function), binned on the pooled
    # quantiles.
    for x in kinds:
        # timm's doubles as the float32 the loader records.
        mo = np.array([m for k, m in flat_o if k == x], dtype=np.float32).astype(np.float64)
        mt = np.array([m for k, m in flat_t if k == x], dtype=np.float32).astype(np.float64)
        if x in ("autocontrast", "equalize", "invert"):
            assert (mo == 0).all()
            continue
        both = np.concatenate([mo, mt])
        edges = np.unique(np.quantile(both, np.linspace(0, 1, 9)))
        if len(edges) < 2:
            assert np.allclose(mo, both[0], atol=1e-6), (x, mo[:5], both[0])
            continue
        edges[0], edges[-1] = edges[0] - 1, edges[-1] + 1
        _check("%s arguments" % x, np.histogram(mo, edges)[0], np.histogram(mt, edges)[0])


def test_without_noise_the_arguments_are_timms_exactly(store):
    """rand-m9 (no mstd): every argument is one of the values timm's level functions give at
    magnitude 9, with its sign."""
    want = {"rotate": {27.0, -27.0}, "posterize": {3.0}, "solarize": {230.0},
            "solarize_add": {99.0}, "adjust_saturation": {1.72}, "adjust_contrast": {1.72},
            "adjust_brightness": {1.72}, "adjust_sharpness": {1.72}, "shear_x": {0.27, -0.27},
            "shear_y": {0.27, -0.27}, "translate_x": {0.405, -0.405},
            "translate_y": {0.405, -0.405}}
    seen = set()
    for view in loader_draws(store, "rand-m9-p1.0", 1):
        for k, m in view:
            seen.add(k)
            if k in want:
                assert any(abs(m - w) < 1e-5 for w in want[k]), (k, m)
            else:
                assert m == 0.0, (k, m)
    assert len(seen) == 15, sorted(seen)


def test_replayed_ops_give_the_loaders_bytes(store):
    """Fused equals sequential: each view's drawn timm ops applied one at a time with
    dlcache.ops.apply to its crop and flip alone give the loader's uint8 view."""
    ops = dlcache.ops
    args = dict(crop=40, random_resized_crop=True, seed=5, threads=2, dtype="uint8",
                return_params=True)
    with dlcache.Loader(store, 25, **args) as a:
        base = list(a)
    fill = (124, 116, 104)  # timm's img_mean of the default (ImageNet) mean
    with dlcache.Loader(store, 25, auto_augment="rand-m9-n3-mstd0.5-inc1-p0.8", **args) as b:
        fused = list(b)
    applied = set()
    for bb, fb in zip(base, fused):
        for i in range(bb["image"].shape[0]):
            img = bb["image"][i].numpy()
            for name, kw in dlcache.Loader.params_ops(fb, i, fill=fill):
                img = ops.apply(img, name, **kw)
                applied.add(name)
            assert np.array_equal(img, fb["image"][i].numpy()), (i, _augment.ops_of(fb, i))
    assert {"solarize_add", "affine", "rotate", "adjust_saturation"} <= applied, applied


def test_solarize_add_matches_numpy():
    rng = np.random.RandomState(1)
    img = rng.randint(0, 256, size=(13, 17, 3), dtype=np.uint8)
    for add, thresh in ((0, 128), (99, 128), (110, 128), (255, 256), (40, 0), (7, 200.5)):
        want = np.where(img < thresh, np.minimum(255, img.astype(np.int32) + add), img)
        got = dlcache.ops.apply(img, "solarize_add", addition=add, threshold=thresh)
        assert np.array_equal(got, want.astype(np.uint8)), (add, thresh)
    got = dlcache.ops.apply(img[..., 0], "solarize_add", addition=30)  # threshold 128: timm's
    assert np.array_equal(got, np.where(img[..., 0] < 128,
                                        np.minimum(255, img[..., 0].astype(int) + 30),
                                        img[..., 0]).astype(np.uint8))
    for bad in (dict(addition=-1), dict(addition=256), dict(addition=1.5), dict()):
        with pytest.raises((ValueError, TypeError)):
            dlcache.ops.apply(img, "solarize_add", **bad)


def test_config_strings():
    t = _augment.timm_rand("rand-m9-mstd0.5-inc1")
    assert t == {"num_ops": 2, "magnitude": 9.0, "mstd": 0.5, "mmax": 10.0, "increasing": True,
                 "p": 0.5}
    t = _augment.timm_rand("rand-n3-m15-mstd101-mmax0-p0.25")
    assert t["num_ops"] == 3 and t["magnitude"] == 15 and math.isinf(t["mstd"])
    assert t["mmax"] == 10.0 and t["p"] == 0.25 and not t["increasing"]
    assert _augment.timm_rand("rand")["magnitude"] == 10.0
    assert _augment.timm_rand("rand-inc0")["increasing"]  # timm's bool("0")
    spec = _augment.specs({"auto_augment": "rand-m9-mstd0.5-inc1"}, None, False, True,
                          (0.5, 0.5, 0.5))[0]
    assert spec.auto_augment == L.AUTO_AUGMENT_TIMM_RAND and spec.increasing == 1
    assert spec.num_ops == 2 and spec.magnitude == 9 and abs(spec.magnitude_std - 0.5) < 1e-7
    assert list(spec.fill) == [128, 128, 128] and spec.op_prob == 0.5
    spec = _augment.specs({"auto_augment": "rand-m9", "auto_augment_options": {"fill": 0}},
                          None, False, True)[0]
    assert list(spec.fill) == [0, 0, 0]
    # The existing names keep torchvision's policies.
    spec = _augment.specs({"auto_augment": "rand_augment"}, None, False, True)[0]
    assert spec.auto_augment == L.AUTO_AUGMENT_RAND


@pytest.mark.parametrize("config,token", [
    ("rand-m9-x3", "'x3'"), ("rand-m9-mstd", "'mstd'"), ("rand-mfoo", "'mfoo'"),
    ("rand-m9.5", "'m9.5'"), ("rand-tweights", "'tweights'"), ("rand-n0", "n0"),
    ("rand-n9", "n9"), ("rand-p1.5", "p1.5"), ("rand-m9--n2", "''"), ("randaug-m9", "rand"),
])
def test_bad_config_strings_name_the_token(config, token):
    with pytest.raises(ValueError) as e:
        _augment.specs({"auto_augment": config}, None, False, True)
    assert token in str(e.value) and config in str(e.value), str(e.value)


def test_options_beside_a_string_are_refused(store):
    with pytest.raises(ValueError, match="num_ops"):
        _augment.specs({"auto_augment": "rand-m9", "auto_augment_options": {"num_ops": 3}},
                       None, False, True)

"""The per-sample ops of dlcache.Loader (issue 33, the loader's side): defaults that keep the old
bytes, RandomErasing, return_params, per view group options, fused equal to sequential (each
drawn op applied alone with dlcache.ops.apply), bytes independent of threads and prefetch, an
exact resume mid-epoch with every option on, and ValueErrors that name the argument."""

import pytest

from conftest import require_lib

require_lib("dlc_augment_spec_init_sized")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dlcache  # noqa: E402
from dlcache import _augment  # noqa: E402
from dlcache import _lib as L  # noqa: E402
from dlcache.errors import UnsupportedError  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# torchvision's recipe (RRC, flip, TrivialAugmentWide, RandomErasing) and DINO's color ops.
TORCHVISION = dict(auto_augment="trivial_augment_wide", random_erasing=0.25)
DINO_COLOR = dict(color_jitter={"brightness": 0.4, "contrast": 0.4, "saturation": 0.2,
                                "hue": 0.1, "p": 0.8},
                  grayscale=0.2, solarize={"p": 0.2, "threshold": 128})


def _loader(store, **kw):
    args = dict(crop=48, random_resized_crop=True, seed=7, threads=2, shuffle=True)
    args.update(kw)
    return dlcache.Loader(str(store), 16, **args)


def _ops_loader(store, **kw):
    """A Loader with uint8 ops on, or a skip while loader/augment/ has no ops in this build."""
    try:
        return _loader(store, **kw)
    except UnsupportedError as e:
        pytest.skip("the ops of loader/augment/ are not in this build yet: %s" % e)


def _epoch(loader):
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def test_defaults_keep_the_bytes(store):
    for dtype in ("uint8", "float32"):
        with _loader(store, dtype=dtype, as_dict=True) as a:
            plain = _epoch(a)
        # Every new argument at its default, and return_params: the same images and labels.
        with _loader(store, dtype=dtype, color_jitter=None, grayscale=None, blur=None,
                     solarize=None, auto_augment=None, random_erasing=None,
                     return_params=True) as b:
            got = _epoch(b)
        assert len(got) == len(plain)
        for p, g in zip(plain, got):
            assert torch.equal(p["image"], g["image"]) and torch.equal(p["label"], g["label"])
            assert set(g) - set(p) == {"params_box", "params_flip", "params_ops", "params_args",
                                       "params_magnitude", "params_erase"}
            assert (g["params_ops"][..., 0] == -1).all() and (g["params_erase"] == 0).all()


def test_params_give_the_crop_box_and_flip(store):
    with dlcache.Loader(str(store), 10, crop=40, seed=1, threads=2, return_params=True,
                        return_indices=True, dtype="uint8") as ld:
        b = next(iter(ld))
    assert b["params_box"].shape == (10, 4) and b["params_box"].dtype == torch.int32
    assert b["params_flip"].shape == (10,) and b["params_flip"].dtype == torch.uint8
    assert b["params_ops"].shape == (10, 16, 2) and b["params_args"].shape == (10, 16, 8)
    assert b["params_magnitude"].shape == (10, 16) and b["params_erase"].shape == (10, 4)
    assert (b["params_box"][:, 2:] == 40).all()
    with dlcache.Store(str(store)) as st:
        for i in range(10):
            t, l, h, w = b["params_box"][i].tolist()
            want = st[int(b["indices"][i])]["image"][t:t + h, l:l + w]
            if b["params_flip"][i]:
                want = want[:, ::-1]
            assert np.array_equal(b["image"][i].numpy(), want)


def test_random_erasing_writes_its_box_only(store):
    with _loader(store, dtype="float32") as a:
        plain = _epoch(a) if a._as_dict else [dict(image=x, label=y) for x, y in a]
    for value, expect in ((0, 0.0), ((1.5, -2.0, 0.25), None), ("random", None)):
        with _loader(store, dtype="float32", random_erasing={"p": 0.8, "value": value},
                     return_params=True) as b:
            got = _epoch(b)
        erased = 0
        for p, g in zip(plain, got):
            for i in range(p["image"].shape[0]):
                t, l, h, w = g["params_erase"][i].tolist()
                mask = torch.zeros(p["image"].shape[1:], dtype=torch.bool)
                mask[:, t:t + h, l:l + w] = True
                assert torch.equal(p["image"][i][~mask], g["image"][i][~mask])
                if not h:
                    continue
                erased += 1
                assert h < 48 and w < 48
                box = g["image"][i][:, t:t + h, l:l + w]
                if value == 0:
                    assert (box == 0).all()
                elif value == "random":
                    assert torch.isfinite(box).all()
                else:
                    for c in range(3):
                        assert (box[c] == torch.tensor(value[c], dtype=torch.float32)).all()
        assert erased > 60, erased  # p = 0.8 over 150 samples


def test_bad_values_name_the_argument(store):
    cases = [
        (dict(color_jitter=(-0.1, 0, 0, 0)), "color_jitter brightness"),
        (dict(color_jitter=(0, 0, 0, 0.7)), "color_jitter hue"),
        (dict(color_jitter={"brightness": 0.4, "p": 2}), "color_jitter['p']"),
        (dict(color_jitter={"bright": 0.4}), "color_jitter: unknown keys"),
        (dict(color_jitter="strong"), "color_jitter"),
        (dict(grayscale=1.5), "grayscale"),
        (dict(grayscale="often"), "grayscale"),
        (dict(blur={"p": 0.5}), "blur needs kernel_size"),
        (dict(blur={"kernel_size": 4}), "blur kernel_size"),
        (dict(blur={"kernel_size": 3, "sigma": (2, 1)}), "blur sigma"),
        (dict(blur={"kernel_size": 99}), "blur kernel_size 99"),  # the library's, at open
        (dict(solarize={"p": 0.2, "threshold": 300}), "solarize threshold"),
        (dict(solarize=-1), "solarize"),
        (dict(auto_augment="autoaugment"), "auto_augment must be one of"),
        (dict(auto_augment="rand_augment", auto_augment_options={"num_ops": 0}),
         "auto_augment_options num_ops"),
        (dict(auto_augment="rand_augment", auto_augment_options={"magnitude": 40}),
         "auto_augment_options magnitude"),
        (dict(auto_augment="rand_augment", auto_augment_options={"mstd": -1}),
         "auto_augment_options mstd"),
        (dict(auto_augment="trivial_augment_wide", auto_augment_options={"num_ops": 2}),
         "auto_augment_options"),
        (dict(auto_augment_options={"num_ops": 2}), "auto_augment_options given without"),
        (dict(auto_augment="trivial_augment_wide",
              auto_augment_options={"interpolation": "bicubic"}),
         "auto_augment_options interpolation"),
        (dict(random_erasing=2), "random_erasing"),
        (dict(random_erasing={"p": 0.5, "scale": (0.5, 0.1)}), "random_erasing scale"),
        (dict(random_erasing={"p": 0.5, "ratio": (0, 1)}), "random_erasing ratio"),
        (dict(random_erasing={"p": 0.5, "value": "noise"}), "random_erasing value"),
        (dict(random_erasing={"p": 0.5, "value": "random"}, dtype="uint8"), "random_erasing"),
        (dict(random_erasing={"p": 0.5, "value": 0.5}, dtype="uint8"), "random_erasing value"),
        (dict(return_params=1), "return_params"),
        (dict(views=[{"name": "g", "crop": 32, "grayscale": 2}]), "views[0] grayscale"),
        (dict(views=[{"name": "g", "crop": 32, "blur": {"sigma": 1}}]), "views[0] blur"),
        # torchvision: one value or one per channel; the channels left out were erased with 0.
        (dict(random_erasing={"p": 1.0, "value": (0.1, 0.2)}),
         "random_erasing value has 2 values, but the store's images have 3 channels"),
        # Far beyond timm's 0..10 a shear rounds to 90 degrees: each record failed at next().
        (dict(auto_augment="rand-m1000000000"), "m 1e+09 is beyond 1000"),
        (dict(auto_augment="rand-m" + "9" * 400), "section"),  # was a bare OverflowError
    ]
    for kw, want in cases:
        args = dict(dtype="float32")
        args.update(kw)
        with pytest.raises(ValueError) as e:
            _loader(store, **args)
        assert want in str(e.value), (kw, str(e.value))


def test_random_erasing_with_a_device_is_parsed_as_on_the_host():
    # The device path erases after its conversion (tests/loader/test_device.c compares it with
    # the host on the CPU stand-in); the parser takes it, and still refuses noise with uint8.
    arr = _augment.specs({"random_erasing": {"p": 0.5, "value": "random"}}, None, True, True)
    assert arr is not None and arr[0].erase_prob == 0.5 and arr[0].erase_value == 1
    with pytest.raises(ValueError, match="random_erasing"):
        _augment.specs({"random_erasing": {"p": 0.5, "value": "random"}}, None, True, False)


def _normalize(img_u8):
    """The loader's conversion, the reference expression in float32."""
    x = torch.from_numpy(np.ascontiguousarray(img_u8)).permute(2, 0, 1).to(torch.float32)
    mean = torch.tensor(MEAN, dtype=torch.float32)[:, None, None]
    std = torch.tensor(STD, dtype=torch.float32)[:, None, None]
    return (x / 255 - mean) / std


@pytest.mark.parametrize("recipe", [
    dict(auto_augment="trivial_augment_wide"),
    dict(auto_augment="rand_augment",
         auto_augment_options={"num_ops": 2, "magnitude": 9, "mstd": 0.5}),
    dict(auto_augment="auto_augment_imagenet", auto_augment_options={"fill": 128}),
    dict(auto_augment="trivial_augment_wide", auto_augment_options={"interpolation": "bilinear"}),
    dict(auto_augment="rand_augment",
         auto_augment_options={"num_ops": 3, "interpolation": "bilinear", "fill": 0}),
    dict(DINO_COLOR, blur={"p": 0.5, "kernel_size": 5, "sigma": (0.1, 2.0)}),
])
def test_fused_equals_sequential(store, recipe):
    """The loader's output for a sample == its drawn ops applied one at a time with
    dlcache.ops.apply to the crop and flip alone (the same seed draws the same crop and flip:
    the ops draw after them), then the conversion."""
    ops = pytest.importorskip("dlcache.ops")
    fill = tuple([recipe.get("auto_augment_options", {}).get("fill", 0)] * 3)
    with _loader(store, dtype="uint8", return_params=True) as a:
        base = _epoch(a)
    with _ops_loader(store, dtype="uint8", return_params=True, **recipe) as b:
        fused = _epoch(b)
    with _ops_loader(store, dtype="float32", return_params=True, **recipe) as c:
        fused_f = _epoch(c)
    applied = 0
    for bb, fb, ff in zip(base, fused, fused_f):
        assert torch.equal(bb["params_box"], fb["params_box"])
        assert torch.equal(bb["params_flip"], fb["params_flip"])
        for i in range(bb["image"].shape[0]):
            img = bb["image"][i].numpy()
            for name, kw in dlcache.Loader.params_ops(fb, i, fill=fill):
                img = ops.apply(img, name, **kw)
                applied += 1
            assert np.array_equal(img, fb["image"][i].numpy()), (i, _augment.ops_of(fb, i))
            assert torch.equal(_normalize(img), ff["image"][i]), i
    assert applied > 100, applied


@pytest.mark.parametrize("fill", [None, 0])
def test_bilinear_policy_marks_its_geometric_ops(store, fill):
    """interpolation="bilinear" reaches every geometric op drawn (flag 4), and a given fill,
    even 0, is marked as given (flag 8) where torchvision's default fill=None is not."""
    opts = {"interpolation": "bilinear", "num_ops": 4}
    if fill is not None:
        opts["fill"] = fill
    geo = 0
    with _ops_loader(store, dtype="uint8", return_params=True, auto_augment="rand_augment",
                     auto_augment_options=opts) as lo:
        for b in _epoch(lo):
            for row in b["params_ops"].reshape(-1, b["params_ops"].shape[-1]).tolist():
                if 13 <= row[0] <= 18:
                    geo += 1
                    assert row[1] & 4, row
                    assert bool(row[1] & 8) == (fill is not None), row
    assert geo > 20, geo


def _recipe_loader(store, ops, **kw):
    args = dict(dtype="float16", return_params=True,
                random_erasing={"p": 0.5, "value": "random"})
    if ops:
        args.update(TORCHVISION, **DINO_COLOR)
        args["random_erasing"] = {"p": 0.5, "value": "random"}
        args["blur"] = {"p": 0.3, "kernel_size": 5}
    args.update(kw)
    return (_ops_loader if ops else _loader)(store, **args)


@pytest.mark.parametrize("ops", [False, True], ids=["erasing", "full_recipe"])
def test_bytes_independent_of_threads_and_prefetch(store, ops):
    runs = []
    for threads, prefetch in ((1, 1), (2, 6)):
        with _recipe_loader(store, ops, threads=threads, prefetch=prefetch) as ld:
            runs.append(_epoch(ld))
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("ops", [False, True], ids=["erasing", "full_recipe"])
def test_resume_mid_epoch_exact_with_every_option(store, ops):
    views = [{"name": "g", "count": 2, "crop": 40, "scale": (0.4, 1.0)},
             {"name": "l", "count": 3, "crop": 24, "scale": (0.05, 0.4),
              "random_erasing": None}]
    if ops:
        views[0]["blur"] = {"p": 1.0, "kernel_size": 5}
        views[1]["blur"] = {"p": 0.5, "kernel_size": 3}
    with _recipe_loader(store, ops, views=views) as ld:
        ld.set_epoch(2)
        want = _epoch(ld)
    with _recipe_loader(store, ops, views=views) as ld:
        ld.set_epoch(2)
        it = iter(ld)
        for k in range(3):
            got = next(it)
            assert all(torch.equal(got[n], want[k][n]) for n in got)
        state = ld.state_dict()
    with _recipe_loader(store, ops, views=views, threads=1, prefetch=3) as ld:
        ld.load_state_dict(state)
        ld.set_epoch(2)
        rest = _epoch(ld)
    assert len(rest) == len(want) - 3
    for got, exp in zip(rest, want[3:]):
        for n in exp:
            assert torch.equal(got[n], exp[n]), n


def test_view_groups_have_their_own_ops(store):
    """DINO: two global views blurred always, four local ones blurred half the time and never
    solarized."""
    views = [{"name": "global", "count": 2, "crop": 40, "scale": (0.4, 1.0),
              "blur": {"p": 1.0, "kernel_size": 5}},
             {"name": "local", "count": 4, "crop": 24, "scale": (0.05, 0.4),
              "blur": {"p": 0.5, "kernel_size": 3}, "solarize": None}]
    with _ops_loader(store, dtype="float32", views=views, return_params=True,
                     **DINO_COLOR) as ld:
        batches = _epoch(ld)
    assert batches[0]["image_global"].shape[1:] == (2, 3, 40, 40)
    assert batches[0]["image_local"].shape[1:] == (4, 3, 24, 24)
    assert batches[0]["params_ops_local"].shape[1:] == (4, 16, 2)
    g = torch.cat([b["params_ops_global"][..., 0] for b in batches])
    loc = torch.cat([b["params_ops_local"][..., 0] for b in batches])
    blur, solarize = 12, 7
    assert (g == blur).any(-1).all()
    local_blurred = (loc == blur).any(-1).float().mean().item()
    assert 0.35 < local_blurred < 0.65, local_blurred
    assert not (loc == solarize).any()
    assert (g == solarize).any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False: "
                    "no GPU to compare the device path's bytes with the host's")
@pytest.mark.parametrize("backend", ["plugin", "torch"])
def test_device_batches_equal_the_host_with_ops(store, backend, monkeypatch):
    """The uint8 ops run on the host before the copy, the conversion on the GPU: every output,
    float16 and the params included, is the host path's byte for byte. RandomErasing (with
    noise) runs in the plugin after the conversion; the torch backend refuses it."""
    if backend == "plugin" and not dlcache._lib.lib.has("dlc_cuda_probe"):
        pytest.skip("this libdlcache has no CUDA plugin")
    monkeypatch.setenv("DLCACHE_DEVICE_BACKEND", backend)
    recipe = dict(TORCHVISION, **DINO_COLOR)
    recipe["random_erasing"] = {"p": 0.5, "value": "random"}
    if backend == "torch":
        with pytest.raises(ValueError, match="random_erasing.*plugin"):
            _ops_loader(store, dtype="float16", device="cuda", **recipe)
        del recipe["random_erasing"]
    with _ops_loader(store, dtype="float16", return_params=True, **recipe) as host:
        want = _epoch(host)
    with _ops_loader(store, dtype="float16", return_params=True, device="cuda",
                     **recipe) as dev:
        got = [{k: v.cpu() for k, v in b.items()} for b in dev]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            assert torch.equal(g[k], w[k]), k


def test_fused_equals_sequential_per_view_group(store):
    ops = pytest.importorskip("dlcache.ops")
    views = [{"name": "g", "count": 2, "crop": 40, "scale": (0.4, 1.0),
              "blur": {"p": 1.0, "kernel_size": 5}},
             {"name": "l", "count": 3, "crop": 24, "scale": (0.05, 0.4),
              "auto_augment": "rand_augment",
              "auto_augment_options": {"num_ops": 3, "magnitude": 12, "fill": 7}}]
    plain = [{k: v for k, v in g.items() if k in ("name", "count", "crop", "scale")}
             for g in views]
    with _loader(store, dtype="uint8", views=plain, return_params=True) as a:
        base = _epoch(a)
    with _ops_loader(store, dtype="uint8", views=views, return_params=True, **DINO_COLOR) as b:
        fused = _epoch(b)
    applied = 0
    for bb, fb in zip(base, fused):
        for group, count, fill in (("g", 2, 0), ("l", 3, 7)):
            assert torch.equal(bb["params_box_" + group], fb["params_box_" + group])
            for i in range(bb["image_" + group].shape[0]):
                for k in range(count):
                    img = bb["image_" + group][i, k].numpy()
                    for name, kw in dlcache.Loader.params_ops(fb, i, k, group, fill):
                        img = ops.apply(img, name, **kw)
                        applied += 1
                    assert np.array_equal(img, fb["image_" + group][i, k].numpy()), (group, i, k)
    assert applied > 500, applied


def _chi2_two_sample(a, b):
    """Pearson's two-sample chi-square statistic of two histograms over the same bins."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    ka, kb = np.sqrt(b.sum() / a.sum()), np.sqrt(a.sum() / b.sum())
    return float((((a * ka - b * kb) ** 2) / (a + b)).sum()), int(keep.sum()) - 1


def test_random_erasing_draws_torchvision_boxes(store):
    """The erased boxes' area, aspect and place follow torchvision 0.14's
    RandomErasing.get_params on the same output size (a chi-square test with fixed seeds)."""
    T = pytest.importorskip("torchvision.transforms")
    ours = []
    with _loader(store, dtype="float32", crop=(40, 48), random_erasing=1.0,
                 return_params=True) as ld:
        for epoch in range(8):
            ld.set_epoch(epoch)
            ours += [b["params_erase"] for b in ld]
    ours = torch.cat(ours).numpy()
    torch.manual_seed(0)
    img = torch.zeros(3, 40, 48)
    theirs = []
    for _ in range(len(ours)):
        i, j, h, w, v = T.RandomErasing.get_params(img, scale=(0.02, 0.33), ratio=(0.3, 3.3),
                                                   value=[0])
        theirs.append((i, j, h, w) if v is not img else (0, 0, 0, 0))
    theirs = np.array(theirs)
    # 99.9th percentiles of chi-square with df 1..10, for a test that fails 1 time in 1000 by
    # chance (deterministic here: fixed seeds).
    crit = [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59]

    def hist(x, edges):
        return np.histogram(x, bins=edges)[0]

    for name, f, edges in (
            ("area", lambda p: p[:, 2] * p[:, 3] / (40.0 * 48.0),
             [-1, 1e-9, 0.04, 0.08, 0.12, 0.17, 0.22, 0.28, 1.0]),
            ("aspect", lambda p: np.log(np.maximum(p[:, 2], 1) / np.maximum(p[:, 3], 1)),
             [-3, -0.8, -0.4, -0.1, 0.1, 0.4, 0.8, 3]),
            ("top", lambda p: p[:, 0] / 40.0, [-1, 0.1, 0.2, 0.35, 0.5, 1.0])):
        stat, df = _chi2_two_sample(hist(f(ours), edges), hist(f(theirs), edges))
        assert stat < crit[df - 1], (name, stat, df, hist(f(ours), edges),
                                     hist(f(theirs), edges))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False: "
                    "no GPU to compare the device path's erasing with the host's")
@pytest.mark.parametrize("dtype,channels_last", [("float32", True), ("bfloat16", False)])
def test_device_random_erasing_equals_the_host(store, dtype, channels_last, monkeypatch):
    """RandomErasing in the CUDA plugin, after the conversion: zero, a constant and the noise
    (the host's counter-based generator, computed on the GPU) give the host path's bytes."""
    if not dlcache._lib.lib.has("dlc_cuda_probe"):
        pytest.skip("this libdlcache has no CUDA plugin")
    monkeypatch.setenv("DLCACHE_DEVICE_BACKEND", "plugin")
    for value in (0, (0.5, -1.0, 2.0), "random"):
        args = dict(dtype=dtype, return_params=True, random_erasing={"p": 0.8, "value": value})
        with _loader(store, **args) as host:
            want = _epoch(host)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        with _loader(store, device="cuda", memory_format=fmt, **args) as dev:
            got = [{k: v.cpu() for k, v in b.items()} for b in dev]
        assert len(got) == len(want)
        assert sum(int((w["params_erase"][:, 2] > 0).sum()) for w in want) > 0
        for g, w in zip(got, want):
            for k in w:
                assert torch.equal(g[k].contiguous(), w[k].contiguous()), (value, k)


def test_values_torchvision_takes_are_taken(store):
    """What torchvision takes, dlcache takes: TrivialAugmentWide with fewer than 10 bins (it
    has no magnitude to check), a negative solarize threshold, numpy scalars from a config
    array, and a negative mean beside a timm string (its fill is clamped to a pixel)."""
    for kw in (dict(auto_augment="trivial_augment_wide",
                    auto_augment_options={"num_magnitude_bins": 5}),
               dict(solarize={"p": 1.0, "threshold": -5}),
               dict(color_jitter=(np.float32(0.4), 0, 0, 0),
                    blur={"kernel_size": np.int64(3)},
                    auto_augment="rand_augment", auto_augment_options={"num_ops": np.int64(3)}),
               dict(auto_augment="rand-m9", mean=(-0.5, 0.4, 0.4))):
        with _ops_loader(store, dtype="float32", **kw) as ld:
            assert next(iter(ld))[0].shape[1:] == (3, 48, 48), kw


def test_a_view_restating_the_policy_keeps_its_options():
    """views: the same keys replace the Loader's. A view naming the Loader's own policy again
    kept none of its auto_augment_options (2 ops drawn where 4 were asked); one naming another
    policy starts from that one's defaults (rand_augment's num_ops would be refused there)."""
    loader = {"auto_augment": "rand_augment", "auto_augment_options": {"num_ops": 4}}
    arr = _augment.specs(loader, [{"auto_augment": "rand_augment"},
                                  {"auto_augment": "trivial_augment_wide"},
                                  {"auto_augment": "rand_augment",
                                   "auto_augment_options": {"num_ops": 3}}], False, True)
    assert [arr[i].num_ops for i in (0, 2)] == [4, 3]
    assert arr[1].auto_augment == L.AUTO_AUGMENT_TRIVIAL_WIDE

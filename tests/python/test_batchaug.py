"""Issue 33, the batch part: bfloat16 output, MixUp / CutMix with soft targets, progressive
resizing. Every expectation is computed independently here (numpy / torch) from a plain run."""
import numpy as np
import pytest
import torch

import dlcache

from conftest import DEMO_CLASSES, require_lib

BS = 16


def _batches(store, n=None, **kw):
    kw.setdefault("threads", 2)
    out = []
    with dlcache.Loader(str(store), BS, seed=7, crop=48, random_resized_crop=True,
                        as_dict=True, **kw) as ld:
        for i, b in enumerate(ld):
            out.append({k: v.clone() for k, v in b.items()})
            if n is not None and i + 1 >= n:
                break
    return out


def test_bfloat16_is_float32_rounded(store):
    """bf16 == torch's float32 output .to(torch.bfloat16), bit for bit."""
    f32 = _batches(store, 3, dtype="float32")
    bf = _batches(store, 3, dtype="bfloat16")
    for a, b in zip(f32, bf):
        assert b["image"].dtype == torch.bfloat16
        want = a["image"].to(torch.bfloat16)
        assert torch.equal(want.view(torch.int16), b["image"].view(torch.int16))


def test_bfloat16_tuple_and_torch_dtype(store):
    with dlcache.Loader(str(store), BS, crop=32, dtype=torch.bfloat16, threads=1) as ld:
        x, y = next(iter(ld))
        assert x.dtype == torch.bfloat16 and x.shape == (BS, 3, 32, 32)


def _run(store, epochs=1, n=None, **kw):
    """Batches (dicts of clones) of the first @p epochs epochs, at most @p n per epoch."""
    kw.setdefault("threads", 2)
    kw.setdefault("crop", 48)
    out = []
    with dlcache.Loader(str(store), BS, seed=7, random_resized_crop=True, as_dict=True,
                        **kw) as ld:
        for e in range(epochs):
            ld.set_epoch(e)
            for i, b in enumerate(ld):
                out.append({k: v.clone() for k, v in b.items()})
                if n is not None and i + 1 >= n:
                    break
        params = [ld.mixup_params(e, i) for e in range(epochs) for i in range(len(ld))]
    return out, params


def _targets(labels, lam, k, smoothing=0.0):
    """timm's mixup_target() in torch, float32."""
    off = smoothing / k
    on = 1.0 - smoothing + off
    y1 = torch.full((len(labels), k), off, dtype=torch.float32)
    y1.scatter_(1, labels.view(-1, 1), on)
    y2 = y1.flip(0)
    return y1 * lam + y2 * (1.0 - lam)


@pytest.mark.parametrize("kw", [dict(mixup=0.8), dict(cutmix=1.0),
                                dict(mixup=0.8, cutmix=1.0, switch_prob=0.5, mix_prob=0.7)])
def test_mix_equals_timm_on_the_plain_batch(store, kw):
    """Images: lam * x + (1 - lam) * x.flip(0) (MixUp) or the partner's box pasted (CutMix),
    from the unmixed run's batch; targets: timm's mixup_target with label smoothing."""
    plain, _ = _run(store, dtype="float32")
    mixed, params = _run(store, dtype="float32", label_smoothing=0.1, **kw)
    assert len(plain) == len(mixed)
    modes = set()
    for i, (a, b) in enumerate(zip(plain, mixed)):
        p = params[i]
        modes.add(p["mode"])
        x = a["image"]
        lam = p["lam"]
        if p["mode"] == "mixup":
            want = x * lam + x.flip(0) * (1.0 - lam)
        elif p["mode"] == "cutmix":
            yl, yh, xl, xh = p["box"]
            assert lam == pytest.approx(1 - (yh - yl) * (xh - xl) / (48 * 48), abs=1e-12)
            want = x.clone()
            want[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            assert lam == 1.0
            want = x
        assert torch.equal(want, b["image"]), (i, p)
        t = b["label"]
        assert t.dtype == torch.float32 and t.shape == (len(x), DEMO_CLASSES)
        assert torch.allclose(t.sum(1), torch.ones(len(x)), atol=1e-6)
        assert torch.equal(t, _targets(a["label"], lam, DEMO_CLASSES, 0.1))
    if "mix_prob" not in kw:
        assert modes - {"none"}


@pytest.mark.parametrize("dtype,tdtype", [("float16", torch.float16),
                                          ("bfloat16", torch.bfloat16)])
def test_mix_16bit_equals_torch(store, dtype, tdtype):
    """On float16 / bfloat16 each product (with lam as a float32) and the sum round to the type,
    as torch's CUDA kernels compute x.mul_(lam).add_(x.flip(0).mul_(1 - lam)) on such tensors
    (torch's CPU kernels round lam itself to the type first)."""
    plain, _ = _run(store, n=3, dtype=dtype)
    mixed, params = _run(store, n=3, dtype=dtype, mixup=0.4)
    for i, (a, b) in enumerate(zip(plain, mixed)):
        x, lam = a["image"], params[i]["lam"]
        assert x.dtype == tdtype
        f = x.float()
        want = ((f * lam).to(tdtype).float() + (f.flip(0) * (1.0 - lam)).to(tdtype).float())
        want = want.to(tdtype)
        assert torch.equal(want.view(torch.int16), b["image"].view(torch.int16)), i


def test_mix_bytes_do_not_depend_on_threads_or_prefetch(store):
    a, _ = _run(store, epochs=2, dtype="float16", mixup=0.8, cutmix=1.0, threads=1,
                prefetch=1)
    b, _ = _run(store, epochs=2, dtype="float16", mixup=0.8, cutmix=1.0, threads=2,
                prefetch=5)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x["image"].view(torch.int16), y["image"].view(torch.int16))
        assert torch.equal(x["label"], y["label"])


def test_mix_resume_mid_epoch_is_exact(store):
    kw = dict(crop=40, random_resized_crop=True, dtype="float32", mixup=0.8, cutmix=1.0,
              label_smoothing=0.1, threads=2, seed=3)
    with dlcache.Loader(str(store), BS, **kw) as ld:
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        next(it)
        state = ld.state_dict()
        rest = [(x.clone(), y.clone()) for x, y in it]
    with dlcache.Loader(str(store), BS, **kw) as ld:
        ld.load_state_dict(state)
        again = [(x.clone(), y.clone()) for x, y in ld]
    assert len(rest) == len(again) > 0
    for (x, y), (u, v) in zip(rest, again):
        assert torch.equal(x, u) and torch.equal(y, v)
        assert y.shape[1] == DEMO_CLASSES


def test_mix_refusals(store):
    with pytest.raises(ValueError, match="uint8"):
        dlcache.Loader(str(store), BS, crop=32, mixup=0.2)
    with pytest.raises(ValueError, match="switch_prob"):
        dlcache.Loader(str(store), BS, crop=32, dtype="float32", cutmix=1.0, switch_prob=2)
    with pytest.raises(ValueError, match="num_classes"):
        dlcache.Loader(str(store), BS, crop=32, dtype="float32", num_classes=10)
    with pytest.raises(ValueError, match="num_classes"):
        dlcache.Loader(str(store), BS, crop=32, dtype="float32", mixup=0.2, num_classes=1)


def test_label_smoothing_alone_and_num_classes(store):
    """Soft targets without mixing: the smoothed one-hot; num_classes widens them."""
    plain, _ = _run(store, n=2, dtype="float32")
    soft, _ = _run(store, n=2, dtype="float32", label_smoothing=0.1, num_classes=8)
    for a, b in zip(plain, soft):
        assert torch.equal(a["image"], b["image"])
        assert torch.equal(b["label"], _targets(a["label"], 1.0, 8, 0.1))


def test_label_outside_num_classes_is_named(store):
    with dlcache.Loader(str(store), BS, crop=32, dtype="float32", mixup=0.2, num_classes=2,
                        threads=1) as ld:
        with pytest.raises(Exception, match="record .*label .* outside 0..1"):
            for _ in ld:
                pass


# ---- progressive resizing --------------------------------------------------------------------

def _shapes(store, epochs, **kw):
    out = []
    with dlcache.Loader(str(store), BS, seed=1, random_resized_crop=True, dtype="float32",
                        threads=2, **kw) as ld:
        for e in range(epochs):
            out.append([tuple(x.shape[2:]) for x, _ in ld])
    return out


def test_resolution_list_and_function(store):
    got = _shapes(store, 4, resolution=[32, 40, (48, 40)])
    assert [s[0] for s in got] == [(32, 32), (40, 40), (48, 40), (48, 40)]
    assert all(len(set(s)) == 1 for s in got)
    # FFCV's linear ramp, as a function of the epoch (here 32 -> 48 over 3 epochs).
    ramp = lambda e: 32 + 8 * min(e, 2)  # noqa: E731
    got = _shapes(store, 3, resolution=ramp, max_resolution=48)
    assert [s[0] for s in got] == [(32, 32), (40, 40), (48, 48)]
    with pytest.raises(ValueError, match="max_resolution"):
        dlcache.Loader(str(store), BS, resolution=ramp)


def test_resized_epoch_equals_a_loader_opened_at_that_size(store):
    """Epoch 1 at 40x40 after an epoch at 32: the bytes of a Loader opened with crop=40."""
    with dlcache.Loader(str(store), BS, seed=1, random_resized_crop=True, dtype="float32",
                        threads=2, crop=32, max_resolution=48) as ld:
        for _ in ld:
            pass
        ld.set_resolution(40, 40)
        ld.set_epoch(1)
        resized = [x.clone() for x, _ in ld]
    with dlcache.Loader(str(store), BS, seed=1, random_resized_crop=True, dtype="float32",
                        threads=2, crop=40) as ld:
        ld.set_epoch(1)
        plain = [x.clone() for x, _ in ld]
    assert len(resized) == len(plain)
    for a, b in zip(resized, plain):
        assert torch.equal(a, b)


def test_resolution_resume_mid_epoch(store):
    kw = dict(seed=2, random_resized_crop=True, dtype="bfloat16", threads=2,
              resolution=[32, 40, 48], mixup=0.5, cutmix=1.0)
    with dlcache.Loader(str(store), BS, **kw) as ld:
        for _ in ld:
            pass
        it = iter(ld)  # epoch 1, at 40
        next(it)
        state = ld.state_dict()
        rest = [x.clone() for x, _ in it]
        nxt = [x.clone() for x, _ in ld]  # epoch 2, at 48
    assert state["resolution"] == (40, 40)
    with dlcache.Loader(str(store), BS, **kw) as ld:
        ld.load_state_dict(state)
        again = [x.clone() for x, _ in ld]
        after = [x.clone() for x, _ in ld]
    assert [tuple(x.shape[2:]) for x in again] == [(40, 40)] * len(rest)
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(rest, again))
    assert [tuple(x.shape[2:]) for x in after] == [(48, 48)] * len(nxt)
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(nxt, after))


def test_a_resumed_resolution_is_checked(store):
    """state_dict['resolution'] went to C as it was: (2**32 + 16, 16) resumed at 16 x 16 while
    .resolution said 4294967312 x 16, (16.7, 16.2) was cut, and ('a', 'b') raised a bare
    ValueError of int(). Each is refused naming the field, the Loader unchanged."""
    with dlcache.Loader(str(store), BS, crop=32, max_resolution=48, threads=1) as ld:
        next(iter(ld))
        state = ld.state_dict()
    with dlcache.Loader(str(store), BS, crop=32, max_resolution=48, threads=1) as ld:
        for bad in ((2**32 + 16, 16), (16.7, 16.2), ("a", "b"), (16,), "16"):
            with pytest.raises(ValueError, match=r"state_dict\['resolution'\]"):
                ld.load_state_dict(dict(state, resolution=bad))
            assert ld.resolution == (32, 32)
        with pytest.raises(ValueError, match=r"state_dict\['next_resolution'\]"):
            ld.load_state_dict(dict(state, next_resolution=(0, 8)))
        ld.load_state_dict(dict(state, resolution=[24, 24]))
        assert ld.resolution == (24, 24) and next(iter(ld))[0].shape[1:3] == (24, 24)


def test_resolution_refusals(store):
    # Integers only: "48" was unpacked as ("4", "8"), 32.7 cut to 32.
    for bad in ("48", [(32.7, 40.9)], [32.5]):
        with pytest.raises(ValueError, match="resolution"):
            dlcache.Loader(str(store), BS, crop=32, threads=1, resolution=bad)
    with dlcache.Loader(str(store), BS, crop=32, threads=1) as ld:
        with pytest.raises(ValueError, match="max_resolution"):
            ld.set_resolution(40, 40)
    with dlcache.Loader(str(store), BS, crop=32, max_resolution=40, threads=1) as ld:
        with pytest.raises(Exception, match="1..40"):
            ld.set_resolution(48, 48)
    # The ops were checked at open against the largest size only: a blur kernel too large for
    # a smaller epoch failed at that epoch's first record. A list is checked whole at open,
    # set_resolution() when it is called.
    blur = {"kernel_size": 23, "p": 1.0}
    for schedule in ([32, 8], [8, 32]):
        with pytest.raises(dlcache.InvalidArgumentError,
                           match=r"resolution 8x8: field \"image\": blur kernel_size 23"):
            dlcache.Loader(str(store), BS, crop=32, threads=1, resolution=schedule, blur=blur)
    with dlcache.Loader(str(store), BS, crop=32, max_resolution=32, threads=1, blur=blur) as ld:
        ld.set_resolution(24, 24)
        with pytest.raises(dlcache.InvalidArgumentError, match="blur kernel_size 23"):
            ld.set_resolution(10, 20)
        sizes = [{tuple(b[0].shape[1:3]) for b in ld} for _ in range(2)]
        assert sizes == [{(32, 32)}, {(24, 24)}], "the refused size changed nothing"


# ---- device path (needs a GPU and the CUDA plugin; skipped here otherwise) -------------------

CUDA = torch.cuda.is_available()


@pytest.mark.skipif(not CUDA, reason="torch.cuda.is_available() is False: no GPU to run the "
                    "device path's conversion and mixing kernels on")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("backend", [None, "torch"])
def test_device_mix_and_bfloat16_equal_the_host(store, dtype, backend, monkeypatch):
    """The plugin's kernels (the default backend where it is built) and the torch backend."""
    from dlcache import _device
    if backend is not None:
        monkeypatch.setenv(_device.BACKEND_ENV, backend)
    kw = dict(dtype=dtype, mixup=0.8, cutmix=1.0, label_smoothing=0.1, threads=2)
    host, _ = _run(store, epochs=2, **kw)
    dev, _ = _run(store, epochs=2, device="cuda", **kw)
    assert len(host) == len(dev)
    for a, b in zip(host, dev):
        for k in a:
            x, y = a[k], b[k].cpu()
            if x.is_floating_point() and x.element_size() == 2:
                x, y = x.view(torch.int16), y.view(torch.int16)
            assert torch.equal(x, y), k


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_mix_equals_the_c_loader(store, dtype):
    """The torch backend's mixing (_batchaug.torch_mix, run on the GPU there) on the unmixed
    batches, with the draws of dlc_mixup_draw(), gives the C loader's mixed batches and targets
    bit for bit (here on the CPU: the same float32 operations)."""
    from dlcache import _batchaug
    mix = dict(mixup=0.8, cutmix=1.0, mix_prob=1.0, switch_prob=0.5)
    plain, _ = _run(store, epochs=2, dtype=dtype)
    mixed, params = _run(store, epochs=2, dtype=dtype, label_smoothing=0.1, **mix)
    per_epoch = len(plain) // 2
    for i, (a, b) in enumerate(zip(plain, mixed)):
        p = _batchaug.draw(mix, 7, i // per_epoch, 0, 1, i % per_epoch, 48, 48)
        assert p == params[i]
        x = a["image"].clone()
        t = _batchaug.torch_mix([x], a["label"], p, DEMO_CLASSES, 0.1)
        assert torch.equal(t, b["label"]), i
        if x.element_size() == 2:
            x, y = x.view(torch.int16), b["image"].view(torch.int16)
        else:
            y = b["image"]
        assert torch.equal(x, y), (i, p)


def test_torch_backend_mix_glue(store):
    """TorchFeed._mix_batch (the torch device backend, run on the GPU there) on a host run's
    unmixed outputs: the C loader's mixed batch and targets (on the CPU here)."""
    import types

    from dlcache import _device
    opts = dict(mixup=0.8, cutmix=1.0, mix_prob=1.0, switch_prob=0.5, smoothing=0.1, classes=0)
    plain, _ = _run(store, n=4, dtype="float16")
    mixed, _ = _run(store, n=4, dtype="float16", mixup=0.8, cutmix=1.0, label_smoothing=0.1)
    feed = types.SimpleNamespace(mix=(opts, DEMO_CLASSES, 1, lambda: (7, 0, 1)))
    for i, (a, b) in enumerate(zip(plain, mixed)):
        names = list(a)  # image, label: the schema's order (fields 0 and 1)
        assert names == ["image", "label"]
        done = [(k, a[k].clone(), None, None) for k in names]
        raw = [(k, 0, k == "image", None, None, None) for k in names]
        batch = types.SimpleNamespace(epoch=0, batch_index=i,
                                      fields=[types.SimpleNamespace(field=0),
                                              types.SimpleNamespace(field=1)])
        out = dict((n, t) for n, t, _, _ in _device.TorchFeed._mix_batch(feed, batch, raw, done))
        assert torch.equal(out["label"], b["label"])
        assert torch.equal(out["image"].view(torch.int16), b["image"].view(torch.int16))

"""Loader(device="cuda"): batches as CUDA tensors, through the C library's CUDA plugin or
torch's own CUDA runtime, equal byte for byte to the host path's batches.

Everywhere: a CUDA device without CUDA in torch is a clear error before anything is opened,
"cpu" is the host path, and dlc_cuda_probe() explains why the plugin cannot run (naming
$DLCACHE_CUDA_PLUGIN's path when that is the reason). On a machine with a GPU: every dtype,
memory format and augmentation against the host path, a store of many fields, view groups,
a non-default stream, delays injected on the stream to shake out races, kept batches, and
tensors that outlive their Loader."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import DEMO_COUNT, REPO, require_lib

require_lib("dlc_loader_open", "dlc_build")

import dlcache  # noqa: E402
from dlcache import _device  # noqa: E402
from dlcache import _lib as L  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="torch.cuda.is_available() is False: "
                                "the CUDA tests run on a machine with a GPU")
HAVE_PROBE = L.lib.has("dlc_cuda_probe")
needs_probe = pytest.mark.skipif(not HAVE_PROBE, reason="this libdlcache does not export "
                                 "dlc_cuda_probe (the device path is not built in yet)")


# ---------------------------------------------------------------- everywhere
@pytest.mark.skipif(CUDA, reason="torch has CUDA here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_clear_error(store, tmp_path, device):
    with pytest.raises(ValueError, match=r"torch\.cuda\.is_available\(\)") as e:
        dlcache.Loader(store, 16, crop=8, device=device)
    assert "device='cpu'" in str(e.value)
    # Before anything is opened: a store that does not exist is not even looked at.
    with pytest.raises(ValueError, match=r"torch\.cuda\.is_available\(\)"):
        dlcache.Loader(tmp_path / "missing.dlc", 16, device=torch.device(device))


@pytest.mark.parametrize("device", ["tpu", "cuda:x", 3.5, "meta"])
def test_bad_device_names_the_argument(store, device):
    with pytest.raises(ValueError, match="device"):
        dlcache.Loader(store, 16, crop=8, device=device)


def test_cpu_device_is_the_host_path(store):
    kw = dict(batch_size=32, crop=16, seed=4, threads=2, return_indices=True)
    ref = []
    with dlcache.Loader(store, **kw) as ld:
        assert ld.device_backend is None and ld.device == torch.device("cpu")
        for b in ld:
            ref.append(tuple(t.clone() for t in b))
    for device in ("cpu", torch.device("cpu")):
        with dlcache.Loader(store, device=device, **kw) as ld:
            assert ld.device_backend is None and "device=" not in repr(ld)
            got = [tuple(t.clone() for t in b) for b in ld]
            s = ld.stats()
        assert len(got) == len(ref)
        for a, b in zip(ref, got):
            assert all(not y.is_cuda and torch.equal(x, y) for x, y in zip(a, b))
        assert s["device"] == -1 and s["device_bytes"] == 0 and s["device_copy_seconds"] == 0
        assert s["device_backend"] is None and s["samples"] == DEMO_COUNT


def test_memory_format_arguments(store):
    for mf in ("sideways", torch.preserve_format, 1):
        with pytest.raises(ValueError, match="memory_format"):
            dlcache.Loader(store, 8, crop=8, memory_format=mf)
    # Host float batches are NCHW only.
    with pytest.raises(ValueError, match="channels_last.*CUDA"):
        dlcache.Loader(store, 8, crop=8, dtype="float32", memory_format=torch.channels_last)
    # uint8 images are NHWC whatever the memory format; contiguous_format is the default.
    for kw in (dict(memory_format=torch.channels_last), dict(dtype="float16",
               memory_format=torch.contiguous_format), dict(memory_format="channels_last")):
        with dlcache.Loader(store, 8, crop=8, threads=1, **kw) as ld:
            x, _ = next(iter(ld))
            assert x.shape == ((8, 8, 8, 3) if x.dtype == torch.uint8 else (8, 3, 8, 8))


def test_backend_environment_variable(monkeypatch):
    monkeypatch.setenv(_device.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match=_device.BACKEND_ENV):
        _device.choose_backend(0)
    monkeypatch.setenv(_device.BACKEND_ENV, "torch")
    assert _device.choose_backend(0) == ("torch", "%s=torch" % _device.BACKEND_ENV)
    monkeypatch.setenv(_device.BACKEND_ENV, "plugin")
    why = _device.probe(0)
    if why is None:
        assert _device.choose_backend(0) == ("plugin", None)
    else:
        # Forced but unavailable: an error that says why.
        with pytest.raises(RuntimeError, match="plugin") as e:
            _device.choose_backend(0)
        assert why in str(e.value)


@needs_probe
def test_probe_says_why_not_here():
    why = ctypes_probe(0)
    if CUDA and why[0] == 0:
        pytest.skip("the CUDA plugin runs here")
    rc, reason = why
    assert rc != 0 and reason.strip(), (rc, reason)
    assert _device.probe(0) == reason
    # No GPU of that ordinal.
    assert ctypes_probe(4095)[0] != 0


@needs_probe
def test_probe_names_the_plugin_path_it_was_given(tmp_path):
    """$DLCACHE_CUDA_PLUGIN points the library at a plugin; one that is not there is the
    reason, named. A fresh process: the plugin is looked for once per process."""
    missing = str(tmp_path / "nonexistent" / "libdlcache_cuda.so")
    code = ("import sys; sys.path.insert(0, %r); from dlcache import _lib as L; import ctypes; "
            "b = ctypes.create_string_buffer(1024); rc = L.lib.dlc_cuda_probe(0, b, 1024); "
            "print(rc); print(b.value.decode())" % os.path.join(REPO, "python"))
    env = dict(os.environ, DLCACHE_CUDA_PLUGIN=missing, DLCACHE_LIB=L.lib.path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rc, reason = r.stdout.split("\n", 1)
    assert int(rc) != 0 and missing in reason, r.stdout


@pytest.mark.skipif(not L.lib.has("dlc_loader_host_slots"), reason="no dlc_loader_host_slots")
def test_host_slots_are_whole_pages(store):
    """What the torch backend page-locks: one block per slot, page-aligned whole pages, so
    that registering one never touches memory of another."""
    import ctypes
    with dlcache.Loader(store, 8, crop=8, threads=1, prefetch=3) as ld:
        ptr = ld._handle.ptr
        n = L.lib.dlc_loader_host_slots(ptr, None, None, 0)
        assert n == 4  # prefetch, plus the slot of the batch held over
        bases, sizes = (ctypes.c_void_p * n)(), (ctypes.c_size_t * n)()
        assert L.lib.dlc_loader_host_slots(ptr, bases, sizes, n) == n
        spans = sorted((bases[k], bases[k] + sizes[k]) for k in range(n))
        assert all(b % 4096 == 0 and (e - b) % 4096 == 0 and e > b for b, e in spans)
        assert all(spans[k][1] <= spans[k + 1][0] for k in range(n - 1))
        x, _ = next(iter(ld))
        assert any(b <= x.data_ptr() < e for b, e in spans), "batches live in the slots"


def ctypes_probe(device):
    import ctypes
    buf = ctypes.create_string_buffer(1024)
    rc = L.lib.dlc_cuda_probe(device, buf, len(buf))
    return rc, buf.value.decode("utf-8", "replace")


# ---------------------------------------------------------------- on a GPU
def _backends():
    out = []
    for b in ("plugin", "torch"):
        out.append(pytest.param(b, marks=needs_cuda))
    return out


@pytest.fixture(params=_backends())
def backend(request, monkeypatch):
    name = request.param
    if name == "plugin":
        why = _device.probe(torch.cuda.current_device())
        if why is not None:
            pytest.skip("the CUDA plugin cannot run here: %s" % why)
    monkeypatch.setenv(_device.BACKEND_ENV, name)
    return name


_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.float64: torch.int64}
if hasattr(torch, "uint16"):
    _BITS[torch.uint16] = torch.int16


def bits(t):
    """Compare floats by their bits (0 ulp, -0.0 is not 0.0) and uint16 where torch has no
    equality for it."""
    return t.view(_BITS[t.dtype]) if t.dtype in _BITS else t


def assert_same_tensor(host, dev, what):
    assert dev.is_cuda and dev.device.index == torch.cuda.current_device(), what
    assert dev.dtype == host.dtype and dev.shape == host.shape, \
        (what, dev.dtype, host.dtype, dev.shape, host.shape)
    assert torch.equal(bits(host).to(dev.device), bits(dev)), what


def assert_same_batches(host, dev):
    assert len(host) == len(dev), (len(host), len(dev))
    for k, (h, d) in enumerate(zip(host, dev)):
        if isinstance(h, dict):
            assert isinstance(d, dict) and list(h) == list(d), (k, list(h), list(d))
            for name in h:
                assert_same_tensor(h[name], d[name], "batch %d %s" % (k, name))
        else:
            assert isinstance(d, tuple) and len(h) == len(d)
            for i, (a, b) in enumerate(zip(h, d)):
                assert_same_tensor(a, b, "batch %d output %d" % (k, i))


def clone(b):
    if isinstance(b, dict):
        return {k: t.clone() for k, t in b.items()}
    return tuple(t.clone() for t in b)


def host_batches(path, **kw):
    kw.pop("memory_format", None)
    with dlcache.Loader(path, **kw) as ld:
        return [clone(b) for b in ld]


def check_layout(b, memory_format):
    """Float images in the chosen memory format, everything else contiguous."""
    items = b.items() if isinstance(b, dict) else enumerate(b)
    for _, t in items:
        if t.is_floating_point() and t.dim() in (4, 5) and t.shape[-3] in (1, 3, 4):
            if memory_format == torch.channels_last:
                nhwc = t.permute(0, 2, 3, 1) if t.dim() == 4 else t.permute(0, 1, 3, 4, 2)
                assert nhwc.is_contiguous()
                if t.dim() == 4:
                    assert t.is_contiguous(memory_format=torch.channels_last)
            else:
                assert t.is_contiguous()
        elif t.dim() and t.numel():
            assert t.is_contiguous()


KW = dict(batch_size=16, crop=24, seed=3, threads=2, return_indices=True, prefetch=2)


@pytest.mark.parametrize("rrc", [None, True])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_device_equals_host(store, backend, dtype, memory_format, rrc):
    kw = dict(KW, dtype=dtype, random_resized_crop=rrc, memory_format=memory_format)
    ref = host_batches(store, **kw)
    with dlcache.Loader(store, device="cuda", **kw) as ld:
        assert ld.device_backend == backend and "(%s)" % backend in repr(ld)
        got = []
        for b in ld:
            check_layout(b, memory_format)
            got.append(b)
        s = ld.stats()
    assert_same_batches(ref, got)
    img = got[0][0]
    if dtype == "uint8":
        assert img.shape == (16, 24, 24, 3)
    else:
        assert img.shape == (16, 3, 24, 24)
    assert s["device"] == torch.cuda.current_device() and s["device_bytes"] > 0
    assert s["device_backend"] == backend and s["samples"] == DEMO_COUNT


def test_mean_std_and_a_second_epoch(store, backend):
    kw = dict(KW, dtype="float32", mean=(0.1, 0.9, 0.5), std=(0.3, 0.07, 1.1), flip=0.7)
    with dlcache.Loader(store, **kw) as ld:
        ref = [clone(b) for _ in range(2) for b in ld]
    with dlcache.Loader(store, device=torch.device("cuda"), **kw) as ld:
        got = [b for _ in range(2) for b in ld]
    assert_same_batches(ref, got)


# A store of many fields: images of 1, 3 and 4 channels, a mask, boxes with their classes,
# variable and fixed arrays (uint16 too), scalars, bytes, the label.
FH, FW, FN = 20, 18, 40


def field_sample(i):
    rng = np.random.default_rng(500 + i)
    nb = int(rng.integers(0, 4))
    x0 = rng.uniform(0, FW / 2, nb)
    y0 = rng.uniform(0, FH / 2, nb)
    return {
        "rgb": rng.integers(0, 256, (FH, FW, 3), dtype=np.uint8),
        "gray": rng.integers(0, 256, (FH, FW, 1), dtype=np.uint8),
        "rgba": rng.integers(0, 256, (FH, FW, 4), dtype=np.uint8),
        "mask": rng.integers(0, 21, (FH, FW), dtype=np.uint8),
        "boxes": np.stack([x0, y0, x0 + rng.uniform(1, FW / 2 - 1, nb),
                           y0 + rng.uniform(1, FH / 2 - 1, nb)], axis=1).astype(np.float32),
        "box_classes": rng.integers(0, 80, nb).astype(np.int32),
        "tokens": rng.integers(0, 50000, int(rng.integers(0, 7))).astype(np.int32),
        "u16": rng.integers(0, 65536, (int(rng.integers(0, 5)), 2)).astype(np.uint16),
        "fixed": rng.normal(size=(2, 3)).astype(np.float64),
        "label": i % 3,
        "count": int(rng.integers(-2**40, 2**40)),
        "weight": float(rng.normal()),
        "blob": rng.bytes(int(rng.integers(0, 20))),
    }


FIELDS = {
    "rgb": {"kind": "image"}, "gray": {"kind": "image"}, "rgba": {"kind": "image"},
    "mask": "mask", "boxes": {"kind": "boxes", "classes": "box_classes"},
    "tokens": "ndarray", "u16": "ndarray", "fixed": "ndarray",
}


@pytest.fixture(scope="module")
def field_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fields") / "fields.dlc"
    dlcache.write([field_sample(i) for i in range(FN)], path, fields=FIELDS, progress=False)
    return path


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_every_field_equals_host(field_store, backend, dtype, memory_format):
    kw = dict(batch_size=7, crop=(12, 10), seed=1, threads=2, return_indices=True,
              random_resized_crop=True, dtype=dtype, memory_format=memory_format,
              variable={"tokens": "offsets", "boxes": ("pad_to", 2)})
    if dtype != "uint8":
        kw.update(mean=(0.2, 0.4, 0.6, 0.8), std=(0.3, 0.2, 0.1, 0.4))
    ref = host_batches(field_store, **kw)
    with dlcache.Loader(field_store, device="cuda", **kw) as ld:
        got = list(ld)
    assert_same_batches(ref, got)
    names = set(got[0])
    assert {"rgb", "gray", "rgba", "mask", "boxes", "boxes_lengths", "box_classes",
            "tokens", "tokens_offsets", "u16", "u16_lengths", "fixed", "label", "count",
            "weight", "blob", "blob_offsets", "indices"} <= names
    for b in got:
        check_layout(b, memory_format)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_view_groups_equal_host(field_store, backend, memory_format):
    kw = dict(batch_size=8, seed=2, threads=2, dtype="float16", memory_format=memory_format,
              fields=["rgb", "gray", "mask", "label"],
              views=[{"name": "g", "count": 2, "crop": 12, "scale": (0.4, 1.0)},
                     {"name": "l", "count": 3, "crop": 6, "scale": (0.1, 0.4)}])
    ref = host_batches(field_store, **kw)
    with dlcache.Loader(field_store, device="cuda", **kw) as ld:
        got = list(ld)
    assert_same_batches(ref, got)
    assert got[0]["rgb_g"].shape == (8, 2, 3, 12, 12)
    assert got[0]["gray_l"].shape == (8, 3, 1, 6, 6)
    for b in got:
        check_layout(b, memory_format)


def test_non_default_stream(store, backend):
    kw = dict(KW, dtype="float32", random_resized_crop=True)
    ref = host_batches(store, **kw)
    s = torch.cuda.Stream()
    with dlcache.Loader(store, device="cuda", **kw) as ld:
        with torch.cuda.stream(s):
            got = []
            for b in ld:
                torch.cuda._sleep(2_000_000)  # the stream is busy: its work must still wait
                got.append(tuple(t * 1 for t in b))  # consumed on s
        s.synchronize()
    assert_same_batches(ref, got)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_delays_on_the_stream_keep_every_batch_right(field_store, backend, dtype):
    """The current stream held back before each batch and after its use (conversions and
    copies late, slots and memory wanted again meanwhile): every batch right, kept ones and
    ones consumed and dropped alike."""
    kw = dict(batch_size=4, crop=12, seed=5, threads=2, prefetch=2, return_indices=True,
              dtype=dtype, random_resized_crop=True, fields=["rgb", "mask", "boxes",
                                                           "box_classes", "label"])
    ref = host_batches(field_store, **kw)
    with dlcache.Loader(field_store, device="cuda", **kw) as ld:
        kept = []
        it = iter(ld)
        while True:
            torch.cuda._sleep(10_000_000)
            try:
                b = next(it)
            except StopIteration:
                break
            kept.append(b)
            torch.cuda._sleep(10_000_000)
        copies = []
        for b in ld:  # the next epoch: consumed (copied on the stream) and dropped
            torch.cuda._sleep(10_000_000)
            copies.append(clone(b))
            del b
    assert_same_batches(ref, kept)
    with dlcache.Loader(field_store, **kw) as ld:
        ld.set_epoch(1)
        ref2 = [clone(b) for b in ld]
    assert_same_batches(ref2, copies)


def test_tensors_outlive_the_loader(store, backend):
    kw = dict(KW, dtype="float16")
    ref = host_batches(store, **kw)[:3]
    ld = dlcache.Loader(store, device="cuda", **kw)
    it = iter(ld)
    got = [next(it) for _ in range(3)]
    ld.close()
    del it, ld
    gc.collect()
    # Memory churn after the close: nothing of the Loader is read any more.
    junk = [torch.full((1 << 20,), 7, dtype=torch.uint8, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    assert_same_batches(ref, got)
    del junk


def test_loaders_made_and_dropped_again_and_again(store, backend):
    """Slots page-locked by the torch backend are let go of before they are freed, by close()
    and by garbage collection alike: the next Loader at the same addresses copies fine."""
    kw = dict(KW, dtype="uint8")
    ref = host_batches(store, **kw)
    for k in range(4):
        ld = dlcache.Loader(store, device="cuda", **kw)
        got = [clone(b) for b in ld]
        if k % 2:
            ld.close()
        del ld
        gc.collect()
        assert_same_batches(ref, got)


def test_pairs_and_set_epoch_mid_epoch(store, backend):
    kw = dict(KW, dtype="float32", return_indices=False)
    with dlcache.Loader(store, **kw) as ld:
        ld.set_epoch(2)
        ref = [clone(b) for b in ld]
    with dlcache.Loader(store, device="cuda", **kw) as ld:
        it = iter(ld)
        next(it)
        next(it)  # abandoned mid-epoch: the slots are refilled under a copy in flight
        ld.set_epoch(2)
        got = list(ld)
    assert all(len(b) == 2 for b in got)
    assert_same_batches(ref, got)


@needs_cuda
def test_torch_backend_says_why_once(store, monkeypatch):
    why = _device.probe(torch.cuda.current_device())
    if why is None:
        pytest.skip("the CUDA plugin runs here")
    monkeypatch.delenv(_device.BACKEND_ENV, raising=False)
    monkeypatch.setattr(_device, "_warned", False)
    with pytest.warns(RuntimeWarning, match="CUDA plugin is not used") as w:
        with dlcache.Loader(store, 8, crop=8, device="cuda") as ld:
            assert ld.device_backend == "torch"
    assert why in str(w[0].message)

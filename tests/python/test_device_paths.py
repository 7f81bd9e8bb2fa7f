"""Loader(device="cuda") on the paths that test_device.py does not take: a store set, a set
streamed from S3 (where s3rver is installed), and next() waits cut into many slices. Each
against the host path's batches byte for byte. Skipped without CUDA; the GPU bundle
(tools/gpu_bundle.sh) runs them on a machine with one."""

import pytest
import torch

from conftest import require_lib

require_lib("dlc_loader_open", "dlc_build")

import dlcache  # noqa: E402
from dlcache import loader as loader_mod  # noqa: E402
from test_device import assert_same_batches, backend, host_batches  # noqa: E402,F401
from test_stream import OPTS, local_set, s3, url  # noqa: E402,F401  (fixtures)

KW = dict(batch_size=16, crop=24, seed=3, threads=2, return_indices=True, prefetch=2)


@pytest.fixture(scope="module")
def set2(demo_dir, tmp_path_factory):
    """demo_dir as a store set of 2 parts."""
    path = tmp_path_factory.mktemp("devset") / "set"
    dlcache.build(str(demo_dir), str(path), size=32, threads=2, shards=2)
    return str(path)


@pytest.mark.parametrize("dtype", ["uint8", "float16"])
def test_store_set_on_the_device_equals_the_host(set2, backend, dtype):
    kw = dict(KW, dtype=dtype, random_resized_crop=True)
    ref = host_batches(set2, **kw)
    with dlcache.Loader(set2, device="cuda", **kw) as ld:
        assert ld.device_backend == backend
        got = list(ld)
        st = ld.stats()
    assert_same_batches(ref, got)
    assert st["device_bytes"] > 0
    # The plugin times its copies with CUDA events on its stream as well as on the host.
    if backend == "plugin":
        assert st["device_copy_event_seconds"] > 0 and st["device_copy_seconds"] > 0
    else:
        assert st["device_copy_event_seconds"] == 0


def test_streamed_set_on_the_device_equals_the_local_host(local_set, url, s3, tmp_path,
                                                          backend):
    kw = {k: v for k, v in OPTS.items()}
    with dlcache.Loader(local_set, sampler="windows", **kw) as ld:
        ref = [tuple(t.clone() for t in b) for b in ld]
    with dlcache.Loader(url, cache_dir=tmp_path / "cache", cache_ranks=1, endpoint=s3,
                        device="cuda", **kw) as ld:
        assert ld.device_backend == backend
        got = list(ld)
    assert_same_batches(ref, got)


def test_sliced_waits_on_the_device_give_the_host_batches(store, backend, monkeypatch):
    """Slices of 1 ms: nearly every next() returns to Python between slices (DLC_AGAIN) before
    its batch is staged; the batches stay the host's, in order, and none is lost or repeated."""
    monkeypatch.setattr(loader_mod, "_SLICE_MS", 1)
    kw = dict(KW, dtype="float16", random_resized_crop=True, threads=1)
    ref = host_batches(store, **kw)
    with dlcache.Loader(store, device="cuda", **kw) as ld:
        got = [b for b in ld]
        st = ld.stats()
    assert_same_batches(ref, got)
    assert st["batches"] == len(ref) and st["device"] == torch.cuda.current_device()

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

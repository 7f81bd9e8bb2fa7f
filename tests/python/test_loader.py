"""dlcache.Loader against a second path to the same bytes: the store's records
read with python3-lmdb (docs/FORMAT.md, format 2: key = index as 8 bytes
big-endian, value = a header with one 32-byte entry per field, "image" then
"label", then the HWC uint8 payload) and crops computed in numpy."""

import io
import math
import struct

import numpy as np
import pytest
import torch

from conftest import DEMO_COUNT, DEMO_CLASSES, STORE_SIZE, require_lib

require_lib("dlc_loader_open", "dlc_build")

import dlcache  # noqa: E402

lmdb = pytest.importorskip("lmdb")

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


@pytest.fixture(scope="session")
def records(store):
    """(images uint8 [N, H, W, 3], labels int64 [N]) read with python3-lmdb."""
    env = lmdb.open(str(store), subdir=False, readonly=True, lock=False, max_dbs=4)
    try:
        db = env.open_db(b"samples", create=False)
        imgs, labels = [], []
        with env.begin(db=db) as txn:
            for i in range(DEMO_COUNT):
                v = txn.get(i.to_bytes(8, "big"))
                assert v is not None, "record %d missing" % i
                v = bytes(v)
                magic, _, nf, index = struct.unpack_from("<IHHQ", v)
                assert (magic, nf, index) == (0x32524C44, 2, i), "record %d header" % i
                off, size, h, w, _ = struct.unpack_from("<QQIIQ", v, 16)  # "image"
                label, = struct.unpack_from("<q", v, 16 + 32)             # "label"
                c = 3
                assert (h, w) == (STORE_SIZE, STORE_SIZE) and size == h * w * c
                imgs.append(np.frombuffer(v[off:off + size], dtype=np.uint8).reshape(h, w, c))
                labels.append(label)
    finally:
        env.close()
    return np.stack(imgs), np.array(labels, dtype=np.int64)


def collect(loader, n_batches=None):
    """Clone every batch of one epoch (the loader's tensors are only lent)."""
    out = []
    for k, b in enumerate(loader):
        out.append(tuple(t.clone() for t in b))
        if n_batches is not None and k + 1 == n_batches:
            break
    return out


def cat(batches, i):
    return torch.cat([b[i] for b in batches])


def center(img, c):
    # torchvision CenterCrop offsets.
    top = int(round((img.shape[-3] - c) / 2.0))
    left = int(round((img.shape[-2] - c) / 2.0))
    return img[..., top:top + c, left:left + c, :]


def test_sequential_uint8_equals_records(store, records):
    imgs, labels = records
    with dlcache.Loader(store, batch_size=32, shuffle=False, crop=None, flip=0,
                        random_crop=False, return_indices=True, threads=2) as ld:
        assert len(ld) == (DEMO_COUNT + 31) // 32
        got = collect(ld)
    assert [b[0].shape[0] for b in got] == [32, 32, 32, 32, DEMO_COUNT - 128]
    x, y, idx = cat(got, 0), cat(got, 1), cat(got, 2)
    assert x.dtype == torch.uint8 and x.shape == (DEMO_COUNT, STORE_SIZE, STORE_SIZE, 3)
    assert y.dtype == torch.int64 and idx.dtype == torch.int64
    assert idx.tolist() == list(range(DEMO_COUNT))
    assert np.array_equal(y.numpy(), labels)
    assert np.array_equal(x.numpy(), imgs)


def test_center_crop_and_flip(store, records):
    imgs, _ = records
    c = 40
    with dlcache.Loader(store, 50, shuffle=True, seed=3, crop=c, flip=0, random_crop=False,
                        return_indices=True) as ld:
        b = collect(ld)
    with dlcache.Loader(store, 50, shuffle=True, seed=3, crop=c, flip=1.0, random_crop=False,
                        return_indices=True) as ld:
        f = collect(ld)
    idx = cat(b, 2).numpy()
    assert sorted(idx.tolist()) == list(range(DEMO_COUNT)), "shuffle is a permutation"
    assert idx.tolist() != list(range(DEMO_COUNT))
    want = center(imgs[idx], c)
    assert np.array_equal(cat(b, 0).numpy(), want)
    assert np.array_equal(cat(f, 2).numpy(), idx), "same seed, same order"
    assert np.array_equal(cat(f, 0).numpy(), want[:, :, ::-1, :])


def test_random_crop_is_a_window_of_the_record(store, records):
    imgs, _ = records
    c = 48
    with dlcache.Loader(store, 64, seed=5, crop=c, flip=0, return_indices=True) as ld:
        (x, _, idx), = collect(ld, 1)
    offsets = set()
    for k in range(x.shape[0]):
        src, got = imgs[int(idx[k])], x[k].numpy()
        hits = [(t, l) for t in range(STORE_SIZE - c + 1) for l in range(STORE_SIZE - c + 1)
                if np.array_equal(src[t:t + c, l:l + c], got)]
        assert hits, "sample %d is no %dx%d window of record %d" % (k, c, c, int(idx[k]))
        offsets.add(hits[0])
    assert len(offsets) > 1, "crop windows are random, not all in one place"


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 2e-3)])
def test_float_normalized_nchw(store, records, dtype, tol):
    imgs, _ = records
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    with dlcache.Loader(store, 64, shuffle=False, crop=None, flip=0, random_crop=False,
                        dtype=dtype, mean=mean, std=std) as ld:
        (x, _), = collect(ld, 1)
    assert x.dtype == getattr(torch, dtype) and x.shape == (64, 3, STORE_SIZE, STORE_SIZE)
    ref = (imgs[:64].astype(np.float32) / 255.0 - np.float32(mean)) / np.float32(std)
    ref = ref.transpose(0, 3, 1, 2)
    err = np.abs(x.float().numpy() - ref)
    assert err.max() <= tol * max(1.0, np.abs(ref).max()), "max error %g" % err.max()
    with dlcache.Loader(store, 8, shuffle=False, crop=None, flip=0, random_crop=False,
                        dtype=dtype) as ld:
        (x, _), = collect(ld, 1)
    ref = ((imgs[:8].astype(np.float32) / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2)
    assert np.abs(x.float().numpy() - ref).max() <= tol * 4, "ImageNet mean/std by default"


def test_labels_match_torchvision_imagefolder(store, demo_dir):
    datasets = pytest.importorskip("torchvision.datasets")
    folder = datasets.ImageFolder(str(demo_dir))
    info = dlcache.info(store)
    assert info.classes == folder.classes and info.num_labels == DEMO_CLASSES
    assert info.count == len(folder.samples)
    assert info.label_counts == [folder.targets.count(k) for k in range(DEMO_CLASSES)]
    with dlcache.Loader(store, 37, shuffle=False, crop=16, flip=0) as ld:
        assert ld.num_classes == DEMO_CLASSES and ld.classes == folder.classes
        labels = torch.cat([y.clone() for _, y in ld]).tolist()
    assert labels == folder.targets


def test_rrc_deterministic_and_thread_independent(store):
    kw = dict(batch_size=32, seed=11, crop=32, random_resized_crop=((0.2, 1.0), (0.75, 1.33)),
              dtype="float32")
    with dlcache.Loader(store, threads=1, prefetch=1, **kw) as a, \
            dlcache.Loader(store, threads=2, prefetch=3, **kw) as b:
        xa, xb = collect(a), collect(b)
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(xa, xb))
    assert cat(xa, 0).shape == (DEMO_COUNT, 3, 32, 32)
    assert torch.isfinite(cat(xa, 0)).all()


def test_epochs_len_and_set_epoch(store):
    with dlcache.Loader(store, 40, seed=1, crop=8, return_indices=True) as ld:
        assert len(ld) == 4
        e0 = cat(collect(ld), 2)
        e1 = cat(collect(ld), 2)  # a new iter() after a finished epoch is the next epoch
        assert ld.epoch == 1
        assert sorted(e0.tolist()) == sorted(e1.tolist()) == list(range(DEMO_COUNT))
        assert not torch.equal(e0, e1), "each epoch has its own order"
        ld.set_epoch(0)
        assert torch.equal(cat(collect(ld), 2), e0), "set_epoch(0) repeats epoch 0"
    with dlcache.Loader(store, 40, drop_last=True, crop=8) as ld:
        assert len(ld) == DEMO_COUNT // 40
        assert [x.shape[0] for x, _ in ld] == [40] * (DEMO_COUNT // 40)


def test_batches_are_views_of_the_slots(store):
    """Zero copy: the tensors' memory is the C loader's ring of slots."""
    ptrs = set()
    with dlcache.Loader(store, 10, crop=16, prefetch=2, threads=1) as ld:
        for x, y in ld:
            ptrs.add(x.data_ptr())
    assert len(ld) == DEMO_COUNT // 10
    assert 1 <= len(ptrs) <= 3, "batches come from a small ring of slots, not fresh copies"


def _resume_case(store, kw, k, first_epoch_consumed=True):
    with dlcache.Loader(store, **kw) as full:
        want = collect(full) + collect(full)  # epochs 0 and 1
    with dlcache.Loader(store, **kw) as a:
        it = iter(a)
        got = [tuple(t.clone() for t in next(it)) for _ in range(k)]
        sd = a.state_dict()
        nxt = tuple(t.clone() for t in next(it))  # a continues after saving, unaffected
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    sd = torch.load(buf)
    with dlcache.Loader(store, **dict(kw, seed=999)) as b:  # the state's seed wins
        b.load_state_dict(sd)
        b.set_epoch(0)  # the usual resume loop: keeps the restored position
        rest = collect(b)
        rest += collect(b)  # and the next epoch follows
    assert len(got) + len(rest) == len(want)
    assert all(torch.equal(p, q) for p, q in zip(nxt, rest[0]))
    for n, (p, q) in enumerate(zip(got + rest, want)):
        assert all(torch.equal(s, t) for s, t in zip(p, q)), "batch %d differs" % n


def test_state_dict_round_trip_mid_epoch(store):
    kw = dict(batch_size=16, seed=7, crop=24, random_resized_crop=True, flip=0.5,
              return_indices=True, dtype="float16")
    _resume_case(store, kw, k=3)


def test_state_dict_at_epoch_end_starts_next_epoch(store):
    kw = dict(batch_size=50, seed=2, crop=8, return_indices=True)
    with dlcache.Loader(store, **kw) as full:
        e0, e1 = collect(full), collect(full)
    with dlcache.Loader(store, **kw) as a:
        assert len(collect(a)) == len(e0)
        sd = a.state_dict()
    assert sd["epoch_finished"] and sd["epoch"] == 0
    with dlcache.Loader(store, **kw) as b:
        b.load_state_dict(sd)
        got = collect(b)
    assert len(got) == len(e1)
    assert all(torch.equal(p[2], q[2]) and torch.equal(p[0], q[0]) for p, q in zip(got, e1))


def test_the_resume_loop_does_not_replay_a_finished_epoch(store):
    """docs/tasks/resume.md's loop (`for epoch in range(ckpt["epoch"], E): set_epoch(epoch)`)
    after a checkpoint taken at the end of epoch 0: epoch 0 is an empty pass, epoch 1 the
    uninterrupted run's. Before: set_epoch(0) restarted epoch 0, trained on twice."""
    kw = dict(batch_size=50, seed=2, crop=8, return_indices=True)
    with dlcache.Loader(store, **kw) as full:
        collect(full)
        e1 = collect(full)
    with dlcache.Loader(store, **kw) as a:
        collect(a)
        ckpt = {"loader": a.state_dict(), "epoch": 0}
    with dlcache.Loader(store, **kw) as b:
        b.load_state_dict(ckpt["loader"])
        got = {}
        for epoch in range(ckpt["epoch"], 2):
            b.set_epoch(epoch)
            got[epoch] = collect(b)
            if epoch == 0:
                assert b.state_dict()["epoch_finished"], "still the end of epoch 0"
    assert got[0] == [] and len(got[1]) == len(e1)
    assert all(torch.equal(p[2], q[2]) for p, q in zip(got[1], e1))


def test_rank_world_from_env(store, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with dlcache.Loader(store, 10, crop=8, return_indices=True) as ld:
        assert (ld.rank, ld.world_size) == (1, 3)
        assert len(ld) == math.ceil(math.ceil(DEMO_COUNT / 3) / 10)
        mine = cat(collect(ld), 2)
    with dlcache.Loader(store, 10, crop=8, return_indices=True, rank=0, world_size=1) as ld:
        order = cat(collect(ld), 2)
    padded = torch.cat([order, order[:(-DEMO_COUNT) % 3]])
    assert torch.equal(mine, padded[1::3]), "rank 1 of 3 takes every third position"


def test_stats(store):
    with dlcache.Loader(store, 30, crop=8, threads=2) as ld:
        n = sum(x.shape[0] for x, _ in ld)
        s = ld.stats()
    assert n == DEMO_COUNT and s["samples"] == DEMO_COUNT and s["batches"] == 5
    assert s["threads"] == 2 and s["corrupt_replaced"] == 0


def test_cuda_device_needs_cuda(store, monkeypatch):
    if torch.cuda.is_available():
        monkeypatch.setenv("DLCACHE_DEVICE_BACKEND", "torch")
        with dlcache.Loader(store, 16, crop=8, device="cuda", dtype="float32") as ld:
            x, y = next(iter(ld))
            assert x.is_cuda and y.is_cuda and x.shape == (16, 3, 8, 8)
    else:
        with pytest.raises(ValueError, match="cuda"):
            dlcache.Loader(store, 16, device="cuda:0")


def test_state_dict_into_another_world_size(store):
    """Saved at world size 1 mid-epoch, resumed by two ranks: together they
    deliver exactly the samples not yet seen (plus padding to equal shares)."""
    kw = dict(batch_size=10, seed=9, crop=8, return_indices=True)
    with dlcache.Loader(store, **kw) as a:
        it = iter(a)
        seen = torch.cat([next(it)[2].clone() for _ in range(4)]).tolist()
        sd = a.state_dict()
    rest = []
    for r in range(2):
        with dlcache.Loader(store, rank=r, world_size=2, **kw) as b:
            b.load_state_dict(sd)
            rest.append(torch.cat([idx.clone() for _, _, idx in b]).tolist())
    together = rest[0] + rest[1]
    assert len(rest[0]) == len(rest[1]), "equal shares, like DistributedSampler"
    assert not set(seen) & set(together), "nothing delivered twice across the resume"
    assert set(together) == set(range(DEMO_COUNT)) - set(seen), "each remaining sample"
    assert len(together) - len(set(together)) == (DEMO_COUNT - len(seen)) % 2, "plus padding"

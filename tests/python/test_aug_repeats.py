"""Repeated augmentation (Loader(aug_repeats=N); include/dlcache/loader.h, config.aug_repeats):
the order torchvision's RASampler and timm's RepeatAugSampler make (each record repeated N
times, padded from the start, dealt by stride to the ranks), every copy with its own crop,
len() unchanged, state_dict() exact, and the refusals."""

import numpy as np
import pytest
import torch

from conftest import require_lib

require_lib()

import dlcache  # noqa: E402

N = 50


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("ra") / "ra.dlc"
    samples = [{"image": rng.integers(0, 256, (16, 16, 3), np.uint8), "label": i % 5}
               for i in range(N)]
    dlcache.write(samples, str(path), progress=False)
    return str(path)


def _indices(store, **kw):
    kw.setdefault("seed", 11)
    epoch = kw.pop("epoch", 2)
    with dlcache.Loader(store, 4, crop=8, return_indices=True, threads=2, **kw) as ld:
        ld.set_epoch(epoch)
        return [int(i) for b in ld for i in b[-1]]


def _rasampler(order, reps, world, rank):
    """torchvision's references/classification/sampler.py RASampler.__iter__, given the
    epoch's order in place of its randperm, without its cut to a multiple of 256."""
    n = len(order)
    num_samples = -(-n // world)  # as many as a DistributedSampler's: len() is unchanged
    total = num_samples * world
    idx = [e for e in order for _ in range(reps)]
    idx += idx[:total - len(idx)]
    return idx[rank:len(idx):world][:num_samples]


@pytest.mark.parametrize("reps", [2, 3, 4])
def test_the_order_is_rasamplers(store, reps):
    order = _indices(store)
    assert sorted(order) == list(range(N))
    for world in (1, 2, 4):
        for rank in range(world):
            got = _indices(store, aug_repeats=reps, world_size=world, rank=rank)
            assert got == _rasampler(order, reps, world, rank), (reps, world, rank)
    whole = _indices(store, aug_repeats=reps)
    assert len(set(whole)) == -(-N // reps), "an epoch reads N / reps distinct records"
    assert set(_indices(store, aug_repeats=reps, epoch=3)) != set(whole), "a new subset"


def test_each_copy_draws_its_own_crop(store):
    with dlcache.Loader(store, 12, crop=8, random_resized_crop=True, return_indices=True,
                        aug_repeats=3, seed=1, threads=2) as ld:
        images, _, idx = next(iter(ld))
    assert len(ld) == -(-N // 12), "len() is the plain loader's"
    same = 0
    for k in range(0, 12, 3):
        assert idx[k] == idx[k + 1] == idx[k + 2]
        same += torch.equal(images[k], images[k + 1]) + torch.equal(images[k + 1], images[k + 2])
    assert same == 0, "copies of a record got the same crop"


def test_state_dict_resumes_exactly_and_names_a_changed_count(store):
    kw = dict(crop=8, random_resized_crop=True, return_indices=True, aug_repeats=3, seed=5,
              threads=2)
    with dlcache.Loader(store, 4, **kw) as ld:
        it = iter(ld)
        for _ in range(5):
            next(it)
        sd = ld.state_dict()
        rest = [(b[0].clone(), b[2].clone()) for b in it]
    assert sd["aug_repeats"] == 3
    with dlcache.Loader(store, 4, **kw) as ld:
        ld.load_state_dict(sd)
        again = [(b[0].clone(), b[2].clone()) for b in ld]
    assert len(again) == len(rest) > 0
    for (a, i), (b, j) in zip(rest, again):
        assert torch.equal(a, b) and torch.equal(i, j)
    for other in (None, 2):
        with dlcache.Loader(store, 4, **dict(kw, aug_repeats=other)) as ld:
            with pytest.raises(ValueError, match="saved with aug_repeats = 3, this loader has %d"
                               % (other or 1)):
                ld.load_state_dict(sd)


def test_refusals(store):
    for bad, match in ((0, r"aug_repeats must be in \[1, 256\], got 0"),
                       (257, r"aug_repeats must be in \[1, 256\], got 257"),
                       (True, "aug_repeats must be an integer"),
                       (2.0, "aug_repeats must be an integer")):
        with pytest.raises(ValueError, match=match):
            dlcache.Loader(store, 4, crop=8, aug_repeats=bad)
    with pytest.raises(ValueError, match="aug_repeats = 2: repeated augmentation does not apply "
                       "to a mixture"):
        dlcache.Loader([store, store], 4, crop=8, aug_repeats=2)
    # 1 is off: the plain order, and a state the plain loader takes.
    assert _indices(store, aug_repeats=1) == _indices(store)

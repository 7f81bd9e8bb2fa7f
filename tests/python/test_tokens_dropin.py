"""The token loader (Loader(path, B, seq_len=S)) where a torch DataLoader goes, as the image
Loader is there: pickling (a copy re-opens from the arguments and continues from the state), the
attributes frameworks read, the iteration protocol (epochs, stale iterators, resume), stats,
repr, close and `with`; and CUDA batches equal to the host ones where a GPU is."""
import copy
import pickle

import numpy as np
import pytest

from conftest import HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402
from dlcache.tokens import TokenLoader  # noqa: E402

KW = dict(seq_len=16, seed=5, document_mask=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(11)
    docs = [rng.integers(1, 30000, size=int(rng.integers(1, 70))) for _ in range(120)]
    path = tmp_path_factory.mktemp("tokdrop") / "c.dlc"
    dlcache.write_tokens(docs, path, eos_id=0, vocab_size=30000)
    return str(path)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    rng = np.random.default_rng(12)
    out = []
    for k in range(2):
        docs = [rng.integers(1, 30000, size=int(rng.integers(1, 50))) for _ in range(40)]
        p = tmp_path_factory.mktemp("tokdrop2") / ("s%d.dlc" % k)
        dlcache.write_tokens(docs, p, eos_id=0, vocab_size=30000)
        out.append(str(p))
    return out


def same(a, b):
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)


def same_lists(a, b):
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickled_token_loader_continues_the_same_batches(corpus, how):
    ld = dlcache.Loader(corpus, 4, **KW)
    assert isinstance(ld, TokenLoader)
    it = iter(ld)
    for _ in range(3):
        next(it)
    twin = pickle.loads(pickle.dumps(ld)) if how == "pickle" else copy.deepcopy(ld)
    assert "_lazy" in twin.__dict__ and "opens at first use" in repr(twin)
    want = list(it) + list(ld)  # the rest, then the next epoch
    got = list(twin) + list(twin)
    assert len(got) == len(ld) - 3 + len(ld) and same_lists(got, want)
    assert twin.epoch == ld.epoch == 1
    ld.close()
    twin.close()
    with pytest.raises(ValueError, match="closed dlcache TokenLoader cannot be pickled"):
        pickle.dumps(ld)


def test_pickle_keeps_set_epoch_the_arguments_and_a_finished_epoch(corpus):
    with dlcache.Loader(corpus, 4, **KW) as ld:
        ld.set_epoch(3)
        twin = pickle.loads(pickle.dumps(ld))
        assert twin._args == {"path": corpus, "batch_size": 4, **KW}
        want = list(ld)
        got = list(twin)
        assert ld.epoch == twin.epoch == 3 and same_lists(got, want)
        # Pickled after the epoch ended: the copy's next iter() is the next epoch.
        after = pickle.loads(pickle.dumps(ld))
        assert same_lists(list(after), list(ld)) and after.epoch == ld.epoch == 4
        twin.close()
        after.close()
    lazy = pickle.loads(pickle.dumps(dlcache.Loader(corpus, 4, **KW)))
    lazy.close()  # never opened
    with pytest.raises(ValueError, match="closed"):
        iter(lazy)


def test_mixture_pickles(two):
    ld = dlcache.Loader(two, 2, seq_len=8, seed=1, weights=[2, 1], rows_per_epoch=60)
    it = iter(ld)
    for _ in range(4):
        next(it)
    twin = pickle.loads(pickle.dumps(ld))
    assert twin._args["weights"] == [2, 1]
    assert same_lists(list(twin), list(it))
    ld.close()
    twin.close()


def test_framework_attributes(corpus):
    from torch.utils.data import DataLoader
    import inspect
    with dlcache.Loader(corpus, 4, drop_last=True, **KW) as ld:
        n = ld.num_windows
        assert len(ld.dataset) == n and ld.batch_size == 4 and ld.drop_last is True
        assert len(ld.sampler) == n and len(ld) == n // 4 == len(list(ld))
        assert ld.num_workers == 0 and ld.threads == 2 and ld.pin_memory is False
        assert ld.collate_fn is None and ld.batch_sampler is None
        assert ld.persistent_workers is False and ld.worker_init_fn is None
        assert ld.sampler.shuffle is True and ld.device == torch.device("cpu")
        assert ld.device_backend is None
        with pytest.raises(TypeError, match="not read by index"):
            ld.dataset[0]
        ld.sampler.set_epoch(4)
        first = next(iter(ld))
        assert ld.epoch == 4 and ld.sampler.epoch == 4
    with dlcache.Loader(corpus, 4, **KW) as other:
        other.set_epoch(4)
        assert same(first, next(iter(other)))
    with dlcache.Loader(corpus, 4, rank=1, world_size=3, **KW) as ld:
        assert len(ld.sampler) == -(-ld.num_windows // 3) and ld.sampler.num_replicas == 3
        assert ld.sampler.rank == 1 and len(ld) == -(-len(ld.sampler) // 4) == len(list(ld))
        # In a DataLoader with batch_size=None, the same batches.
        dl = DataLoader(ld.as_iterable_dataset(), batch_size=None)
        assert len(dl) == len(ld)
        ld.set_epoch(2)
        want = list(ld)
        ld.set_epoch(2)
        assert same_lists(list(dl), want)
    assert "prefetch_factor" in inspect.signature(DataLoader).parameters


def test_iteration_protocol(corpus):
    ld = dlcache.Loader(corpus, 4, **KW)
    ref = dlcache.Loader(corpus, 4, **KW)
    epochs = []
    for e in range(4):
        ref.set_epoch(e)
        epochs.append(list(ref))
    # An abandoned epoch: the next iter() starts the following one.
    it = iter(ld)
    next(it)
    assert same_lists(list(ld), epochs[1]) and ld.epoch == 1
    # A new iter() makes the one before it stale.
    a = iter(ld)
    next(a)
    b = iter(ld)
    with pytest.raises(RuntimeError, match="stale"):
        next(a)
    assert same(next(b), epochs[3][0]) and ld.epoch == 3
    # Resume: state after k batches of epoch 2, then the usual loop's set_epoch(2) keeps it.
    ld.set_epoch(2)
    it = iter(ld)
    for _ in range(5):
        next(it)
    state = ld.state_dict()
    assert state["epoch"] == 2 and state["epoch_finished"] is False
    fresh = dlcache.Loader(corpus, 4, **KW)
    fresh.load_state_dict(state)
    fresh.set_epoch(2)
    assert same_lists(list(fresh), epochs[2][5:])
    # A state saved at an epoch's end: the next iter() is the next epoch.
    list(it)
    done = ld.state_dict()
    assert done["epoch_finished"] is True
    fresh.load_state_dict(done)
    assert fresh.epoch == 2
    nxt = list(fresh)
    assert fresh.epoch == 3 and len(nxt) == len(ld)
    # stats: batches and tokens handed out; repr; close makes iterators fail.
    st = fresh.stats()
    assert st["batches"] == len(epochs[2][5:]) + len(nxt)
    assert st["tokens"] == sum(x["input_ids"].numel() for x in epochs[2][5:] + nxt)
    assert st["wait_seconds"] >= 0 and st["device"] == -1 and st["device_bytes"] == 0
    r = repr(fresh)
    assert "seq_len=16" in r and "epoch=3" in r and "batches/epoch" in r
    with fresh:
        it = iter(fresh)
        next(it)
    assert "closed" in repr(fresh)
    with pytest.raises(ValueError, match="closed"):
        next(it)
    with pytest.raises(ValueError, match="closed"):
        fresh.state_dict()
    fresh.close()  # idempotent
    for x in (ld, ref):
        x.close()


def test_device_cuda_without_a_gpu_is_refused(corpus):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: test_cuda_token_batches_equal_host_batches runs instead")
    with pytest.raises(ValueError, match="torch.cuda.is_available"):
        dlcache.Loader(corpus, 4, device="cuda", **KW)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch finds no GPU)")
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_cuda_token_batches_equal_host_batches(corpus, dtype):
    host = dlcache.Loader(corpus, 4, dtype=dtype, **KW)
    dev = dlcache.Loader(corpus, 4, dtype=dtype, device="cuda", **KW)
    assert dev.pin_memory and dev.device_backend == "torch" and dev.device.type == "cuda"
    for e in range(2):
        host.set_epoch(e)
        dev.set_epoch(e)
        kept = []
        for h, d in zip(host, dev):
            assert all(d[k].is_cuda for k in d if torch.is_tensor(d[k]))
            kept.append((h, d))  # kept past their turn: the slots are reused under them
        for h, d in kept:
            assert same(h, {k: v.cpu() if torch.is_tensor(v) else v for k, v in d.items()})
    st = dev.stats()
    assert st["device"] == dev.device.index and st["device_bytes"] > 0
    dev.close()
    host.close()


@pytest.mark.parametrize("kw", [dict(packing="best_fit"), dict(document_mask=True),
                                dict(pad_id=3), dict(rows_per_epoch=100)])
def test_token_arguments_without_seq_len_say_so(store, kw):
    """The token arguments are in the Loader's signature (rows_per_epoch was missing, so
    inspect.signature() and help() did not show it); without seq_len= they say what is needed."""
    import inspect
    assert set(kw) <= set(inspect.signature(dlcache.Loader).parameters)
    with pytest.raises(ValueError, match="give seq_len= too"):
        dlcache.Loader(store, 8, **kw)

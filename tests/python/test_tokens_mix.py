"""Mixtures of token stores (Loader([a, b], B, seq_len=S, weights=...)) against references built
here: each store's windows from its own concatenation (tests/python/test_tokens_loader.py's
rule), the rows of an epoch drawn by weight over tokens (every row holds S tokens), each store in
whole passes (a small store weighted up is repeated, every window once per pass), and resume
mid-epoch: the same batches under the same weights, the passes continued under new weights."""
import collections

import numpy as np
import pytest

import token_order
from conftest import HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402

S, B, SEED = 8, 4, 5


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    rng = np.random.default_rng(1)
    out = []
    for name, lo, hi, ndocs in (("small", 1, 1000, 20), ("large", 1000, 60000, 150)):
        docs = [rng.integers(lo, hi, size=int(rng.integers(1, 30))) for _ in range(ndocs)]
        dlcache.write_tokens(docs, d / (name + ".dlc"), eos_id=0, vocab_size=60000)
        out.append(str(d / (name + ".dlc")))
    return out


def window_table(path):
    L = dlcache.Loader(path, 1, seq_len=S, seed=SEED)
    with dlcache.TokenStore(path) as t:
        docs = [t.doc(i).astype(np.int64) for i in range(len(t))]
    order = token_order.doc_order(len(docs), SEED)
    assert L.doc_order().tolist() == order
    concat = np.concatenate([docs[k] for k in order])
    W = (len(concat) - 1) // S
    table = {concat[w * S:w * S + S].tobytes(): w for w in range(W)}
    assert len(table) == W
    return W, table


def rows_of(loader, limit=None):
    out = []
    for i, b in enumerate(loader):
        if limit is not None and i == limit:
            break
        out += [r.astype(np.int64).tobytes() for r in b["input_ids"].numpy()]
    return out


def identify(rows, tables):
    ids = []
    for r in rows:
        hits = [(k, t[r]) for k, t in enumerate(tables) if r in t]
        assert len(hits) == 1, "each row is one window of one store"
        ids.append(hits[0])
    return ids


def test_weights_over_tokens_and_passes(stores):
    (Wa, ta), (Wb, tb) = window_table(stores[0]), window_table(stores[1])
    n = Wa + Wb
    L = dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=[1, 1], rows_per_epoch=n)
    ids = identify(rows_of(L), [ta, tb])
    count = collections.Counter(k for k, _ in ids)
    assert abs(count[0] - count[1]) <= 1, "equal weights: equal tokens from each store"
    # Each store walks whole passes: within a pass every window once.
    for k, W in ((0, Wa), (1, Wb)):
        seq = [w for kk, w in ids if kk == k]
        for p in range(0, len(seq), W):
            chunk = seq[p:p + W]
            assert len(set(chunk)) == len(chunk), "no repeat inside a pass of store %d" % k
    assert count[0] > Wa, "the small store is repeated (more than one pass)"
    assert count[1] < Wb, "the large one is not read whole"


@pytest.mark.parametrize("new_weights,new_world", [([1, 1], 1), ([3, 1], 1), ([1, 1], 2)])
def test_resume_under_new_weights_and_world(stores, new_weights, new_world):
    (Wa, ta), (Wb, tb) = window_table(stores[0]), window_table(stores[1])
    n = Wa + Wb
    L = dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=[1, 1], rows_per_epoch=n)
    it = iter(L)
    before = []
    for _ in range(7):
        before += [r.astype(np.int64).tobytes() for r in next(it)["input_ids"].numpy()]
    state = L.state_dict()
    rest = rows_of_iter(it)
    per_rank = []
    for rank in range(new_world):
        R = dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=new_weights,
                           rows_per_epoch=n, rank=rank, world_size=new_world)
        R.load_state_dict(state)
        got = rows_of(R)
        if new_weights == [1, 1] and new_world == 1:
            assert got == rest, "the same schedule continues exactly"
        per_rank.append(got)
    # The global order: rank r's j-th row is position start + r + j * world.
    after = [rows[j] for j in range(len(per_rank[0])) for rows in per_rank]
    ids = identify(before + after, [ta, tb])
    # Each store's passes continue: no window twice before its pass is done.
    for k, W in ((0, Wa), (1, Wb)):
        seq = [w for kk, w in ids if kk == k]
        for p in range(0, len(seq), W):
            chunk = seq[p:p + W]
            assert len(set(chunk)) == len(chunk)
    if new_weights == [3, 1]:
        tail = collections.Counter(k for k, _ in identify(after, [ta, tb]))
        assert abs(tail[0] - 3 * tail[1]) <= 4, tail


def rows_of_iter(it):
    out = []
    for b in it:
        out += [r.astype(np.int64).tobytes() for r in b["input_ids"].numpy()]
    return out


def test_one_store_twice_is_refused(stores):
    """Each pass is keyed by the store's records: [A, A] drew the same windows in step, every
    batch holding each row twice, side by side."""
    with pytest.raises(dlcache.InvalidArgumentError, match="small.dlc holds the same records as "
                       ".*small.dlc.*list it once, with the sum of their weights"):
        dlcache.Loader([stores[0], stores[1], stores[0]], B, seq_len=S, seed=SEED)


def test_rows_per_epoch_is_checked(stores):
    """rows_per_epoch went to a C uint64 unchecked: 2**64 + 40 was 40 rows, -1 was 2**64 - 1 (and
    len() an OverflowError), 1.9 was 1 and '10' was taken."""
    for bad in (2**64 + 40, -1, 0, 2**63, 1.9, "10", float("nan"), True):
        with pytest.raises(ValueError, match="rows_per_epoch must be"):
            dlcache.Loader(stores, B, seq_len=S, seed=SEED, rows_per_epoch=bad)
    L = dlcache.Loader(stores, B, seq_len=S, seed=SEED, rows_per_epoch=np.int64(40))
    assert len(L.dataset) == 40 and len(L) == 10
    L = dlcache.Loader(stores, B, seq_len=S, seed=SEED, rows_per_epoch=2**63 - 1)
    assert len(L.dataset) == 2**63 - 1 and len(L) == -(-(2**63 - 1) // B)


def test_bad_weights_are_refused_naming_weights(stores):
    """["a", 1] raised float()'s bare "could not convert string to float"; the weights are
    refused as the image Loader's mixture refuses them, naming weights, before a store opens."""
    for bad, why in ((["a", 1], "weights must be numbers"), ([None, 1], "weights must be numbers"),
                     (["2", 1], "weights must be numbers"), ("21", "weights must be numbers"),
                     (5, "weights must be numbers"), ([1], "1 weights for 2 token stores"),
                     ([float("nan"), 1], r"weights\[0\] is nan"),
                     ([1, float("inf")], r"weights\[1\] is inf"),
                     ([-1, 1], r"weights\[0\] is -1.0"), ([0, 0.0], "weights are all 0")):
        with pytest.raises(ValueError, match=why):
            dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=bad)
    with pytest.raises(dlcache.InvalidArgumentError, match="finite number, 0 or more"):
        dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=[float("nan"), 1])
    L = dlcache.Loader(stores, B, seq_len=S, seed=SEED, weights=np.array([0, 2], np.int64))
    assert len(L) > 0
    with pytest.raises(ValueError, match="packing is one of"):  # was "unhashable type"
        dlcache.Loader(stores[0], B, seq_len=S, packing=["concat"])

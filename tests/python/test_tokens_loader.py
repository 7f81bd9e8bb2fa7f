"""Packed sequences of a token store (dlcache.Loader(path, B, seq_len=S)) against a reference
rebuilt here in numpy from the source tokens: the concatenation of the documents in the order
of the rule (token_order.py, written from docs/TOKENS.md, and equal to the loader's), cut into windows of S + 1 tokens overlapping by
one. For several (seed, epoch, world size): every window is delivered exactly once per epoch
across ranks (DistributedSampler's padding repeats some, drop_last cuts some), inputs and labels
are the window's tokens shifted by one, position ids restart exactly at document starts,
cu_seqlens and max_seqlen match, int32 equals int64; resume mid-epoch, also under another world
size."""
import collections
import os

import numpy as np
import pytest

import token_order
from conftest import HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402

EOS = 0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 50000, size=int(rng.integers(1, 60))) for _ in range(150)]
    path = tmp_path_factory.mktemp("tok") / "c.dlc"
    dlcache.write_tokens(docs, path, eos_id=EOS, vocab_size=50000)
    return path, [np.concatenate([d, [EOS]]) for d in docs]


def reference(loader, docs, seed, shuffle=True):
    order = token_order.doc_order(len(docs), seed, shuffle)
    assert loader.doc_order().tolist() == order, "the loader follows the rule"
    parts = [docs[d] for d in order]
    concat = np.concatenate(parts)
    starts = set(np.cumsum([0] + [len(p) for p in parts]).tolist())
    return concat, starts


def windows_of(concat, S):
    W = (len(concat) - 1) // S
    table = {}
    for w in range(W):
        table.setdefault(concat[w * S:w * S + S].tobytes(), []).append(w)
    assert all(len(v) == 1 for v in table.values()), "windows are distinct in this corpus"
    return W, {k: v[0] for k, v in table.items()}


def check_batch(b, concat, starts, S, table, mask):
    ids = b["input_ids"].numpy()
    labels = b["labels"].numpy()
    pos = b["position_ids"].numpy()
    got = []
    cu = []
    for r in range(ids.shape[0]):
        w = table[ids[r].astype(np.int64).tobytes()]
        got.append(w)
        base = w * S
        np.testing.assert_array_equal(ids[r], concat[base:base + S])
        want_labels = concat[base + 1:base + S + 1].copy()
        ref_pos = np.zeros(S, np.int64)
        for j in range(S):
            at_start = j == 0 or base + j in starts
            ref_pos[j] = 0 if at_start else ref_pos[j - 1] + 1
            if at_start:
                cu.append(r * S + j)
            if mask and base + j + 1 in starts:
                want_labels[j] = -100
        np.testing.assert_array_equal(labels[r], want_labels)
        np.testing.assert_array_equal(pos[r], ref_pos)
    if mask:
        cu.append(ids.shape[0] * S)
        np.testing.assert_array_equal(b["cu_seqlens"].numpy(), cu)
        assert b["cu_seqlens"].dtype == torch.int32
        assert b["max_seqlen"] == int(np.diff(cu).max())
    return got


def epoch_windows(path, docs, S, B, seed, epoch, world, drop_last=False, mask=True):
    per_rank = []
    for rank in range(world):
        L = dlcache.Loader(path, B, seq_len=S, seed=seed, rank=rank, world_size=world,
                           drop_last=drop_last, document_mask=mask)
        concat, starts = reference(L, docs, seed)
        W, table = windows_of(concat, S)
        assert L.num_windows == W
        L.set_epoch(epoch)
        ws = []
        n = 0
        for b in L:
            ws += check_batch(b, concat, starts, S, table, mask)
            n += 1
        assert n == len(L)
        per_rank.append(ws)
        L.close()
    return W, per_rank


@pytest.mark.parametrize("seed,epoch,world,S,B", [(0, 0, 1, 16, 4), (1, 3, 2, 16, 3),
                                                  (5, 1, 3, 7, 5), (9, 2, 4, 33, 2)])
def test_every_window_once_per_epoch(corpus, seed, epoch, world, S, B):
    path, docs = corpus
    W, per_rank = epoch_windows(path, docs, S, B, seed, epoch, world)
    counts = collections.Counter(w for ws in per_rank for w in ws)
    span = -(-W // world) * world  # DistributedSampler pads to a multiple of the world size
    assert set(counts) == set(range(W)), "every window, so every token but the tail, is an input"
    assert sum(counts.values()) == span
    assert sum(c - 1 for c in counts.values()) == span - W, "only the padding repeats"
    assert len({len(ws) for ws in per_rank}) == 1, "ranks get equal shares"
    # Every token position 0 .. W*S-1 is an input exactly once (the padding aside); the tail is
    # the fewer than S + 1 tokens after the last window.
    n_tokens = sum(len(d) for d in docs)
    assert W * S <= n_tokens - 1 < (W + 1) * S


def test_drop_last_and_other_epochs(corpus):
    path, docs = corpus
    W, per_rank = epoch_windows(path, docs, 10, 4, 3, 0, 3, drop_last=True, mask=False)
    flat = [w for ws in per_rank for w in ws]
    assert len(flat) == len(set(flat)) and len(per_rank[0]) % 4 == 0
    assert len(flat) == (W // 3) // 4 * 4 * 3
    _, other = epoch_windows(path, docs, 10, 4, 3, 1, 3, drop_last=True, mask=False)
    assert per_rank != other, "each epoch permutes the windows anew"


def test_int32_equals_int64(corpus):
    path, _ = corpus
    a = list(dlcache.Loader(path, 3, seq_len=12, seed=2, document_mask=True))
    b = list(dlcache.Loader(path, 3, seq_len=12, seed=2, document_mask=True, dtype=torch.int32,
                            threads=0))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert y["input_ids"].dtype == torch.int32
        for k in ("input_ids", "labels", "position_ids", "cu_seqlens"):
            assert torch.equal(x[k].long(), y[k].long())


def test_no_shuffle_is_record_order(corpus):
    path, docs = corpus
    L = dlcache.Loader(path, 2, seq_len=8, shuffle=False)
    concat = np.concatenate(docs)
    got = np.concatenate([b["input_ids"].numpy().ravel() for b in L])
    W = (len(concat) - 1) // 8
    np.testing.assert_array_equal(got[:W * 8], concat[:W * 8])


@pytest.mark.parametrize("new_world", [2, 3, 1])
def test_resume_mid_epoch(corpus, new_world):
    path, docs = corpus
    S, B, seed, world = 9, 3, 4, 2
    # Run world=2 for k batches on each rank, save rank 0's state.
    ranks = [dlcache.Loader(path, B, seq_len=S, seed=seed, rank=r, world_size=world)
             for r in range(world)]
    concat, starts = reference(ranks[0], docs, seed)
    W, table = windows_of(concat, S)
    for L in ranks:
        L.set_epoch(1)
    its = [iter(L) for L in ranks]
    before = []
    k = 5
    for it in its:
        for _ in range(k):
            before += check_batch(next(it), concat, starts, S, table, False)
    state = ranks[0].state_dict()
    assert state["position"] == k * B * world and state["epoch"] == 1
    # The same world size continues the same batches exactly.
    rest0 = [b["input_ids"] for b in its[0]]
    again = dlcache.Loader(path, B, seq_len=S, seed=seed, rank=0, world_size=world)
    again.load_state_dict(state)
    assert [torch.equal(a, b["input_ids"]) for a, b in zip(rest0, again)] == [True] * len(rest0)
    # Another world size: what was consumed plus the new shares is the epoch, each window once
    # (padding aside).
    after = []
    for r in range(new_world):
        L = dlcache.Loader(path, B, seq_len=S, seed=seed, rank=r, world_size=new_world)
        L.load_state_dict(state)
        for b in L:
            after += check_batch(b, concat, starts, S, table, False)
    counts = collections.Counter(before + after)
    assert set(counts) == set(range(W))
    left = W - k * B * world
    assert len(after) == -(-left // new_world) * new_world
    assert sum(counts.values()) - W == len(after) - left, "only the new padding repeats"


def test_refusals(corpus, tmp_path):
    path, _ = corpus
    with pytest.raises(dlcache.InvalidArgumentError, match="fewer than one window"):
        dlcache.Loader(path, 2, seq_len=10**6)
    dlcache.write([{"x": np.zeros(3)}], tmp_path / "plain.dlc")
    with pytest.raises(dlcache.NotFoundError, match="not a token store"):
        dlcache.Loader(tmp_path / "plain.dlc", 2, seq_len=8)
    L = dlcache.Loader(path, 2, seq_len=8)
    with pytest.raises(ValueError, match="seq_len"):
        L.load_state_dict(dict(dlcache.Loader(path, 2, seq_len=9).state_dict()))
    # Values a ctypes field would cut to their low bits (seq_len 2**32 + 8 was 8 to C, and
    # 2**32 + 8 to len() and the state) are refused by name.
    for kw, name in ((dict(seq_len=2**32 + 8), "seq_len"), (dict(pad_id=2**32 + 7), "pad_id"),
                     (dict(seed=-1), "seed"), (dict(threads=300), "threads"),
                     (dict(world_size=0), "world_size"), (dict(seq_len=8.5), "seq_len")):
        with pytest.raises(ValueError, match=name):
            dlcache.Loader(path, 2, **dict(dict(seq_len=8), **kw))
    with pytest.raises(ValueError, match="batch_size"):
        dlcache.Loader(path, 2**32 + 2, seq_len=8)
    # Best-fit's padding may be beyond the store's vocabulary (a model's own pad row).
    with dlcache.Loader(path, 2, seq_len=8, packing="best_fit", pad_id=50000) as ok:
        assert next(iter(ok))["input_ids"].shape == (2, 8)


def test_flags_must_be_bools(corpus, tmp_path):
    """A flag took any value for its truth: shuffle="False" shuffled. bool, numpy's bool and the
    ints 0 and 1 are flags; anything else is a TypeError naming the argument."""
    path, docs = corpus
    for name in ("shuffle", "drop_last", "document_mask"):
        for bad in ("False", "no", 0.0, 2, -1, None, [1]):
            with pytest.raises(TypeError, match="%s must be a bool" % name):
                dlcache.Loader(path, 2, seq_len=8, **{name: bad})
    for value, want in ((np.bool_(False), False), (np.True_, True), (0, False), (1, True),
                        (np.int64(1), True)):
        with dlcache.Loader(path, 2, seq_len=8, shuffle=value) as L:
            assert L.shuffle is want
    with pytest.raises(TypeError, match="force must be a bool"):
        dlcache.write_tokens(docs, tmp_path / "w.dlc", eos_id=EOS, force="no")


def test_loader_signature_takes_the_token_arguments(corpus):
    import inspect
    path, _ = corpus
    params = inspect.signature(dlcache.Loader).parameters
    for name in ("seq_len", "packing", "document_mask", "pad_id"):
        assert name in params, name
    a = dlcache.Loader(path, 4, seq_len=16, dtype="int32", seed=3)
    b = dlcache.Loader(path, 4, seq_len=16, dtype=torch.int32, seed=3)
    x, y = next(iter(a)), next(iter(b))
    assert x["input_ids"].dtype == torch.int32
    assert torch.equal(x["input_ids"], y["input_ids"])
    with pytest.raises(ValueError, match="seq_len"):
        dlcache.Loader(path, 4, packing="best_fit")
    with pytest.raises(ValueError, match="int64"):
        dlcache.Loader(path, 4, seq_len=16, dtype="float32")


@pytest.mark.parametrize("n_docs", [1, 63, 64, 65, 700])
def test_order_follows_the_rule(tmp_path, n_docs):
    """Blocks of 64 documents in a seeded order, a seeded order inside each; the short last
    block wherever the blocks' order puts it; every document once."""
    rng = np.random.default_rng(n_docs)
    docs = [rng.integers(1, 1000, size=int(rng.integers(1, 9))) for _ in range(n_docs)]
    path = tmp_path / "o.dlc"
    dlcache.write_tokens(docs, path, eos_id=EOS, vocab_size=1000)
    total = sum(len(d) + 1 for d in docs)
    for seed in (0, 1, 12345):
        L = dlcache.Loader(path, 1, seq_len=min(4, total - 1), seed=seed)
        want = token_order.doc_order(n_docs, seed)
        assert L.doc_order().tolist() == want
        if n_docs >= 128:
            assert want != token_order.doc_order(n_docs, seed + 1), "the seed changes the order"
            runs = [b for i, b in enumerate(d // 64 for d in want)
                    if i == 0 or want[i - 1] // 64 != b]
            assert sorted(runs) == list(range(-(-n_docs // 64))), "each block in one run"
            assert runs != sorted(runs), "the blocks are permuted"


_RANK_CHILD = r"""
import sys
import torch.distributed as dist
import dlcache
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[2], rank=0,
                        world_size=1)
img = dlcache.Loader(sys.argv[3], 4, crop=8)
tok = dlcache.Loader(sys.argv[1], 2, seq_len=8)
print(img.rank, img.world_size, tok.rank, tok.world_size)
"""


def test_rank_and_world_come_from_torch_distributed_as_for_images(corpus, tmp_path):
    """docs/tasks/multinode.md: rank and world size come from torch.distributed, else $RANK and
    $WORLD_SIZE. The token loader read only the environment: under mp.spawn (no $RANK) every
    rank read the whole data set, and here it said rank 1 of 2 where gloo says 0 of 1."""
    import socket
    import subprocess
    import sys
    path, _ = corpus
    images = tmp_path / "img.dlc"
    dlcache.write([{"image": np.zeros((8, 8, 3), np.uint8), "label": 0}] * 4, images)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RANK="1", WORLD_SIZE="2")
    r = subprocess.run([sys.executable, "-c", _RANK_CHILD, str(path), str(port), str(images)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0", "1", "0", "1"], r.stdout + r.stderr[-2000:]
    # Without torch.distributed the environment decides, and a bad value is named.
    bad = dict(os.environ, RANK="one")
    r = subprocess.run([sys.executable, "-c", "import dlcache; dlcache.Loader(%r, 2, seq_len=8)"
                        % str(path)], env=bad, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "$RANK is 'one', not an integer" in r.stderr, r.stderr[-2000:]

"""Resume after SIGKILL: a process iterating packed sequences (one store, and a mixture) saves
its state_dict after every batch and is killed mid-epoch; a fresh loader given the last saved
state yields exactly the batches an uninterrupted run yields next, and under another world size
the rest of the epoch, each window once."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import HAVE_LIB, LIB, REPO

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402

CHILD = textwrap.dedent("""
    import os, signal, sys, torch, dlcache
    paths, state_path, kill_after = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    src = paths if len(paths) > 1 else paths[0]
    kw = {"weights": [2, 1]} if len(paths) > 1 else {}
    L = dlcache.Loader(src, 4, seq_len=16, seed=9, document_mask=True, **kw)
    L.set_epoch(1)
    for i, b in enumerate(L):
        torch.save(L.state_dict(), state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
        if i + 1 == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(3)
    out = []
    for k in range(2):
        docs = [rng.integers(1, 30000, size=int(rng.integers(1, 80))) for _ in range(60)]
        dlcache.write_tokens(docs, d / ("s%d.dlc" % k), eos_id=0, vocab_size=30000)
        out.append(str(d / ("s%d.dlc" % k)))
    return out


def reference(src, kw):
    L = dlcache.Loader(src, 4, seq_len=16, seed=9, document_mask=True, **kw)
    L.set_epoch(1)
    return [b for b in L]


@pytest.mark.parametrize("mixture", [False, True])
def test_sigkill_then_load_state(stores, tmp_path, mixture):
    paths = stores if mixture else stores[:1]
    src = paths if mixture else paths[0]
    kw = {"weights": [2, 1]} if mixture else {}
    ref = reference(src, kw)
    k = 5
    env = dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", CHILD, ",".join(paths), str(tmp_path / "state"),
                        str(k)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stderr
    state = torch.load(tmp_path / "state")
    L = dlcache.Loader(src, 4, seq_len=16, seed=9, document_mask=True, **kw)
    L.load_state_dict(state)
    rest = list(L)
    assert len(rest) == len(ref) - k
    for a, b in zip(rest, ref[k:]):
        for key in ("input_ids", "labels", "position_ids", "cu_seqlens"):
            assert torch.equal(a[key], b[key])
    # Another world size: the rest of the epoch once across the new ranks.
    got = []
    for rank in range(3):
        R = dlcache.Loader(src, 4, seq_len=16, seed=9, rank=rank, world_size=3, **kw)
        R.load_state_dict(state)
        got += [row.tobytes() for b in R for row in b["input_ids"].numpy()]
    want = [row.tobytes() for b in ref[k:] for row in b["input_ids"].numpy()]
    if not mixture:
        assert set(got) == set(want)
        assert len(got) - len(want) < 3, "only the padding repeats"


@pytest.mark.parametrize("mixture", [False, True])
@pytest.mark.parametrize("in_last_batch", [False, True])
def test_a_state_at_the_end_of_a_drop_last_epoch_starts_the_next(stores, mixture, in_last_batch):
    """With drop_last the windows cut from the epoch's end are never delivered, so the position
    stays below num_windows: a state saved after the last batch (or inside it, as a loop that
    saves after each step does) said epoch_finished False, and the restored loader yielded an
    empty epoch (same world size) or the cut windows (another) before the next one."""
    src = stores if mixture else stores[0]
    kw = dict(seq_len=16, seed=9, drop_last=True, world_size=3, rank=0)
    if mixture:
        kw["weights"] = [2, 1]
    a = dlcache.Loader(src, 4, **kw)
    state = None
    for b in a:
        if in_last_batch:
            state = a.state_dict()
    if not in_last_batch:
        state = a.state_dict()
    assert state["epoch"] == 0 and state["epoch_finished"]
    want = [b["input_ids"].clone() for b in a]  # the uninterrupted run's next epoch
    b = dlcache.Loader(src, 4, **kw)
    b.load_state_dict(state)
    again = b.state_dict()
    assert again["epoch"] == 0 and again["epoch_finished"], "a restored end stays the end"
    got = [x["input_ids"] for x in b]
    assert b.epoch == 1 and len(got) == len(want) > 0
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("mixture", [False, True])
def test_the_resume_loop_does_not_replay_a_finished_epoch(stores, mixture):
    """docs/tasks/resume.md's loop (`for epoch in range(ckpt["epoch"], E): set_epoch(epoch)`)
    after a checkpoint taken at the end of epoch 0: epoch 0 is an empty pass, epoch 1 is the
    uninterrupted run's. Before: set_epoch(0) restarted epoch 0, and every batch of it was
    trained on twice."""
    src = stores if mixture else stores[0]
    kw = dict(seq_len=16, seed=9, **({"weights": [2, 1]} if mixture else {}))
    a = dlcache.Loader(src, 4, **kw)
    for _ in a:
        pass
    ckpt = {"loader": a.state_dict(), "epoch": 0}
    want = [b["input_ids"].clone() for b in a]  # epoch 1
    b = dlcache.Loader(src, 4, **kw)
    b.load_state_dict(ckpt["loader"])
    got = {}
    for epoch in range(ckpt["epoch"], 2):
        b.set_epoch(epoch)
        if epoch == 0:  # a checkpoint taken here is still the end of epoch 0
            again = b.state_dict()
            assert again["epoch"] == 0 and again["epoch_finished"], again
        got[epoch] = [x["input_ids"] for x in b]
    assert got[0] == [] and len(got[1]) == len(want) > 0
    assert all(torch.equal(g, w) for g, w in zip(got[1], want))


@pytest.mark.parametrize("mixture", [False, True])
def test_load_state_dict_checks_every_field(stores, mixture):
    """The fields were taken as they were: epoch 2**64 + 1 resumed epoch 1 while L.epoch said
    2**64 + 1, position 2**64 + 8 resumed at 8, epoch -1 was reported as -1, and
    epoch_finished="no" (true) skipped the rest of the epoch. Each is checked (type and range,
    bools real bools) before anything changes: a ValueError naming it, the loader as it was."""
    import re
    src = stores if mixture else stores[0]
    kw = dict(seq_len=16, seed=9, **({"weights": [2, 1]} if mixture else {}))
    a = dlcache.Loader(src, 4, **kw)
    it = iter(a)
    next(it), next(it)
    good = a.state_dict()
    want = [x["input_ids"] for x in it]
    b = dlcache.Loader(src, 4, **kw)
    b.set_epoch(3)
    itb = iter(b)
    next(itb)
    before = b.state_dict()
    W = int(b.num_windows)
    bad = [("epoch", 2**64 + 1), ("epoch", -1), ("epoch", 2**63), ("epoch", 1.0), ("epoch", "1"),
           ("epoch", None), ("position", 2**64 + 8), ("position", -1), ("position", W + 1),
           ("position", 8.0), ("epoch_finished", "no"), ("epoch_finished", 1),
           ("epoch_finished", None), ("shuffle", 1), ("shuffle", "True"), ("seed", 9.0),
           ("seed", -1), ("seed", 2**64 + 9), ("seq_len", 16.0), ("seq_len", 2**32 + 16),
           ("packing", ["concat"]), ("packing", "best")]
    bad += [("mixture", "x"), ("mixture", good["mixture"][:30]), ("mixture", None)] if mixture \
        else [("num_windows", float(W)), ("num_windows", -1)]
    for key, value in bad:
        with pytest.raises(ValueError, match=re.escape("state_dict[%r]" % key)):
            b.load_state_dict(dict(good, **{key: value}))
        assert b.epoch == 3 and b.state_dict() == before, (key, value)
    for key in ("epoch", "position", "seed"):
        with pytest.raises(ValueError, match="state_dict has no '%s'" % key):
            b.load_state_dict({k: v for k, v in good.items() if k != key})
    with pytest.raises(ValueError, match="not a dlcache TokenLoader state_dict"):
        b.load_state_dict(dict(good, dlcache_token_loader_state=True))
    if mixture:  # the dict's epoch and position are the mixture state's
        for key, value in (("epoch", 1), ("position", good["position"] + 4)):
            with pytest.raises(ValueError, match="mixture state says 0 and %d: the dict was "
                               "edited" % good["position"]):
                b.load_state_dict(dict(good, **{key: value}))
    assert b.epoch == 3 and b.state_dict() == before
    next(itb)  # the iterator of before the refusals goes on
    b.load_state_dict(good)
    assert b.epoch == 0
    got = [x["input_ids"] for x in b]
    assert len(got) == len(want) > 0 and all(torch.equal(g, w) for g, w in zip(got, want))

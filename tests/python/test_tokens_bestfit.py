"""Best-fit packing (Loader(path, B, seq_len=S, packing="best_fit")) against the documents: every
document is in exactly one row, whole, unless it is longer than S (then in pieces of S and a
remainder, each in one row); padding is pad_id with label -100; labels are the next token inside
each piece and -100 at its end; position ids restart at each piece; cu_seqlens match. The plan is
kept beside the store, read back at the next open (the same rows), and made again when its file
is damaged. Prints the padding on a realistic (log-normal) mix of document lengths."""
import collections
import glob
import os

import numpy as np
import pytest

from conftest import HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402

EOS, PAD, S = 0, 99999, 1024


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(11)
    # Log-normal lengths (median ~245 tokens, a long tail past S), as web text has.
    lens = np.clip(rng.lognormal(5.5, 1.0, size=1500).astype(int), 1, 20000)
    docs = [rng.integers(1, 50000, size=n) for n in lens]
    path = tmp_path_factory.mktemp("bf") / "c.dlc"
    dlcache.write_tokens(docs, path, eos_id=EOS, vocab_size=50000)
    return path, [np.concatenate([d, [EOS]]) for d in docs]


def segments(b):
    ids, labels, pos = (b[k].numpy() for k in ("input_ids", "labels", "position_ids"))
    cu = b["cu_seqlens"].numpy()
    out, pad = [], 0
    flat_ids, flat_lab, flat_pos = ids.ravel(), labels.ravel(), pos.ravel()
    for a, e in zip(cu[:-1], cu[1:]):
        assert a // S == (e - 1) // S, "a segment stays in its row"
        seg = flat_ids[a:e]
        np.testing.assert_array_equal(flat_pos[a:e], np.arange(e - a))
        assert flat_lab[e - 1] == -100
        if (seg == PAD).all():
            assert (flat_lab[a:e] == -100).all() and e % S == 0, "padding ends its row"
            pad += e - a
            continue
        np.testing.assert_array_equal(flat_lab[a:e - 1], seg[1:])
        out.append(seg.tobytes())
    assert b["max_seqlen"] == int(np.diff(cu).max())
    return out, pad


def run(path, **kw):
    L = dlcache.Loader(path, 4, seq_len=S, packing="best_fit", document_mask=True,
                       pad_id=PAD, seed=3, **kw)
    segs, pad, rows, batches = [], 0, 0, []
    for b in L:
        s, p = segments(b)
        segs += s
        pad += p
        rows += b["input_ids"].shape[0]
        batches.append(b["input_ids"].clone())
    return L, segs, pad, rows, batches


def test_best_fit_places_every_document_once(corpus):
    path, docs = corpus
    for f in glob.glob(str(path) + ".bestfit-*"):
        os.unlink(f)
    L, segs, pad, rows, batches = run(path)
    want = collections.Counter(d[i:i + S].astype(np.int64).tobytes()
                               for d in docs for i in range(0, len(d), S))
    assert collections.Counter(segs) == want, "each document (or piece) once, whole"
    info = L.packing_info
    assert rows == info["rows"] and pad == info["pad_tokens"] and info["saved"]
    tokens = sum(len(d) for d in docs)
    assert rows * S == tokens + pad
    print("\nbest_fit padding: %.2f%% of %d rows of %d (%d documents, %d tokens, log-normal "
          "lengths)" % (100 * info["padding"], rows, S, len(docs), tokens))
    assert info["padding"] < 0.03, "padding under a few percent on a realistic mix"
    # The plan beside the store is read back: the same rows.
    plans = glob.glob(str(path) + ".bestfit-%d-*" % S)
    assert len(plans) == 1
    _, _, _, _, again = run(path)
    assert all(torch.equal(a, b) for a, b in zip(batches, again))
    # A damaged plan is made again, the same.
    raw = bytearray(open(plans[0], "rb").read())
    raw[100] ^= 0xFF
    open(plans[0], "wb").write(bytes(raw))
    L3, _, _, _, third = run(path)
    assert L3.packing_info["saved"]
    assert all(torch.equal(a, b) for a, b in zip(batches, third))
    assert open(plans[0], "rb").read() != bytes(raw), "rewritten"


def test_best_fit_epochs_and_ranks(corpus):
    path, _ = corpus
    seen = collections.Counter()
    for rank in range(3):
        L = dlcache.Loader(path, 2, seq_len=S, packing="best_fit", rank=rank, world_size=3,
                           seed=3, pad_id=PAD)
        L.set_epoch(2)
        for b in L:
            for row in b["input_ids"].numpy():
                seen[row.tobytes()] += 1
    rows = L.packing_info["rows"]
    assert len(seen) == rows and sum(seen.values()) == -(-rows // 3) * 3


def test_the_largest_seed_and_no_shuffle_have_plans_of_their_own(corpus):
    """The plan's name and header said "not shuffled" with the seed 2**64 - 1, a seed too: a
    shuffled loader of that seed read the unshuffled plan when one was there, so its rows
    depended on what had run before."""
    path, _ = corpus
    for f in glob.glob(str(path) + ".bestfit-*"):
        os.unlink(f)
    kw = dict(seq_len=S, packing="best_fit", pad_id=PAD, shuffle=True)

    def rows(**more):
        with dlcache.Loader(str(path), 4, **dict(kw, **more)) as ld:
            return [b["input_ids"].clone() for b in ld]

    fresh = rows(seed=2**64 - 1)
    for f in glob.glob(str(path) + ".bestfit-*"):
        os.unlink(f)
    rows(shuffle=False)  # its plan first, beside the store
    after = rows(seed=2**64 - 1)
    assert len(after) == len(fresh) and all(torch.equal(a, b) for a, b in zip(after, fresh))
    assert len(glob.glob(str(path) + ".bestfit-%d-*" % S)) == 2


def test_a_fifo_in_the_plans_place_does_not_stall_the_open(tmp_path):
    """The plan beside the store was opened for reading without O_NONBLOCK: a FIFO with its
    name (a co-tenant's, in a shared folder) held the loader's open until a writer came. It is
    passed over as a plan that cannot be read, the rows are made as without one, and the plan
    is kept in memory rather than renamed over it."""
    import subprocess
    import sys
    path = tmp_path / "c.dlc"
    dlcache.write_tokens([np.arange(1, 40 + i) for i in range(30)], path, eos_id=EOS,
                         vocab_size=1000)
    plan = str(path) + ".bestfit-16-%016x" % 5
    os.mkfifo(plan)
    code = ("import dlcache, sys\n"
            "with dlcache.Loader(sys.argv[1], 2, seq_len=16, packing='best_fit', seed=5) as ld:\n"
            "    print(sum(1 for _ in ld))\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 0
    import stat
    assert stat.S_ISFIFO(os.lstat(plan).st_mode), "the plan was not saved over the FIFO"

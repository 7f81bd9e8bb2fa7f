"""Store sets of token stores: `cachebuild --tokens --shards N` splits the source documents over N
parts in order (some parts empty when N is large) and joins them; the set reads as the single
store of the same documents: the same documents, prefix sums and token positions, and the packed
loader (concat, in seeded and record order, and best_fit) yields byte for byte the same batches."""
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import BIN, HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tset")
    rng = np.random.default_rng(5)
    with open(d / "docs.jsonl", "w") as f:
        for i in range(120):
            n = 0 if i % 17 == 0 else int(rng.integers(1, 90))
            f.write(json.dumps({"tokens": rng.integers(1, 3000, size=n).tolist()}) + "\n")
    out = {}
    for name, extra in (("single.dlc", []), ("set4", ["--shards", "4"]),
                        ("set200", ["--shards", "200"])):
        r = subprocess.run([os.path.join(BIN, "cachebuild"), "--tokens", str(d / "docs.jsonl"),
                            "-o", str(d / name), "--eos", "0", "--vocab", "3000", "--json"]
                           + extra, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name] = (str(d / name), json.loads(r.stdout))
    return out


def test_set_reads_as_the_single_store(built):
    single, rep = built["single.dlc"]
    for name in ("set4", "set200"):
        path, srep = built[name]
        assert (srep["documents"], srep["tokens"], srep["skipped"]) == (
            rep["documents"], rep["tokens"], rep["skipped"])
        with dlcache.TokenStore(single) as a, dlcache.TokenStore(path) as b:
            assert len(a) == len(b)
            np.testing.assert_array_equal(a.offsets, b.offsets)
            for i in range(len(a)):
                np.testing.assert_array_equal(a.doc(i), b.doc(i))
            for p in range(0, a.info["num_tokens"], 7):
                assert a.find(p) == b.find(p)
            b.verify()
    assert len(os.listdir(built["set200"][0])) == 201, "200 parts (most empty) and the index"


@pytest.mark.parametrize("kw", [dict(), dict(shuffle=False), dict(packing="best_fit"),
                                dict(world_size=3, rank=2, document_mask=True)])
def test_loader_over_a_set_equals_the_store(built, kw):
    single = built["single.dlc"][0]
    for name in ("set4", "set200"):
        a = list(dlcache.Loader(single, 3, seq_len=24, seed=4, **kw))
        b = list(dlcache.Loader(built[name][0], 3, seq_len=24, seed=4, **kw))
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            for k in x:
                if isinstance(x[k], torch.Tensor):
                    assert torch.equal(x[k], y[k]), k


def test_parts_on_several_machines_then_join(built, tmp_path):
    single = built["single.dlc"][0]
    src = os.path.join(os.path.dirname(single), "docs.jsonl")
    out = tmp_path / "parts"
    for i in (2, 0, 1):  # in any order, as machines finish
        r = subprocess.run([os.path.join(BIN, "cachebuild"), "--tokens", src, "-o", str(out),
                            "--part", "%d/3" % i, "--eos", "0", "--vocab", "3000"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert "index.dlcset" not in os.listdir(out)
    r = subprocess.run([os.path.join(BIN, "cachebuild"), "--join", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with dlcache.TokenStore(single) as a, dlcache.TokenStore(out) as b:
        np.testing.assert_array_equal(a.offsets, b.offsets)
        for i in range(len(a)):
            np.testing.assert_array_equal(a.doc(i), b.doc(i))


def _tokens_build(*args):
    return subprocess.run([os.path.join(BIN, "cachebuild"), "--tokens", *map(str, args),
                           "--eos", "0", "--vocab", "3000"], capture_output=True, text=True)


def _docs(path):
    with dlcache.TokenStore(path) as s:
        return [s.doc(i).tolist() for i in range(len(s))]


def test_a_failed_rebuild_keeps_the_old_set(built, tmp_path):
    """cachebuild --tokens --shards N --force wrote its parts over the names the old index held:
    a rebuild that failed midway (a bad line, Ctrl-C, a full disk) left a set that did not open
    ("built from other sources"), and --part I/N --force broke a joined set even when it
    succeeded. The old set is now retired first, as an image set is, and stays readable."""
    src = os.path.join(os.path.dirname(built["single.dlc"][0]), "docs.jsonl")
    out = tmp_path / "s"
    assert _tokens_build(src, "-o", out, "--shards", "3").returncode == 0
    old = _docs(out)
    # Without --force a set there is refused, naming it.
    r = _tokens_build(src, "-o", out, "--shards", "3")
    assert r.returncode != 0 and "replaced only with --force" in r.stderr, r.stderr
    # A rebuild whose last document is bad: parts 0 and 1 are written before it fails.
    bad = tmp_path / "bad.jsonl"
    lines = open(src).read().splitlines()
    bad.write_text("\n".join(lines[::-1] + ['{"tokens": [1, 99999]}']) + "\n")
    r = _tokens_build(bad, "-o", out, "--shards", "3", "--force")
    assert r.returncode != 0 and "not below 3000" in r.stderr, r.stderr
    assert _docs(out) == old
    # One part of a new set over the joined one: the old set reads until the join.
    r = _tokens_build(bad.with_name("rev.jsonl"), "-o", out, "--part", "0/3", "--force")
    assert r.returncode != 0  # no such file: nothing changed
    rev = tmp_path / "rev.jsonl"
    rev.write_text("\n".join(lines[::-1]) + "\n")
    assert _tokens_build(rev, "-o", out, "--part", "0/3", "--force").returncode == 0
    assert _docs(out) == old
    for i in (1, 2):
        assert _tokens_build(rev, "-o", out, "--part", "%d/3" % i, "--force").returncode == 0
    r = subprocess.run([os.path.join(BIN, "cachebuild"), "--join", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    new = _docs(out)
    assert new != old and sorted(map(tuple, new)) == sorted(map(tuple, old))
    assert not [f for f in os.listdir(out) if f.startswith("retired-")], os.listdir(out)

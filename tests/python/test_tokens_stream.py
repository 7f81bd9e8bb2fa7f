"""Streamed sets of token stores: a set built by `cachebuild --tokens` (in parts with --shards, and
on "several machines" with --part I/N then --join), pushed with `cachewarm push` to a real S3
server (s3rver on 127.0.0.1, started as the image streaming tests start it), and read by its URL
with seq_len= through the streaming cache gives exactly the local set's batches for several
(seed, epoch, rank/world, packing); each part is downloaded once per node (a second loader on the
same cache_dir downloads nothing); a cache_limit below the parts is refused naming the bytes; a
damaged part is refused naming it; a streamed source in a mixture, and pickling, work too."""
import json
import os
import pickle
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BUILD, require_lib, tool

require_lib("dlc_token_loader_open", "dlc_token_loader_stream_stats", "dlc_warm_push")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402
from test_stream import s3  # noqa: E402,F401  (the session's s3rver)

BIN = os.path.join(BUILD, "bin")
PARTS = 5


def run(args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "%s: %s" % (" ".join(args), r.stderr)
    return r


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The same documents as one store, a set of PARTS parts, and a set of 3 parts made one by
    one (--part I/3) and joined."""
    d = tmp_path_factory.mktemp("tstream")
    rng = np.random.default_rng(21)
    with open(d / "docs.jsonl", "w") as f:
        for i in range(300):
            n = int(rng.integers(1, 120))
            f.write(json.dumps({"tokens": rng.integers(1, 5000, size=n).tolist()}) + "\n")
    base = [tool("cachebuild"), "--tokens", str(d / "docs.jsonl"), "--eos", "0", "--vocab",
            "5000"]
    run(base + ["-o", str(d / "single.dlc")])
    run(base + ["-o", str(d / "set"), "--shards", str(PARTS)])
    for i in range(3):
        run(base + ["-o", str(d / "joined"), "--part", "%d/3" % i])
    run([tool("cachebuild"), "--join", str(d / "joined")])
    return {"single": str(d / "single.dlc"), "set": str(d / "set"), "joined": str(d / "joined")}


@pytest.fixture(scope="module")
def urls(s3, sets):  # noqa: F811
    out = {}
    for name in ("set", "joined"):
        run([tool("cachewarm"), "push", sets[name], "s3://b/tokens/" + name, "--endpoint", s3,
             "-q"])
        out[name] = "s3://b/tokens/" + name
    return out


def batches(loader, epoch):
    loader.set_epoch(epoch)
    return [{k: v.clone() if torch.is_tensor(v) else v for k, v in b.items()} for b in loader]


def same(got, want):
    assert len(got) == len(want), "%d batches, the local set gives %d" % (len(got), len(want))
    for n, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys()
        for k in a:
            ok = torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k]
            assert ok, "batch %d: %s differs" % (n, k)


CASES = [dict(seed=0, rank=0, world_size=1),
         dict(seed=7, rank=1, world_size=3, document_mask=True),
         dict(seed=3, rank=0, world_size=2, shuffle=False, drop_last=True),
         dict(seed=5, rank=1, world_size=2, packing="best_fit", document_mask=True)]


@pytest.mark.parametrize("name", ["set", "joined"])
def test_streamed_token_set_gives_the_local_batches(sets, urls, s3, tmp_path, name):  # noqa: F811
    cache = tmp_path / "cache"
    for i, kw in enumerate(CASES):
        local = dlcache.Loader(sets[name], 4, seq_len=32, **kw)
        single = dlcache.Loader(sets["single"], 4, seq_len=32, **kw)
        streamed = dlcache.Loader(urls[name], 4, seq_len=32, cache_dir=cache, endpoint=s3, **kw)
        assert len(streamed) == len(local) and streamed.num_windows == local.num_windows
        for epoch in (0, 2):
            want = batches(local, epoch)
            if kw.get("packing") != "best_fit":  # best-fit ties follow each store's digest
                same(batches(single, epoch), want)
            same(batches(streamed, epoch), want)
        st = streamed.stream_stats()
        # The first loader downloads every part; every later one on this node finds them.
        parts = len([f for f in os.listdir(sets[name]) if f.endswith(".dlc")])
        assert st["downloads"] == (parts if i == 0 else 0), st
        assert st["bytes_fetched"] > 0 and st["evictions"] == 0
        for ld in (local, single, streamed):
            ld.close()


def test_streamed_resume_pickle_and_mixture(sets, urls, s3, tmp_path):  # noqa: F811
    kw = dict(seq_len=16, seed=9, document_mask=True)
    cache = tmp_path / "cache"
    ld = dlcache.Loader(urls["set"], 4, cache_dir=cache, endpoint=s3, **kw)
    it = iter(ld)
    for _ in range(3):
        next(it)
    twin = pickle.loads(pickle.dumps(ld))
    same([dict(b) for b in twin], [dict(b) for b in it])
    assert twin.stream_stats()["downloads"] == 0
    # A mixture of a streamed source and a local one: the local mixture's batches.
    mix_kw = dict(weights=[2, 1], rows_per_epoch=200, **kw)
    a = dlcache.Loader([urls["set"], sets["single"]], 4, cache_dir=cache, endpoint=s3, **mix_kw)
    b = dlcache.Loader([sets["set"], sets["single"]], 4, **mix_kw)
    same(batches(a, 1), batches(b, 1))
    for x in (ld, twin, a, b):
        x.close()


def test_limits_and_refusals(sets, urls, s3, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="cache_dir"):
        dlcache.Loader(urls["set"], 4, seq_len=16, endpoint=s3)
    with pytest.raises(ValueError, match="for a URL"):
        dlcache.Loader(sets["set"], 4, seq_len=16, cache_dir=tmp_path)
    parts = sum(os.path.getsize(os.path.join(sets["set"], f))
                for f in os.listdir(sets["set"]) if f.endswith(".dlc"))
    with pytest.raises(dlcache.DlcacheError, match=r"bytes of the set's %d parts" % PARTS):
        dlcache.Loader(urls["set"], 4, seq_len=16, cache_dir=tmp_path / "small",
                       cache_limit=parts // 2, endpoint=s3)
    # A damaged part (one byte of a record changed after the index was written) is refused
    # before use, naming it; nothing is published.
    bad = tmp_path / "bad"
    shutil.copytree(sets["set"], bad)
    part = sorted(f for f in os.listdir(bad) if f.endswith(".dlc"))[2]
    with dlcache.TokenStore(bad / part) as ts:
        needle = ts.doc(5).astype("<u2").tobytes()
    blob = bytearray((bad / part).read_bytes())
    at = blob.find(needle)
    assert at > 0 and blob.find(needle, at + 1) < 0, "document 5's tokens, once in the file"
    blob[at] ^= 0xFF
    (bad / part).write_bytes(bytes(blob))
    run([tool("cachewarm"), "push", str(bad), "s3://b/tokens/bad", "--endpoint", s3, "-q"])
    with pytest.raises(dlcache.DlcacheError, match=part.replace(".", r"\.")) as e:
        dlcache.Loader("s3://b/tokens/bad", 4, seq_len=16, cache_dir=tmp_path / "c2",
                       endpoint=s3, retries=0)
    print("refused:", e.value)
    setdirs = [d for d in os.listdir(tmp_path / "c2") if not d.startswith(".")]
    assert all(part not in os.listdir(tmp_path / "c2" / d) for d in setdirs)

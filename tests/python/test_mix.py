"""A Loader over a mixture of stores (include/dlcache/loader.h, "Mixtures"):
shares per batch, "source" and per-source "indices", labels moved by their
offsets, len() from samples_per_epoch, state_dict() that resumes exactly and
under new weights with a source added, and the refusals."""

import numpy as np
import pytest
import torch

from conftest import require_lib

require_lib("dlc_loader_open_mix")

import dlcache  # noqa: E402


def _write(path, n, base, classes):
    samples = [{"image": np.full((4, 4, 3), (base + i) % 251, np.uint8), "label": i % classes}
               for i in range(n)]
    dlcache.write(samples, str(path), progress=False,
                  label_names=["c%d_%d" % (base, k) for k in range(classes)])
    return str(path)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    return [_write(d / "a.dlc", 40, 0, 3), _write(d / "b.dlc", 25, 100, 2),
            _write(d / "c.dlc", 15, 200, 4)]


def _loader(paths, **kw):
    kw.setdefault("crop", 4)
    kw.setdefault("threads", 2)
    kw.setdefault("seed", 3)
    return dlcache.Loader(paths, 10, **kw)


def test_shares_sources_indices_and_labels(sources):
    loader = _loader(sources[:2], weights=[0.7, 0.3], samples_per_epoch=100,
                     label_offsets=[0, 3], as_dict=True, return_indices=True)
    assert len(loader) == 10
    assert loader.num_classes == 5
    assert loader.classes == ["c0_0", "c0_1", "c0_2", "c100_0", "c100_1"]
    seen = 0
    for b in loader:
        src, idx = b["source"], b["indices"]
        assert src.dtype == torch.int64 and src.shape == (10,)
        assert int((src == 0).sum()) == 7  # each batch: 7 of the source of weight 0.7
        for s, i, label, img in zip(src.tolist(), idx.tolist(), b["label"].tolist(),
                                    b["image"]):
            want = i % 3 if s == 0 else 3 + i % 2
            assert label == want
            assert int(img[0, 0, 0]) == (100 * s + i) % 251
        seen += 10
    assert seen == 100
    info = loader.sources
    assert [s["epoch_samples"] for s in info] == [70, 30]
    assert [s["count"] for s in info] == [40, 25]
    loader.close()


def test_tuples_with_return_source(sources):
    loader = _loader(sources, return_source=True, return_indices=True)
    images, labels, idx, src = next(iter(loader))
    assert images.shape == (10, 4, 4, 3) and labels.shape == idx.shape == src.shape == (10,)
    assert set(src.tolist()) <= {0, 1, 2}
    loader.close()


def _rest(loader):
    return [tuple(t.clone() for t in b) for b in loader]


def test_state_dict_resumes_exactly(sources):
    a = _loader(sources, weights=[5, 3, 2], samples_per_epoch=77, return_indices=True)
    it = iter(a)
    for _ in range(3):
        next(it)
    state = a.state_dict()
    assert "mixture" in state
    want = _rest(it)
    b = _loader(sources, weights=[5, 3, 2], samples_per_epoch=77, return_indices=True)
    b.load_state_dict(state)
    got = _rest(b)
    assert len(got) == len(want) == 5
    for g, w in zip(got, want):
        assert all(torch.equal(x, y) for x, y in zip(g, w))
    a.close(), b.close()


def test_new_weights_and_a_new_source_keep_every_pass_whole(sources):
    counts = {p: n for p, n in zip(sources, (40, 25, 15))}
    seq = {p: [] for p in sources}

    def take(loader, paths, batches=None):
        for k, b in enumerate(loader):
            for s, i in zip(b["source"].tolist(), b["indices"].tolist()):
                seq[paths[s]].append(i)
            if batches is not None and k + 1 == batches:
                break

    first = sources[:2]
    a = _loader(first, weights=[0.7, 0.3], as_dict=True, return_indices=True)
    take(a, first)
    take(a, first, batches=3)
    state = a.state_dict()
    a.close()
    then = [sources[2], sources[1], sources[0]]
    b = _loader(then, weights=[0.5, 0.7, 0.3], as_dict=True, return_indices=True)
    b.load_state_dict(state)
    for _ in range(3):
        take(b, then)
    b.close()
    for p, got in seq.items():
        n = counts[p]
        assert len(got) > n
        for start in range(0, len(got), n):
            chunk = got[start:start + n]
            assert len(set(chunk)) == len(chunk), (p, start)


def test_refusals(sources, tmp_path):
    with pytest.raises(dlcache.InvalidArgumentError, match="weight"):
        _loader(sources[:2], weights=[1, float("nan")])
    with pytest.raises(dlcache.InvalidArgumentError, match="all 0"):
        _loader(sources[:2], weights=[0, 0])
    with pytest.raises(ValueError, match="2 entries for 3 sources"):
        _loader(sources, weights=[1, 2])
    with pytest.raises(ValueError, match="weights must be numbers"):  # "2" was read as 2.0
        _loader(sources[:2], weights=["2", 1])
    with pytest.raises(ValueError, match="apply to a mixture"):
        dlcache.Loader(sources[0], 10, weights=[1])
    other = str(tmp_path / "other.dlc")
    dlcache.write([{"image": np.zeros((4, 4, 3), np.uint8), "label": 0, "x": 1.5}], other,
                  progress=False)
    with pytest.raises(dlcache.InvalidArgumentError, match="other.dlc"):
        _loader([sources[0], other])
    # One store twice, or a copy of it: each pass is keyed by the records, so the two would draw
    # the same samples in step (every batch in pairs).
    import shutil
    shutil.copy(sources[0], tmp_path / "copy.dlc")
    for twice in ([sources[0], sources[1], sources[0]], [sources[0], str(tmp_path / "copy.dlc")]):
        with pytest.raises(dlcache.InvalidArgumentError, match="holds the same records as .*a.dlc"
                           ".*list it once, with the sum of their weights"):
            _loader(twice)
    mixed, plain = _loader([sources[0]]), dlcache.Loader(sources[0], 10, crop=4)
    with pytest.raises(ValueError, match="single source"):
        mixed.load_state_dict(plain.state_dict())
    with pytest.raises(ValueError, match="mixture"):
        plain.load_state_dict(mixed.state_dict())
    mixed.close(), plain.close()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="torch.cuda.is_available() is False: runs on a machine with a GPU")
def test_device_batches_equal_the_host_ones(sources):
    kw = dict(weights=[0.5, 0.3, 0.2], label_offsets=[0, 10, 20], return_indices=True,
              dtype="float32")
    host = [{k: v.clone() for k, v in b.items()}
            for b in _loader(sources, as_dict=True, **kw)]
    dev = [{k: v.cpu() for k, v in b.items()}
           for b in _loader(sources, as_dict=True, device="cuda", **kw)]
    assert len(host) == len(dev) == 8
    for h, d in zip(host, dev):
        assert h.keys() == d.keys() and "source" in h
        for k in h:
            assert torch.equal(h[k], d[k]), k
    images, labels, idx, src = next(iter(_loader(sources, device="cuda", return_source=True,
                                                 **kw)))
    assert src.device.type == "cuda" and torch.equal(src.cpu(), host[0]["source"])
    assert torch.equal(idx.cpu(), host[0]["indices"])


_CHILD = r"""
import os, signal, sys, torch
sys.path.insert(0, sys.argv[1])
import dlcache
paths, out = sys.argv[2].split(","), sys.argv[3]
loader = dlcache.Loader(paths, 10, weights=[5, 3, 2], crop=4, threads=2, seed=3,
                        return_indices=True)
it = iter(loader)
for _ in range(3):
    next(it)
torch.save(loader.state_dict(), out + ".tmp")
os.rename(out + ".tmp", out)
next(it)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_9_mid_epoch_and_resume(sources, tmp_path):
    import os
    import subprocess
    import sys
    state = tmp_path / "state.pt"
    child = subprocess.run([sys.executable, "-c", _CHILD, os.path.join(os.path.dirname(
        dlcache.__file__), ".."), ",".join(sources), str(state)], env=dict(os.environ))
    assert child.returncode == -9 and state.exists()
    ref = _loader(sources, weights=[5, 3, 2], return_indices=True)
    want = [tuple(t.clone() for t in b) for b in ref][3:]
    got_loader = _loader(sources, weights=[5, 3, 2], return_indices=True)
    got_loader.load_state_dict(torch.load(str(state)))
    got = [tuple(t.clone() for t in b) for b in got_loader]
    assert len(got) == len(want) == 5
    for g, w in zip(got, want):
        assert all(torch.equal(x, y) for x, y in zip(g, w))
    ref.close(), got_loader.close()


def _digest(loader, epochs):
    h = __import__("hashlib").sha256()
    for e in epochs:
        loader.set_epoch(e)
        for images, labels, idx in loader:
            for t in (images, labels, idx):
                h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("kw", [{}, {"world_size": 3, "rank": 2},
                                {"world_size": 3, "rank": 1, "drop_last": True},
                                {"random_resized_crop": True}, {"sampler": "sequential"}])
def test_a_single_source_equals_the_plain_loader_byte_for_byte(tmp_path, kw):
    """A mixture of one source (any weight) is today's loader: the same order, crops and flips,
    padding and resume."""
    rng = np.random.default_rng(7)
    path = str(tmp_path / "one.dlc")
    dlcache.write([{"image": rng.integers(0, 256, (9, 8, 3), dtype=np.uint8), "label": i % 4}
                   for i in range(41)], path, progress=False)
    kw = dict(kw, crop=5, threads=2, seed=11, return_indices=True)
    plain = dlcache.Loader(path, 6, **kw)
    mix = dlcache.Loader([path], 6, weights=[0.3], **kw)
    assert len(mix) == len(plain)
    assert _digest(mix, [2, 3]) == _digest(plain, [2, 3])
    # Saved mid-epoch, restored into a fresh one: the plain loader's remaining batches.
    plain.set_epoch(4), mix.set_epoch(4)
    it_p, it_m = iter(plain), iter(mix)
    next(it_p), next(it_m)
    state = mix.state_dict()
    want = _rest(it_p)
    again = dlcache.Loader([path], 6, weights=[5], **kw)
    again.load_state_dict(state)
    got = _rest(again)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert all(torch.equal(x, y) for x, y in zip(g, w))
    plain.close(), mix.close(), again.close()


# ------------------------------------------------------------ streamed sources
# s3rver-backed mixtures (tests/python/test_stream.py's server and set, pushed once): the set
# streamed from s3://b/sets/s beside a local set of the same demo images in 3 shards (also pushed,
# as a second streamed source). A streamed source walks passes in shard windows of one stream
# (docs/MIXTURES.md, "Streamed sources").
from test_stream import local_set, s3, url  # noqa: E402,F401  (fixtures)

STREAM_MIX = dict(crop=32, random_crop=False, flip=0, seed=7, window_shards=2, prefetch=2,
                  return_indices=True, return_source=True)


@pytest.fixture(scope="module")
def other_set(demo_dir, tmp_path_factory):
    """The demo images again, as a local set of 3 shards: the mixture's local source."""
    path = tmp_path_factory.mktemp("mixstream") / "other"
    dlcache.build(str(demo_dir), str(path), size=48, threads=2, shards=3)
    return str(path)


def _smallest(paths, cache, s3, **kw):
    """The smallest cache_limit the mixture accepts: what a limit of 1 byte is told it needs."""
    import re
    with pytest.raises(dlcache.DlcacheError) as e:
        dlcache.Loader(paths, 4, cache_dir=str(cache), cache_limit=1, endpoint=s3,
                       **dict(STREAM_MIX, **kw))
    m = re.search(r"(\d+) bytes are needed", str(e.value))
    assert m, str(e.value)
    assert "streamed source %d (%s)" % (1, paths[1]) in str(e.value)
    return int(m.group(1))


def _epochs(loader, n):
    out = []
    for e in range(n):
        loader.set_epoch(e)
        out.append([tuple(t.clone() for t in b) for b in loader])
    return out



def _images_of(path):
    """Record number -> its image as the mixture crops it (center crop: a function of the
    record alone), read from the local copy of the set."""
    with dlcache.Loader(path, 50, crop=32, random_crop=False, flip=0, sampler="sequential",
                        return_indices=True,
                        threads=2) as ld:
        return {int(i): img.clone() for imgs, _, idx in ld for i, img in zip(idx, imgs)}


def test_streamed_source_at_the_smallest_cache(other_set, local_set, url, s3, tmp_path):
    """Every record of each source once per pass, shares within 1 per batch, the local set's
    images, the same batches on 1 and 3 threads, cold at the smallest cache and warm without a
    limit, and the cache's peak within its limit."""
    paths = [other_set, url]
    kw = dict(weights=[0.6, 0.4], samples_per_epoch=200)
    need = _smallest(paths, tmp_path / "c0", s3, **kw)
    with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / "c1"), cache_limit=need, endpoint=s3,
                        threads=1, **dict(STREAM_MIX, **kw)) as ld:
        assert [s["epoch_samples"] for s in ld.sources] == [120, 80]
        # What the check at open counted for the streamed source; nothing for the local one.
        assert [s["cache_needed_bytes"] for s in ld.sources] == [0, need]
        got = _epochs(ld, 4)
        st = ld.stream_stats()
    assert 0 < st["peak_cache_bytes"] <= need
    assert st["downloads"] > 30, "the smallest cache evicts and downloads again"
    with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / "c1"), endpoint=s3, threads=3,
                        **dict(STREAM_MIX, **kw)) as ld:
        again = _epochs(ld, 4)
    for e, (p, q) in enumerate(zip(got, again)):
        assert len(p) == len(q) == 50
        for n, (a, b) in enumerate(zip(p, q)):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), "epoch %d batch %d" % (e, n)
    local = _images_of(local_set)
    drawn = {0: [], 1: []}
    for epoch in got:
        for images, _, idx, src in epoch:
            n1 = int((src == 1).sum())
            assert abs(n1 - 0.4 * 4) < 1, "a batch holds %d of the streamed source" % n1
            for img, i, s in zip(images, idx.tolist(), src.tolist()):
                drawn[s].append(i)
                if s == 1:
                    assert torch.equal(img, local[i]), "streamed record %d" % i
    assert len(drawn[0]) == 480 and len(drawn[1]) == 320
    for s, count in ((0, 150), (1, 150)):
        d = drawn[s]
        for p in range(len(d) // count):
            assert sorted(d[p * count:(p + 1) * count]) == list(range(count)), (s, p)
        assert len(set(d[len(d) // count * count:])) == len(d) % count
    # Its passes are not the local set's shuffle: they walk shard windows (2 shards of 5).
    shard = [i // 5 for i in drawn[1][:150]]
    assert len(set(shard[:10])) <= 4


def test_streamed_source_resumes_exactly(other_set, url, s3, tmp_path):
    paths = [other_set, url]
    kw = dict(weights=[1, 1], samples_per_epoch=120)
    need = _smallest(paths, tmp_path / "c0", s3, **kw)
    opts = dict(cache_dir=str(tmp_path / "a"), cache_limit=need, endpoint=s3, threads=2,
                **dict(STREAM_MIX, **kw))
    with dlcache.Loader(paths, 4, **opts) as a:
        want = _epochs(a, 2)
        a.set_epoch(1)
        it = iter(a)
        for _ in range(11):
            next(it)
        state = a.state_dict()
    opts["cache_dir"] = str(tmp_path / "b")
    with dlcache.Loader(paths, 4, **opts) as b:
        b.load_state_dict(state)
        rest = [tuple(t.clone() for t in x) for x in b]
        b.set_epoch(2)
        nxt = [tuple(t.clone() for t in x) for x in b]
    with dlcache.Loader(paths, 4, **dict(opts, cache_dir=str(tmp_path / "c"))) as c:
        c.set_epoch(2)
        want2 = [tuple(t.clone() for t in x) for x in c]
    assert len(rest) == len(want[1]) - 11
    for p, q in zip(rest + nxt, want[1][11:] + want2):
        assert all(torch.equal(x, y) for x, y in zip(p, q))


def test_streamed_source_schema_mismatch_is_named(url, s3, tmp_path):
    samples = [{"image": np.zeros((48, 48, 3), np.uint8), "label": i, "weight": 0.5}
               for i in range(8)]
    odd = str(tmp_path / "odd.dlc")
    dlcache.write(samples, odd, progress=False)
    with pytest.raises(dlcache.DlcacheError) as e:
        dlcache.Loader([odd, url], 4, cache_dir=str(tmp_path / "c"), endpoint=s3,
                       **STREAM_MIX)
    msg = str(e.value)
    assert "s3://b/sets/s" in msg and "weight" in msg, msg


@pytest.fixture(scope="module")
def third_set(demo_dir, tmp_path_factory):
    """The demo images at another size, as a set of 3 shards: records of their own (a mixture
    refuses two sources of the same records)."""
    path = tmp_path_factory.mktemp("mixstream3") / "third"
    dlcache.build(str(demo_dir), str(path), size=40, threads=2, shards=3)
    return str(path)


@pytest.fixture(scope="module")
def url2(s3, third_set):
    """third_set pushed to s3://b/sets/o: a second streamed set (3 shards of 50)."""
    import subprocess
    from conftest import tool
    r = subprocess.run([tool("cachewarm"), "push", third_set, "s3://b/sets/o", "--endpoint", s3,
                        "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    return "s3://b/sets/o"


def test_two_streamed_sources_share_one_cache(other_set, third_set, local_set, url, url2, s3,
                                              tmp_path):
    """A local store and two streamed sets through one cache folder at the smallest limit (the
    sum of both sources' needs): each streamed source's passes are whole and its records are its
    local copy's, and the batches equal those of a run without a limit on another thread count."""
    paths = [other_set, url, url2]
    kw = dict(weights=[1, 2, 1], samples_per_epoch=160)
    need = _smallest(paths, tmp_path / "c0", s3, **kw)
    with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / "c1"), cache_limit=need, endpoint=s3,
                        threads=1, **dict(STREAM_MIX, **kw)) as ld:
        got = _epochs(ld, 4)
        st = ld.stream_stats()
    assert 0 < st["peak_cache_bytes"] <= need
    with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / "c2"), endpoint=s3, threads=3,
                        **dict(STREAM_MIX, **kw)) as ld:
        again = _epochs(ld, 4)
    for p, q in zip(got, again):
        for a, b in zip(p, q):
            assert all(torch.equal(x, y) for x, y in zip(a, b))
    local = {1: _images_of(local_set), 2: _images_of(third_set)}
    drawn = {0: [], 1: [], 2: []}
    for epoch in got:
        for images, _, idx, src in epoch:
            for img, i, s in zip(images, idx.tolist(), src.tolist()):
                drawn[s].append(i)
                if s:
                    assert torch.equal(img, local[s][i]), "source %d record %d" % (s, i)
    assert [len(drawn[s]) for s in (0, 1, 2)] == [160, 320, 160]
    for s in (1, 2):
        d = drawn[s]
        for p in range(len(d) // 150):
            assert sorted(d[p * 150:(p + 1) * 150]) == list(range(150)), (s, p)
        assert len(set(d[len(d) // 150 * 150:])) == len(d) % 150

def _streamed_draws(batches):
    return [i for _, _, idx, src in batches for i, s in zip(idx.tolist(), src.tolist()) if s == 1]


def test_streamed_source_on_two_ranks_and_under_new_weights(other_set, url, s3, tmp_path):
    """Two ranks sharing one cache folder read disjoint draws whose union is every record of
    the streamed source once per pass; a state saved under weights 1:1 and restored under 1:3
    continues its pass where it stood, so the run's draws of it still make whole passes."""
    paths = [other_set, url]
    kw = dict(samples_per_epoch=160, world_size=2, cache_ranks=2)
    need = _smallest(paths, tmp_path / "c0", s3, **kw)
    runs = []
    for rank in (0, 1):
        with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / "c1"), cache_limit=need,
                            endpoint=s3, threads=2, rank=rank, **dict(STREAM_MIX, **kw)) as ld:
            runs.append(_epochs(ld, 4))
    draws = []
    for e in range(4):
        r0, r1 = _streamed_draws(runs[0][e]), _streamed_draws(runs[1][e])
        assert len(r0) == len(r1)
        draws += [d for pair in zip(r0, r1) for d in pair]  # rows: rank 0's, then rank 1's
    assert len(draws) == 320
    for p in range(2):
        assert sorted(draws[p * 150:(p + 1) * 150]) == list(range(150)), p
    assert len(set(draws[300:])) == 20
    # A new mix at resume (one rank).
    opts = dict(cache_dir=str(tmp_path / "c2"), endpoint=s3, threads=2, **STREAM_MIX)
    with dlcache.Loader(paths, 4, weights=[1, 1], samples_per_epoch=100, **opts) as a:
        it = iter(a)
        before = [tuple(t.clone() for t in next(it)) for _ in range(9)]
        state = a.state_dict()
    with dlcache.Loader(paths, 4, weights=[1, 3], samples_per_epoch=100, **opts) as b:
        b.load_state_dict(state)
        after = [tuple(t.clone() for t in x) for x in b]
        for e in (1, 2, 3, 4):
            b.set_epoch(e)
            after += [tuple(t.clone() for t in x) for x in b]
    d = _streamed_draws(before) + _streamed_draws(after)
    assert len(d) >= 300
    for p in range(len(d) // 150):
        assert sorted(d[p * 150:(p + 1) * 150]) == list(range(150)), p


def test_damaged_streamed_shard_in_a_mixture(other_set, local_set, s3, tmp_path):
    """One shard of a streamed source damaged in the bucket, on_corrupt="replace": its records
    are replaced (the same way in two loaders, from the samples of their batch) and every healthy
    record of each source still comes each pass."""
    import shutil
    import subprocess
    import warnings
    from conftest import tool
    from test_stream import _shard_ranges
    bad = tmp_path / "damaged"
    shutil.copytree(local_set, bad)
    name, first, count = _shard_ranges(local_set)[7]
    p = bad / name
    b = bytearray(p.read_bytes())
    mid = len(b) // 2
    b[mid:mid + 64] = bytes(x ^ 0xFF for x in b[mid:mid + 64])
    p.write_bytes(bytes(b))
    r = subprocess.run([tool("cachewarm"), "push", str(bad), "s3://b/sets/mixdamaged",
                        "--endpoint", s3, "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    paths = [other_set, "s3://b/sets/mixdamaged"]
    runs = []
    for run in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            with dlcache.Loader(paths, 4, cache_dir=str(tmp_path / ("c%d" % run)), endpoint=s3,
                                threads=2, on_corrupt="replace", samples_per_epoch=300,
                                **STREAM_MIX) as ld:
                got = _epochs(ld, 2)
                st = ld.stats()
        assert st["corrupt_replaced"] == 2 * count, st["corrupt_replaced"]
        runs.append([[t.tolist() for t in (idx, src)] for e in got for _, _, idx, src in e])
        for e in got:
            d = _streamed_draws(e)
            assert not set(d) & set(range(first, first + count))
            assert set(range(150)) - set(range(first, first + count)) <= set(d)
            local = [i for _, _, idx, src in e for i, s in zip(idx.tolist(), src.tolist())
                     if s == 0]
            # Every local record once; a stand-in for a damaged one may be a local record of
            # the same batch (the batch's samples stand in for it), so some come twice.
            assert set(local) == set(range(150)) and len(local) >= 150
    assert runs[0] == runs[1], "the replacements differ between two loaders"


def test_a_streamed_source_first_gives_the_schema(other_set, url, s3, tmp_path):
    """The first source gives the schema the others must have, also when it streams (its index,
    fetched into cache_dir); store_info has the mixture's count."""
    with dlcache.Loader([url, other_set], 4, cache_dir=str(tmp_path / "c"), endpoint=s3,
                        threads=2, as_dict=True, **STREAM_MIX) as ld:
        b = next(iter(ld))
        assert b["image"].shape == (4, 32, 32, 3)
        assert set(b["source"].tolist()) <= {0, 1}
        assert ld.store_info["count"] == 300
        assert ld.num_classes == 5


@pytest.mark.parametrize("kw", [dict(weights=[5, 3, 2], samples_per_epoch=77),
                                dict(weights=[5, 3, 2], samples_per_epoch=77, drop_last=True),
                                dict(weights=[1, 1, 1], world_size=2, rank=1, drop_last=True),
                                dict(one=True)])
def test_a_restored_mixture_tells_its_epochs_end(sources, kw):
    """A state saved in the last batch of an epoch that began with a restore says the epoch is
    finished: the next Loader goes on to the next epoch instead of giving an empty one (or,
    under drop_last, the cut samples). A restored Loader cannot count its rank's share; the
    mixture's state tells where the epoch's draws end."""
    kw = dict(kw)
    paths = sources[:1] if kw.pop("one", False) else sources

    def mk():
        return _loader(paths, return_indices=True, return_source=True, **kw)

    a = mk()
    a.set_epoch(2)
    it = iter(a)
    next(it)
    r = mk()
    r.load_state_dict(a.state_dict())
    states = [r.state_dict() for _ in r]
    last = states[-1]
    assert len(states) == len(a) - 1 and last["epoch_finished"]
    assert not any(s["epoch_finished"] for s in states[:-1])
    r2 = mk()
    r2.load_state_dict(last)
    got = [b[2].tolist() for b in r2]
    a.set_epoch(3)
    want = [b[2].tolist() for b in a]
    assert r2.epoch == 3 and got == want and len(got) == len(a)
    for ld in (a, r, r2):
        ld.close()

"""dlcache.Loader streaming a store set from a real S3 server (s3rver on 127.0.0.1, started
here as tests/lib/warm.sh starts it: node and the s3rver package that npm installs into the
build directory), against the same set read locally:

- a streamed Loader gives the local set's batches in shard windows, byte for byte, with no
  cache limit and with the smallest limit dlcache.plan() says it needs; stream_stats() counts
  the downloads and the peak stays under the limit;
- a limit below that fails at open naming the bytes needed; a URL without cache_dir, or with
  an order other than shard windows, fails before anything is fetched;
- dlcache.plan() says the same of the URL as of the local set;
- state_dict() in shard windows (on the local set: the order is the same) saved mid-epoch by
  two ranks resumes into one or three ranks with the same streams, giving the rest of the
  epoch once; another streams value is refused with the library's message.

Without node, npm or an npm registry the tests that need the server skip, saying why."""

import fcntl
import filecmp
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings

import pytest
import torch

from conftest import BUILD, DEMO_COUNT, LIB, REPO, require_lib, tool

require_lib("dlc_loader_open", "dlc_loader_plan", "dlc_loader_open_store", "dlc_build")

import dlcache  # noqa: E402

SHARDS = 30
SET_SIZE = 48
# Shard windows of 2 shards (10 records) on 2 streams: several windows per epoch, so that a
# small cache evicts and downloads again. The batches in flight (prefetch) stay within two
# windows per stream, as the cache's minimum assumes (see loader/stream.c's check).
OPTS = dict(batch_size=4, prefetch=2, crop=32, seed=5, window_shards=2, streams=2, threads=2,
            return_indices=True)
S3_ENV = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
          "AWS_REGION": "us-east-1", "NO_PROXY": "127.0.0.1,localhost"}
UNSET = ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION",
         "GOOGLE_OAUTH_ACCESS_TOKEN", "DLCACHE_GCS_ENDPOINT", "http_proxy", "https_proxy",
         "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")


def _install_s3rver():
    """node_modules/s3rver under BUILD/warm-node, pinned by tests/lib/package-lock.json and
    shared with tests/lib/warm.sh (the same folder, lock file and check)."""
    for t in ("node", "npm"):
        if shutil.which(t) is None:
            pytest.skip("%s is not installed: no s3rver to stream from" % t)
    d = os.path.join(BUILD, "warm-node")
    os.makedirs(d, exist_ok=True)
    lock = os.path.join(REPO, "tests", "lib", "package-lock.json")
    with open(d + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        have = os.path.join(d, "node_modules", "s3rver", "package.json")
        mine = os.path.join(d, "package-lock.json")
        if not (os.path.isfile(have) and os.path.isfile(mine)
                and filecmp.cmp(lock, mine, shallow=False)):
            for f in ("package.json", "package-lock.json"):
                shutil.copy(os.path.join(REPO, "tests", "lib", f), d)
            with open(os.path.join(d, "npm.log"), "w") as log:
                try:
                    rc = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit",
                                         "--no-fund", "--loglevel=error"], cwd=d, stdout=log,
                                        stderr=subprocess.STDOUT, timeout=300).returncode
                except subprocess.TimeoutExpired:
                    rc = -1
            if rc != 0:
                with open(os.path.join(d, "npm.log")) as f:
                    tail = f.read()[-300:]
                pytest.skip("npm ci of s3rver failed (offline?): %s" % tail)
    return os.path.join(d, "node_modules", "s3rver", "bin", "s3rver.js")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """The endpoint URL of an s3rver with bucket "b", and its credentials in the environment
    (the library reads them at each call) for the session."""
    js = _install_s3rver()
    data = tmp_path_factory.mktemp("s3data")
    saved = {k: os.environ.get(k) for k in tuple(S3_ENV) + UNSET}
    os.environ.update(S3_ENV)
    for k in UNSET:
        os.environ.pop(k, None)
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    proc = url = None
    log = open(str(data) + ".log", "w")
    for _ in range(3):
        port = _free_port()
        proc = subprocess.Popen(["node", "--openssl-legacy-provider", js, "-d", str(data), "-a",
                                 "127.0.0.1", "-p", str(port), "--no-vhost-buckets", "--silent",
                                 "--configure-bucket", "b"], stdout=log, stderr=log)
        url = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                no_proxy.open(url + "/", timeout=2).close()
                break
            except urllib.error.HTTPError:
                break  # it answered
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            continue
        if proc.poll() is None:
            break
    else:
        proc = None
    try:
        if proc is None or proc.poll() is not None:
            log.flush()
            with open(str(data) + ".log") as f:
                pytest.fail("s3rver did not start: %s" % f.read()[-500:])
        yield url
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def local_set(demo_dir, tmp_path_factory):
    """A store set of demo_dir in SHARDS shards."""
    path = tmp_path_factory.mktemp("streamset") / "set"
    dlcache.build(str(demo_dir), str(path), size=SET_SIZE, threads=2, shards=SHARDS)
    return str(path)


@pytest.fixture(scope="session")
def url(s3, local_set, tmp_path_factory):
    """local_set pushed to s3://b/sets/s with cachewarm push."""
    r = subprocess.run([tool("cachewarm"), "push", local_set, "s3://b/sets/s", "--endpoint", s3,
                        "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    return "s3://b/sets/s"


def collect(loader):
    """Every batch of one epoch, cloned (the loader's tensors are only lent)."""
    return [tuple(t.clone() for t in b) for b in loader]


def same_batches(got, want):
    assert len(got) == len(want), "%d batches, the local set gives %d" % (len(got), len(want))
    for n, (p, q) in enumerate(zip(got, want)):
        assert all(torch.equal(s, t) for s, t in zip(p, q)), "batch %d differs" % n


def test_streamed_batches_are_the_local_sets(local_set, url, s3, tmp_path):
    with dlcache.Loader(local_set, sampler="windows", **OPTS) as ld:
        want = [collect(ld), collect(ld)]
        want_len, classes = len(ld), ld.classes
    need = dlcache.plan(url, world_size=1, **OPTS,  # the Loader's own arguments
                        cache_ranks=1, cache_dir=str(tmp_path / "plan"),
                        endpoint=s3)["cache_needed_bytes"]
    set_bytes = sum(os.path.getsize(os.path.join(local_set, f))
                    for f in os.listdir(local_set) if f.endswith(".dlc"))
    assert 0 < need < set_bytes, "the smallest cache is below the set, or nothing evicts"
    for limit in (None, need, "%dk" % -(-need // 1024)):
        cache = tmp_path / ("cache-%s" % limit)
        # The URL's default sampler is shard windows; cache_ranks=1 whatever the environment.
        with dlcache.Loader(url, cache_dir=cache, cache_limit=limit, cache_ranks=1,
                            endpoint=s3, **OPTS) as ld:
            assert len(ld) == want_len and ld.num_samples == DEMO_COUNT
            assert ld.classes == classes and ld.store_info["count"] == DEMO_COUNT
            for epoch in range(2):
                same_batches(collect(ld), want[epoch])
            st = ld.stream_stats()
        assert set(st) == {"stall_s", "hits", "misses", "bytes_fetched", "requests",
                           "peak_cache_bytes", "evictions", "downloads"}
        assert st["bytes_fetched"] >= set_bytes, "every shard was fetched at least once"
        assert st["requests"] >= SHARDS and st["downloads"] >= SHARDS
        assert st["hits"] + st["misses"] > 0 and st["stall_s"] >= 0
        if limit is None:
            assert st["evictions"] == 0 and st["downloads"] == SHARDS
        else:
            assert st["peak_cache_bytes"] <= dlcache._stream.parse_size(limit)
            assert st["evictions"] > 0, "a cache below the set evicts over two epochs"
    # A warm cache downloads nothing and gives the same batches.
    with dlcache.Loader(url, cache_dir=tmp_path / "cache-None", cache_ranks=1, endpoint=s3,
                        **OPTS) as ld:
        same_batches(collect(ld), want[0])
        assert ld.stream_stats()["downloads"] == 0


def _script(ld, state=None):
    """The same calls on any Loader: three batches, a jump to epoch 3 mid-epoch, five batches,
    a restore of @p state (when given) and the rest of that epoch. Cloned batches, and the state
    saved after the five."""
    out, it = [], iter(ld)
    for _ in range(3):
        out.append(tuple(t.clone() for t in next(it)))
    ld.set_epoch(3)
    it = iter(ld)
    for _ in range(5):
        out.append(tuple(t.clone() for t in next(it)))
    saved = ld.state_dict()
    if state is not None:
        ld.load_state_dict(state)
    out.extend(collect(ld))
    return out, saved


def test_resets_mid_epoch_at_the_smallest_cache_give_the_local_batches(local_set, url, s3,
                                                                      tmp_path):
    """set_epoch() and load_state_dict() while shards are pinned and downloads are under way:
    the plan changes under the cache, which must give back what the old plan held and never a
    wrong batch."""
    with dlcache.Loader(local_set, sampler="windows", **OPTS) as ld:
        _, state = _script(ld)
    with dlcache.Loader(local_set, sampler="windows", **OPTS) as ld:
        want, _ = _script(ld, state)
    need = dlcache.plan(url, world_size=1, **OPTS,  # the Loader's own arguments
                        cache_ranks=1, cache_dir=str(tmp_path / "plan"),
                        endpoint=s3)["cache_needed_bytes"]
    with dlcache.Loader(url, cache_dir=tmp_path / "c", cache_limit=need, cache_ranks=1,
                        endpoint=s3, **OPTS) as ld:
        got, _ = _script(ld, state)
        assert ld.stream_stats()["peak_cache_bytes"] <= need
    same_batches(got, want)


def test_streamed_loader_pickles_and_continues(url, s3, tmp_path):
    """Issue 34: the copy holds the arguments and the state, no credential (those come from
    the environment again), and continues the same batches."""
    import pickle
    with dlcache.Loader(url, cache_dir=tmp_path / "c", cache_ranks=1, endpoint=s3,
                        **OPTS) as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        blob = pickle.dumps(ld)
        assert os.environ["AWS_SECRET_ACCESS_KEY"].encode() not in blob
        want = [tuple(t.clone() for t in b) for b in it]
    twin = pickle.loads(blob)
    got = [tuple(t.clone() for t in b) for b in twin]
    twin.close()
    same_batches(got, want)


def test_too_small_cache_names_the_bytes_needed(url, s3, tmp_path):
    need = dlcache.plan(url, world_size=1, **OPTS,  # the Loader's own arguments
                        cache_ranks=1, cache_dir=str(tmp_path / "c"),
                        endpoint=s3)["cache_needed_bytes"]
    with pytest.raises(dlcache.InvalidArgumentError,
                       match=r"cache_limit = %d bytes is too small: %d bytes are needed"
                       % (need - 1, need)):
        dlcache.Loader(url, cache_dir=tmp_path / "c", cache_limit=need - 1, cache_ranks=1,
                       endpoint=s3, **OPTS)
    # Each process sharing the folder needs its windows: two need more than one.
    two = dlcache.plan(url, world_size=1, **OPTS,  # the Loader's own arguments
                       cache_ranks=2, cache_dir=str(tmp_path / "c"),
                       endpoint=s3)["cache_needed_bytes"]
    assert two > need
    with pytest.raises(dlcache.InvalidArgumentError, match="%d bytes are needed" % two):
        dlcache.Loader(url, cache_dir=tmp_path / "c", cache_limit=need, cache_ranks=2,
                       endpoint=s3, **OPTS)


def test_url_needs_cache_dir_and_shard_windows(tmp_path, monkeypatch):
    """Refused before anything is fetched: no server is needed."""
    with pytest.raises(ValueError, match=r"Loader\(s3://b/sets/s\).*pass cache_dir="):
        dlcache.Loader("s3://b/sets/s", 8)
    with pytest.raises(ValueError, match=r"gs://b/x\).*pass cache_dir="):
        dlcache.plan("gs://b/x", 8)
    with pytest.raises(ValueError, match="sampler must be 'windows'"):
        dlcache.Loader("s3://b/sets/s", 8, cache_dir=tmp_path, sampler="shuffle")
    with pytest.raises(ValueError, match="shuffle=False is not available"):
        dlcache.Loader("https://example.invalid/set", 8, cache_dir=tmp_path, shuffle=False)
    # The eval preset's record order is named as the preset's, with what to do; before, the
    # message blamed shuffle=False, which the caller never passed.
    with pytest.raises(ValueError, match=r"preset='eval' reads in record order.*shuffle=True"):
        dlcache.Loader("https://example.invalid/set", 8, cache_dir=tmp_path, preset="eval")
    for bad in ("50 parsecs", "-1", 0, "GB", 1.5, "10i"):
        with pytest.raises(ValueError, match="cache_limit"):
            dlcache.Loader("s3://b/sets/s", 8, cache_dir=tmp_path, cache_limit=bad)


def test_url_too_long_for_an_object_url_is_refused(tmp_path):
    """A set URL so long that a shard's URL would be cut short is refused before any fetch
    (no server listens at the endpoint), naming the limit, its query's secret redacted."""
    url = "https://example.invalid/set?X-Amz-Signature=SECRETSIG&pad=" + "a" * 4300
    with pytest.raises(Exception, match="longest a stream reads") as e:
        dlcache.Loader(url, 8, cache_dir=tmp_path, cache_ranks=1)
    assert "SECRETSIG" not in str(e.value)


def _deep_dir(base, length):
    """A folder under @p base whose absolute path is @p length bytes (Linux's PATH_MAX is 4096
    with the NUL): folders of 200 bytes, then one of the rest."""
    p = str(base)
    while length - len(p) - 1 > 250:
        p = os.path.join(p, "d" * 200)
    p = os.path.join(p, "e" * (length - len(p) - 1))
    os.makedirs(p)
    assert len(p) == length
    return p


@pytest.mark.parametrize("length", [4000, 4070, 4095])
def test_cache_dir_near_path_max_streams_or_is_refused(local_set, url, s3, tmp_path, length):
    """A cache folder whose path is close to PATH_MAX (past 4,050 bytes its shards' paths,
    DIR/SETID/NAME, are longer than any path the system takes): the loader gives the local
    set's batches or refuses, saying the path is too long; never is a file made at a cut path
    (issue H7)."""
    with dlcache.Loader(local_set, sampler="windows", **OPTS) as ld:
        want = collect(ld)
    cache = _deep_dir(tmp_path, length)
    try:
        with dlcache.Loader(url, cache_dir=cache, cache_ranks=1, endpoint=s3, **OPTS) as ld:
            same_batches(collect(ld), want)
    except Exception as e:  # noqa: BLE001 - the library's error, whichever class
        assert "too long" in str(e), str(e)[-400:]
    # Only names the cache makes: its lock, a set's folder, and in it the index and shards.
    names = set(os.listdir(local_set))
    for root, dirs, files in os.walk(cache):
        rel = os.path.relpath(root, cache)
        for f in files:
            if rel == ".":
                assert f == ".dlcs.lock", "%s in the cache folder" % f
            else:
                assert f in names, "%s/%s: not a name of the set (a cut path?)" % (rel, f)
        if rel == ".":
            assert all(len(d) == 16 for d in dirs), dirs


def test_cache_limit_sizes():
    parse = dlcache._stream.parse_size
    assert parse(4096) == parse("4096") == parse("4k") == parse("4KiB") == 4096
    # kB, MB, GB: powers of 1000; KiB, MiB, GiB and K, M, G: powers of 1024 (issue 34).
    assert parse("4KB") == 4000 and parse("6MB") == 6 * 10**6 and parse("50GB") == 50 * 10**9
    assert parse("50G") == parse("50gib") == 50 << 30
    assert parse("500MiB") == 500 << 20 and parse("1.5G") == 3 << 29


def test_plan_of_url_is_the_local_sets(local_set, url, s3, tmp_path):
    kw = dict(window_shards=2, streams=2, cache_ranks=1)
    for world in (1, 2, 3):
        here = dlcache.plan(local_set, 8, world_size=world, **kw)
        there = dlcache.plan(url, 8, world_size=world, cache_dir=str(tmp_path), endpoint=s3, **kw)
        assert here == there, "world size %d" % world
        assert here["shards"] == SHARDS and here["streams"] == 2
        assert here["epoch_samples"] >= DEMO_COUNT
        with dlcache.Loader(local_set, sampler="windows", rank=0, world_size=world, crop=8,
                            batch_size=8, window_shards=2, streams=2) as ld:
            assert len(ld) == here["batches_per_rank"]
    assert 0 <= here["batch_same_shard"] <= 1 and 0 <= here["neighbour_same_shard"] <= 1


def _indices(loader, n=None):
    out = []
    for k, (_, _, idx) in enumerate(loader):
        out.append(idx.clone())
        if n is not None and k + 1 == n:
            break
    return torch.cat(out).tolist() if out else []


@pytest.mark.parametrize("new_world", [1, 3])
def test_state_dict_resumes_into_another_world_size(local_set, new_world):
    """Two ranks of two streams take 3 batches each and save; the new ranks, opened with the
    same streams, deliver the rest of the epoch once (plus padding to equal shares)."""
    kw = dict(batch_size=6, crop=8, seed=11, sampler="windows", window_shards=2, streams=2,
              return_indices=True)
    seen, states = [], []
    for r in range(2):
        with dlcache.Loader(local_set, rank=r, world_size=2, **kw) as a:
            seen += _indices(a, 3)
            states.append(a.state_dict())
    assert states[0]["state"] == states[1]["state"], "every rank saves the same position"
    assert states[0]["streams"] == 2 and states[0]["window_shards"] == 2
    assert len(set(seen)) == len(seen) == 36
    rest = []
    for r in range(new_world):
        with dlcache.Loader(local_set, rank=r, world_size=new_world, **kw) as b:
            b.load_state_dict(states[0])
            rest.append(_indices(b))
    together = sum(rest, [])
    assert len({len(x) for x in rest}) == 1, "equal shares, like DistributedSampler"
    assert not set(seen) & set(together), "nothing delivered twice across the resume"
    assert set(together) == set(range(DEMO_COUNT)) - set(seen), "each remaining sample"
    assert len(together) - len(set(together)) < new_world, "only padding repeats"


def test_state_dict_refuses_other_streams(local_set):
    kw = dict(batch_size=6, crop=8, sampler="windows", window_shards=2, return_indices=True)
    with dlcache.Loader(local_set, rank=0, world_size=2, **kw) as a:
        _indices(a, 2)
        sd = a.state_dict()
    assert sd["streams"] == 2, "streams defaults to the world size"
    # world_size 3 with the default streams (3), and streams given as 4: both refused, naming
    # the saved values.
    for extra in ({}, {"streams": 4}):
        with dlcache.Loader(local_set, rank=0, world_size=3, **kw, **extra) as b:
            with pytest.raises(dlcache.InvalidArgumentError,
                               match="saved with streams = 2 and window_shards = 2"):
                b.load_state_dict(sd)
    with dlcache.Loader(local_set, rank=0, world_size=3, streams=2, window_shards=3,
                        **{k: v for k, v in kw.items() if k != "window_shards"}) as b:
        with pytest.raises(dlcache.InvalidArgumentError, match="window_shards"):
            b.load_state_dict(sd)


def _shard_ranges(local_set):
    """[(name, first, count)] of the set's shards, from cacheinfo's JSON of each."""
    import json
    out, first = [], 0
    for name in sorted(f for f in os.listdir(local_set) if f.endswith(".dlc")):
        r = subprocess.run([tool("cacheinfo"), os.path.join(local_set, name), "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        n = json.loads(r.stdout)["count"]
        out.append((name, first, n))
        first += n
    return out


def test_damaged_shard_costs_only_its_records(local_set, s3, tmp_path, caplog):
    """Issue 23, item 1: one shard of the bucket's copy damaged (bytes of its records changed,
    its ETag the damaged bytes' own, as an uploader of bad bytes makes it), on_corrupt="replace":
    only that shard's records are replaced, the same ones in two loaders, every healthy record
    comes every epoch, corrupt_replaced counts the shard's records, and the shard is fetched
    once (not again each time a batch reads it)."""
    bad = tmp_path / "damaged"
    shutil.copytree(local_set, bad)
    ranges = _shard_ranges(local_set)
    name, first, count = ranges[7]
    p = bad / name
    b = bytearray(p.read_bytes())
    mid = len(b) // 2
    b[mid:mid + 64] = bytes(x ^ 0xFF for x in b[mid:mid + 64])
    p.write_bytes(bytes(b))
    r = subprocess.run([tool("cachewarm"), "push", str(bad), "s3://b/sets/damaged", "--endpoint",
                        s3, "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    bad_records = set(range(first, first + count))
    healthy = set(range(DEMO_COUNT)) - bad_records
    runs = []
    caplog.set_level(logging.WARNING, logger="dlcache")
    for run in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            with dlcache.Loader("s3://b/sets/damaged", cache_dir=tmp_path / ("c%d" % run),
                                cache_ranks=1, endpoint=s3, on_corrupt="replace", **OPTS) as ld:
                epochs = [_indices(ld), _indices(ld)]
                st, ss = ld.stats(), ld.stream_stats()
        runs.append(epochs)
        for e, idx in enumerate(epochs):
            got = set(idx)
            assert not got & bad_records, "run %d epoch %d delivered the damaged shard's " \
                "records %s" % (run, e, sorted(got & bad_records)[:5])
            missing = healthy - got
            assert not missing, "run %d epoch %d missed %d healthy records: %s" % (
                run, e, len(missing), sorted(missing)[:10])
            assert len(idx) == DEMO_COUNT
        assert st["corrupt_replaced"] == 2 * count, \
            "%d replaced in two epochs for a shard of %d" % (st["corrupt_replaced"], count)
        shard_bytes = os.path.getsize(os.path.join(local_set, name))
        set_bytes = sum(os.path.getsize(os.path.join(local_set, f))
                        for f in os.listdir(local_set) if f.endswith(".dlc"))
        index_bytes = os.path.getsize(os.path.join(local_set, "index.dlcset"))
        assert ss["downloads"] == SHARDS - 1
        assert ss["bytes_fetched"] <= set_bytes + shard_bytes + index_bytes, \
            "the damaged shard was fetched more than twice: %d bytes for a set of %d" % (
                ss["bytes_fetched"], set_bytes)
    assert runs[0] == runs[1], "the replacements differ between two loaders"
    said = [r.getMessage() for r in caplog.records
            if "replaced" in r.getMessage() and "epoch" in r.getMessage()]
    assert said and all("verify = off" not in m for m in said), said


# Run in a child, so that a planning that does not stop fails by the timeout instead of hanging
# the session: the open (or plan()) of argv[1] with a network progress callback that answers stop
# once a call has run 0.3 s (the index's download takes milliseconds; planning asks about ten
# times a second). Prints the error's class and message.
_STOP_CHILD = r"""
import ctypes, sys
import dlcache
from dlcache import _lib as L, _stream

url, cache, endpoint, how, local = sys.argv[1:]
apply = _stream.apply


@L.WARM_PROGRESS_FN
def stop(_user, p):
    return 1 if p.contents.seconds >= 0.3 else 0


def with_stop(cfg, *a, **k):
    apply(cfg, *a, **k)
    if cfg.net:
        cfg.net.contents.progress = stop


_stream.apply = with_stop
try:
    if how == "open":
        dlcache.Loader(url, cache_dir=cache, cache_ranks=1, endpoint=endpoint, batch_size=8,
                       crop=32, window_shards=2)
    elif how == "mix":
        dlcache.Loader([url, local], cache_dir=cache, cache_ranks=1, endpoint=endpoint,
                       batch_size=8, crop=32, window_shards=2)
    else:
        dlcache.plan(url, 8, window_shards=2, world_size=1, cache_ranks=1, cache_dir=cache,
                     endpoint=endpoint)
    print("accepted")
except dlcache.DlcacheError as e:
    print(type(e).__name__, e)
"""


def _push_lying_index(local_set, s3, tmp_path, name, shards):
    """local_set pushed as s3://b/sets/NAME with an index whose first @p shards shards claim
    sizes a cache folder could hold and counts as large as those sizes allow (48 bytes a
    record): the URL, and the records claimed."""
    r = subprocess.run([tool("cachewarm"), "push", local_set, "s3://b/sets/" + name,
                        "--endpoint", s3, "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    sv = os.statvfs(str(tmp_path))
    size = min(sv.f_blocks * sv.f_frsize // (2 * shards), (1 << 31) * 48)
    lie = tmp_path / "index.dlcset"
    edits = []
    for k in range(1, shards + 1):
        edits += ["--count", "%d=%d" % (k, size // 48), "--bytes", "%d=%d" % (k, size)]
    r = subprocess.run([tool("stream_index_edit"), os.path.join(local_set, "index.dlcset"),
                        str(lie)] + edits, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([tool("cachewarm"), "push", str(lie), "s3://b/sets/%s/index.dlcset" % name,
                        "--endpoint", s3, "-q"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "cachewarm push of the index: %s" % r.stderr
    return "s3://b/sets/" + name, shards * (size // 48)


def test_planning_a_lying_index_in_a_mixture_stops_when_asked(local_set, s3, tmp_path):
    """Issue 23, item 7: an index whose shard sizes a cache folder could hold, but whose counts
    (as large as those sizes allow) would take minutes to plan: a mixture's plan walks every
    record of its streamed sources, and asks the network options' progress callback (Python's
    Ctrl-C, with the SIGINT handler of the open) about ten times a second whether to stop."""
    url, n = _push_lying_index(local_set, s3, tmp_path, "slow-mix", 1)
    try:
        r = subprocess.run([sys.executable, "-c", _STOP_CHILD, url, str(tmp_path / "c"), s3,
                            "mix", local_set], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("planning %d records did not stop when asked" % n)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("CanceledError") and "planning the epoch" in r.stdout, r.stdout


@pytest.mark.parametrize("how", ["open", "plan"])
def test_planning_lying_counts_follows_the_shards(local_set, s3, tmp_path, how):
    """Issue 32, item 5: 16 shards claiming counts as large as their sizes allow (2^28 each took
    minutes to walk): a loader in shard windows plans a share that large from its windows, so
    the open and plan() are done long before the progress callback's stop at 0.3 s, which would
    cancel a walk of the records."""
    url, n = _push_lying_index(local_set, s3, tmp_path, "lying-" + how, 16)
    assert n > 1 << 26, "the lie claims %d records" % n
    try:
        r = subprocess.run([sys.executable, "-c", _STOP_CHILD, url, str(tmp_path / "c"), s3,
                            how, local_set], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("planning %d records claimed by 16 shards did not end" % n)
    assert r.returncode == 0, r.stderr
    assert not r.stdout.startswith("CanceledError"), r.stdout


def test_batches_of_a_damaged_shard_alone_are_replaced_from_healthy_shards(local_set, s3,
                                                                           tmp_path):
    """Issue 23, on_corrupt="replace" with one-shard windows: a batch whose records all come
    from the damaged shard has no healthy record of its own to stand in; the stand-ins come from
    a healthy shard chosen from the plan (a pure function of seed, epoch and position), the same
    in two loaders. Before, such a batch failed after 64 candidates."""
    bad = tmp_path / "damaged1"
    shutil.copytree(local_set, bad)
    name, first, count = _shard_ranges(local_set)[11]
    p = bad / name
    b = bytearray(p.read_bytes())
    mid = len(b) // 2
    b[mid:mid + 64] = bytes(x ^ 0xFF for x in b[mid:mid + 64])
    p.write_bytes(bytes(b))
    r = subprocess.run([tool("cachewarm"), "push", str(bad), "s3://b/sets/damaged1",
                        "--endpoint", s3, "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "cachewarm push: %s" % r.stderr
    bad_records = set(range(first, first + count))
    healthy = set(range(DEMO_COUNT)) - bad_records
    opts = dict(OPTS, batch_size=1, window_shards=1, streams=1)
    runs = []
    for run in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            with dlcache.Loader("s3://b/sets/damaged1", cache_dir=tmp_path / ("c%d" % run),
                                cache_ranks=1, endpoint=s3, on_corrupt="replace", **opts) as ld:
                epochs = [_indices(ld), _indices(ld)]
                replaced = ld.stats()["corrupt_replaced"]
        runs.append(epochs)
        for e, idx in enumerate(epochs):
            assert len(idx) == DEMO_COUNT
            assert not set(idx) & bad_records, "the damaged shard's records were delivered"
            assert healthy <= set(idx), "healthy records were missed"
        assert replaced == 2 * count
    assert runs[0] == runs[1], "the stand-ins differ between two loaders"


# The children of the Ctrl-C tests: a streamed Loader whose shards stall (at a 60 s timeout).
# Each prints "waiting" before next() waits, then one line saying how the wait ended, then how
# long close() took, and whether SIGINT's handler and the wakeup fd are what the program set.
_OPEN = r"""
import asyncio, signal, sys, threading, time
import dlcache

url, cache, endpoint = sys.argv[1:]
ld = dlcache.Loader(url, cache_dir=cache, cache_ranks=1, endpoint=endpoint, batch_size=4,
                    crop=32, window_shards=2, threads=2, timeout=60)
"""

# Iterated on the main thread with Python's own SIGINT handling.
_NEXT_CHILD = _OPEN + r"""
it = iter(ld)
print("waiting", flush=True)
try:
    next(it)
    print("batch", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
t = time.monotonic()
ld.close()
took = time.monotonic() - t
print("closed %.3f" % took, flush=True)
print("restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.set_wakeup_fd(-1) == -1, flush=True)
"""

# The program's own SIGINT handler, which raises its own exception.
_OWN_HANDLER_CHILD = _OPEN + r"""
class Stop(Exception):
    pass


def mine(_signum, _frame):
    raise Stop()


signal.signal(signal.SIGINT, mine)
it = iter(ld)
print("waiting", flush=True)
try:
    next(it)
    print("batch", flush=True)
except Stop:
    print("interrupted", flush=True)
t = time.monotonic()
ld.close()
print("closed %.3f" % (time.monotonic() - t), flush=True)
print("restored", signal.getsignal(signal.SIGINT) is mine, signal.set_wakeup_fd(-1) == -1,
      flush=True)
"""

# asyncio.run() (its own SIGINT handler, which cancels the main task), next() in the event
# loop's thread, with asyncio's wakeup fd set (add_signal_handler() sets it).
_ASYNC_LOOP_CHILD = _OPEN + r"""
async def main():
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: None)
    it = iter(ld)
    print("waiting", flush=True)
    try:
        next(it)
        print("batch", flush=True)
    except asyncio.CancelledError:
        print("cancelled", flush=True)
        raise

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
t = time.monotonic()
ld.close()
print("closed %.3f" % (time.monotonic() - t), flush=True)
print("restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.set_wakeup_fd(-1) == -1, flush=True)
"""

# asyncio.run() with next() in the default executor's thread: Ctrl-C cancels the task that
# awaits it, which closes the Loader; asyncio.run() then waits for the executor's thread, whose
# wait the close() ends.
_ASYNC_EXECUTOR_CHILD = _OPEN + r"""
async def main():
    it = iter(ld)
    print("waiting", flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, next, it)
        print("batch", flush=True)
    finally:
        ld.close()

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
t = time.monotonic()
ld.close()
print("closed %.3f" % (time.monotonic() - t), flush=True)
print("restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.set_wakeup_fd(-1) == -1, flush=True)
"""

# next() on another thread; the main thread waits for it, gets the KeyboardInterrupt, and
# closes the Loader, which ends the other thread's wait.
_THREAD_CHILD = _OPEN + r"""
ended = []
# The thread's end is told by an Event, not by Thread.join()/is_alive(): a join that Ctrl-C
# interrupts can leave CPython's thread state saying "stopped" while the thread still runs
# (join() then returns at once and is_alive() is False before `ended` is written).
done = threading.Event()


def run():
    try:
        next(iter(ld))
        ended.append("batch")
    except Exception as e:
        ended.append(type(e).__name__)
    finally:
        done.set()


th = threading.Thread(target=run, daemon=True)
th.start()
print("waiting", flush=True)
try:
    while not done.wait(0.5):
        pass
    print("batch", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
t = time.monotonic()
ld.close()
end = ended[0] if done.wait(30) else "alive"
print("closed %.3f" % (time.monotonic() - t), end, flush=True)
print("restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.set_wakeup_fd(-1) == -1, flush=True)
"""


@pytest.mark.parametrize("child_src", [
    pytest.param(_NEXT_CHILD, id="main_thread"),
    pytest.param(_OWN_HANDLER_CHILD, id="own_handler"),
    pytest.param(_ASYNC_LOOP_CHILD, id="asyncio_loop_thread"),
    pytest.param(_ASYNC_EXECUTOR_CHILD, id="asyncio_executor"),
    pytest.param(_THREAD_CHILD, id="other_thread"),
])
def test_ctrl_c_stops_a_next_that_waits(local_set, url, s3, tmp_path, child_src):
    """Issue 23, item 6: Ctrl-C while next() waits for a shard that a stalled server holds (every
    shard's download stalls after a third of its bytes, the timeout is 60 s) ends the wait at
    once, and close() then returns at once, whatever the program's signal handling: Python's
    own (KeyboardInterrupt), the program's own handler (its exception), asyncio.run() with next()
    in the event loop's thread (the main task is cancelled: KeyboardInterrupt) or in its
    executor (the cancelled task closes the Loader, which ends the executor thread's wait), and
    next() on another thread (KeyboardInterrupt in the main thread, whose close() ends the other
    thread's wait with "closed"). The program's SIGINT handler and wakeup fd are left as they
    were. Before, only the first case worked (a SIGINT watch armed where SIGINT's handler was
    Python's, on the main thread): the others saw Ctrl-C when the download's timeout ended, and
    a close() from another thread freed the loader under the waiting call. The bounds (5 s,
    against the 60 s a timeout takes) tell a hang from an answer; they measure no speed."""
    port_file = tmp_path / "proxy.port"
    # The index passes; every shard's download stalls for 10 minutes.
    proxy = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "lib", "faultproxy.py"),
                              "--upstream", "127.0.0.1:" + s3.rsplit(":", 1)[1], "--port-file",
                              str(port_file), "--pattern", "stall", "--only", ".dlc",
                              "--stall", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    guard = None
    try:
        for _ in range(100):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        via = "http://127.0.0.1:%s" % port_file.read_text().strip()
        env = dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))
        # The child's SIGINT is the default, so that Python installs its handler, whatever the
        # runner's parent did with it (a background job of a script starts with it ignored).
        child = subprocess.Popen([sys.executable, "-c", child_src, url, str(tmp_path / "c"),
                                  via], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # A child that hangs is killed (its lines end): a failure, not a hung session.
        guard = threading.Timer(120, child.kill)
        guard.start()
        assert child.stdout.readline().strip() == "waiting", child.stderr.read()[-2000:]
        # Let next() reach C and the downloads stall, then one Ctrl-C.
        time.sleep(2)
        assert child.poll() is None, child.stderr.read()[-2000:]
        t = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().strip()
        if child_src is _ASYNC_LOOP_CHILD:
            # The main task's wait ends (CancelledError), and asyncio.run() says why.
            assert line == "cancelled", (line, child.stderr.read()[-2000:])
            line = child.stdout.readline().strip()
        seen = time.monotonic() - t
        assert line == "interrupted", (line, child.stderr.read()[-2000:])
        assert seen < 5, "Ctrl-C was seen after %.1f s" % seen
        closed = child.stdout.readline().split()
        assert closed and closed[0] == "closed", (closed, child.stderr.read()[-2000:])
        assert float(closed[1]) < 5, "close() took %s s" % closed[1]
        if child_src is _THREAD_CHILD:
            assert closed[2:] == ["ValueError"], "the other thread's next(): %s" % closed[2:]
        assert child.stdout.readline().split() == ["restored", "True", "True"]
        child.wait(30)
        assert child.returncode == 0, child.stderr.read()[-2000:]
    finally:
        if guard is not None:
            guard.cancel()
        for p in (child, proxy):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()

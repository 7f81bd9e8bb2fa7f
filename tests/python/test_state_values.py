"""What a Loader returns and saves, and the values it is given (issue 32, items 9 to 11):

- a state_dict() names the store it came from (its content digest; a URL with its secrets
  redacted): another store of as many records refuses it, naming both digests; every field of
  the dict is checked (type, range, agreement with the checksummed state), so an edited
  "epoch" (-5, or any other than the state's) is refused rather than obeyed;
- store_info["path"], sources[i]["path"] and state_dict()["mixture"]["paths"] of a URL with a
  password and an X-Amz-Signature hold neither, and the state still resumes the mixture when
  the caller gives the URLs again (signed anew);
- huge equal weights (1e308, 9e307) draw equal shares; non-finite, negative and all-zero
  weights are refused with a ValueError."""

import http.server
import os
import threading
import warnings

import numpy as np
import pytest

from conftest import require_lib

require_lib("dlc_loader_open_mix", "dlc_warm_redact_text")

import dlcache  # noqa: E402

SECRETS = ("PWSECRET", "SIGSECRET", "SIGAGAIN")


def _write(path, n, base):
    samples = [{"image": np.full((4, 4, 3), (base + i) % 251, np.uint8), "label": i % 2}
               for i in range(n)]
    dlcache.write(samples, str(path), progress=False, label_names=["a", "b"])
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two stores of 40 records each that differ in content, and a third of 20."""
    d = tmp_path_factory.mktemp("values")
    return [_write(d / "a.dlc", 40, 0), _write(d / "b.dlc", 40, 100), _write(d / "c.dlc", 20, 7)]


def _loader(path, **kw):
    kw.setdefault("crop", 4)
    kw.setdefault("threads", 1)
    kw.setdefault("seed", 3)
    return dlcache.Loader(path, 8, **kw)


def _mid_state(path, **kw):
    with _loader(path, **kw) as ld:
        it = iter(ld)
        next(it)
        next(it)
        return ld.state_dict()


# ------------------------------------------------------------ item 11: whose state it is
def test_state_of_another_store_is_refused_naming_both(stores):
    a, b = stores[0], stores[1]
    sd = _mid_state(a)
    da = dlcache.info(a)["content_digest"]
    db = dlcache.info(b)["content_digest"]
    assert da != db and dlcache.info(a)["count"] == dlcache.info(b)["count"]
    assert sd["content_digest"] == da and sd["source"] == a
    with _loader(b) as ld:
        with pytest.raises(ValueError) as ei:
            ld.load_state_dict(sd)
        msg = str(ei.value)
        assert "%016x" % da in msg and "%016x" % db in msg, msg
        assert os.path.basename(a) in msg and os.path.basename(b) in msg, msg
    with _loader(a) as ld:  # its own store takes it
        ld.load_state_dict(sd)
        assert ld.epoch == sd["epoch"]


@pytest.mark.parametrize("key,value", [
    ("epoch", -5), ("epoch", 2**64 - 4), ("epoch", "0"), ("epoch", 1.0), ("epoch", True),
    ("epoch", 7), ("seed", -1), ("seed", 4), ("batch_size", 0), ("world_size", "2"),
    ("epoch_finished", "yes"), ("content_digest", -1), ("content_digest", 12345),
    ("content_digest", None), ("dlcache_loader_state", 3), ("dlcache_loader_state", "2"),
    ("num_samples", -40)])
def test_every_field_of_the_dict_is_checked(stores, key, value):
    sd = _mid_state(stores[0])
    sd[key] = value
    with _loader(stores[0]) as ld:
        before = ld.epoch
        with pytest.raises(ValueError):
            ld.load_state_dict(sd)
        assert ld.epoch == before, "a refused state changes nothing"


def test_a_state_of_version_1_is_taken_with_a_warning(stores):
    """A dict of the version before states named their store: its C state is still the
    checksummed one of this store, matched by its record count."""
    sd = _mid_state(stores[0])
    old = {k: v for k, v in sd.items() if k not in ("source", "content_digest")}
    old["dlcache_loader_state"] = 1
    with _loader(stores[0]) as ld:
        with pytest.warns(RuntimeWarning, match="names no store"):
            ld.load_state_dict(old)
    with _loader(stores[0]) as ld, warnings.catch_warnings():
        warnings.simplefilter("error")
        ld.load_state_dict(sd)  # a current one: no warning


def test_a_mixture_state_holds_the_digests(stores):
    sd = _mid_state([stores[0], stores[2]])
    mix = sd["mixture"]
    assert mix["content_digests"] == [dlcache.info(p)["content_digest"]
                                      for p in (stores[0], stores[2])]
    bad = dict(sd, mixture=dict(mix, content_digests=["x", 1]))
    with _loader([stores[0], stores[2]]) as ld:
        with pytest.raises(ValueError, match="content_digests"):
            ld.load_state_dict(bad)
        ld.load_state_dict(sd)


# ------------------------------------------------------------ item 10: weights
@pytest.mark.parametrize("w", [1e308, 9e307, 1.7e308, 5e-324])
def test_huge_or_tiny_equal_weights_draw_equal_shares(stores, w):
    with _loader([stores[0], stores[1]], weights=[w, w], samples_per_epoch=40) as ld:
        assert [s["epoch_samples"] for s in ld.sources] == [20, 20]


def test_huge_unequal_weights_keep_their_ratio(stores):
    with _loader([stores[0], stores[1]], weights=[1.5e308, 5e307], samples_per_epoch=40) as ld:
        assert [s["epoch_samples"] for s in ld.sources] == [30, 10]


@pytest.mark.parametrize("weights", [[float("inf"), 1], [float("nan"), 1], [-1, 1], [0, 0],
                                     [0.0, -0.0], [1, 10**400]])
def test_bad_weights_are_refused(stores, weights):
    with pytest.raises(ValueError, match="weight"):
        _loader([stores[0], stores[1]], weights=weights)


# ------------------------------------------------------------ item 9: no secrets returned
class _Files(http.server.SimpleHTTPRequestHandler):
    """Files of a folder over HTTP with Range (what the streaming loader asks), any user and any
    query string taken."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def translate_path(self, path):
        return super().translate_path(path.split("?", 1)[0])

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return None
        with open(path, "rb") as f:
            data = f.read()
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            first = int(first)
            last = min(int(last), len(data) - 1) if last else len(data) - 1
            body = data[first:last + 1]
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, len(data)))
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        import io
        return io.BytesIO(body)


@pytest.fixture(scope="module")
def served(demo_dir, tmp_path_factory):
    """An http:// URL (with a user:password and a signed query) of a 4-shard set."""
    root = tmp_path_factory.mktemp("served")
    dlcache.build(str(demo_dir), str(root / "set"), size=16, threads=1, shards=4)

    def handler(*a, **k):
        return _Files(*a, directory=str(root), **k)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://u:PWSECRET@127.0.0.1:%d/set" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _no_secret(obj):
    text = repr(obj)
    for s in SECRETS:
        assert s not in text, "%s in %s" % (s, text)


def test_returned_and_saved_paths_hold_no_secret(served, stores, tmp_path, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("http_proxy", "HTTP_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    url = served + "?X-Amz-Signature=SIGSECRET&X-Amz-Credential=k"
    kw = dict(sampler="windows", window_shards=2, cache_dir=str(tmp_path / "c1"))
    with _loader(url, **kw) as ld:
        next(iter(ld))
        _no_secret(ld.store_info)
        assert "127.0.0.1" in ld.store_info["path"]
        sd = ld.state_dict()
        _no_secret(sd)
        assert sd["content_digest"] == ld.store_info["content_digest"]
    mixkw = dict(cache_dir=str(tmp_path / "c2"), weights=[1, 1], samples_per_epoch=16)
    with _loader([url, stores[2]], **mixkw) as ld:
        it = iter(ld)
        next(it)
        _no_secret(ld.store_info)
        _no_secret(ld.sources)
        sd = ld.state_dict()
        _no_secret(sd)
        _no_secret(repr(ld))
        want = [b for b in it]
    # The caller gives the URLs again, signed anew: the state finds its sources.
    again = served + "?X-Amz-Signature=SIGAGAIN&X-Amz-Credential=k"
    with _loader([again, stores[2]], **dict(mixkw, cache_dir=str(tmp_path / "c3"))) as ld:
        ld.load_state_dict(sd)
        got = [b for b in ld]
        _no_secret(ld.sources)
    assert len(got) == len(want)
    for (gi, gl), (wi, wl) in zip(got, want):
        assert bool((gi == wi).all()) and bool((gl == wl).all())

"""Loader.report(): the verdict in staged situations, and shares that add up.

- a loop that sleeps 50 ms a step on a store in the page cache: "model";
- RandomResizedCrop to float32 on one thread, a loop that does nothing: "cpu";
- a loop that keeps every batch (so each is copied out of its slot): "consumer";
- streaming through the throttling proxy of tests/lib (faultproxy.py --rate) at a rate below
  what the loader consumes: "network".
Each report's shares are in [0, 1] and the loop's wait plus its time away make the window's
wall time within 5 %. No timed assertion: only verdicts and invariants."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, require_lib, tool

require_lib("dlc_loader_get_report")

import dlcache  # noqa: E402
from test_stream import s3  # noqa: E402,F401 (the fixture: an s3rver on 127.0.0.1)

SHARES = ("input_share", "io_busy_share", "io_read_share", "io_stall_share", "io_held_share",
          "io_full_share", "io_idle_share", "workers_busy_share", "workers_io_share",
          "workers_idle_share", "workers_cpu_share", "copy_busy_share", "copy_idle_share")


def check_invariants(rep):
    d = rep.as_dict()
    for k in SHARES:
        assert 0.0 <= d[k] <= 1.0, (k, d[k])
    assert d["wall_seconds"] > 0
    step = d["wait_seconds"] + d["away_seconds"]
    assert abs(step - d["wall_seconds"]) <= 0.05 * d["wall_seconds"], d
    assert d["bound"] in ("model", "cpu", "storage", "network", "copy", "consumer", "batch")
    assert d["reason"] and d["advice"]
    text = str(rep)
    assert "bound: %s" % rep.bound in text, text
    json.dumps(d)  # plain numbers and strings
    print(text)


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """160 raw 256x256 RGB images: heavy enough for RandomResizedCrop to float32."""
    rng = np.random.default_rng(3)
    samples = [(rng.integers(0, 255, (256, 256, 3), dtype=np.uint8), i % 4) for i in range(160)]
    path = tmp_path_factory.mktemp("report") / "big.dlc"
    dlcache.write(samples, str(path), workers=2)
    return str(path)


def test_model_bound_when_the_loop_sleeps(store):
    with dlcache.Loader(store, batch_size=8, crop=48, threads=2, prefetch=4) as ld:
        for n, _ in enumerate(ld):
            time.sleep(0.05)
            if n == 9:
                break
        rep = ld.report(last=8)
        assert rep.bound == "model", str(rep)
        assert rep.batches == 8
        check_invariants(rep)
        check_invariants(ld.report())
        assert ld.report().batches == 10


def test_cpu_bound_rrc_float32_one_thread(big_store):
    with dlcache.Loader(big_store, batch_size=8, crop=224, threads=1, prefetch=2,
                        random_resized_crop=True, dtype="float32") as ld:
        for _ in ld:
            pass
        rep = ld.report()
        assert rep.bound == "cpu", str(rep)
        assert rep.threads == 1
        check_invariants(rep)


def test_consumer_bound_when_the_loop_keeps_every_batch(big_store):
    kept = []
    with dlcache.Loader(big_store, batch_size=16, crop=224, threads=2, prefetch=6) as ld:
        for _ in range(2):
            for images, labels in ld:
                kept.append(images)
        rep = ld.report()
        assert rep.bound == "consumer", str(rep)
        assert rep.kept_batches >= 18
        check_invariants(rep)
        assert "keeping batches" in str(rep)
    assert len(kept) == 20


def test_network_bound_through_a_throttled_proxy(s3, tmp_path):
    """Streaming through faultproxy.py --rate: downloads slower than the loader consumes."""
    demo = tmp_path / "demo"
    subprocess.run([tool("mkdemo"), str(demo), "--count", "40", "--classes", "2", "--threads",
                    "2"], check=True, stdout=subprocess.DEVNULL)
    local = str(tmp_path / "set")
    dlcache.build(str(demo / "train"), local, size=48, threads=2, shards=8)
    r = subprocess.run([tool("cachewarm"), "push", local, "s3://b/sets/r", "--endpoint", s3,
                        "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    port_file = tmp_path / "proxy.port"
    proxy = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "lib", "faultproxy.py"),
                              "--upstream", "127.0.0.1:" + s3.rsplit(":", 1)[1], "--port-file",
                              str(port_file), "--rate", "200000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        via = "http://127.0.0.1:%s" % port_file.read_text().strip()
        with dlcache.Loader("s3://b/sets/r", batch_size=4, crop=32, threads=2, prefetch=2,
                            sampler="windows", window_shards=2, streams=1,
                            cache_dir=str(tmp_path / "cache"), endpoint=via, downloads=1) as ld:
            for _ in ld:
                pass
            rep = ld.report()
            assert rep.bound == "network", str(rep)
            assert rep.stall_seconds > 0
            check_invariants(rep)
    finally:
        proxy.terminate()
        proxy.wait(10)


def _spans(path):
    with open(path) as f:
        doc = json.load(f)  # valid JSON, or this fails
    ev = doc["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    return [e for e in ev if e["ph"] == "X"], tracks


def test_trace_one_span_per_batch_stage(store, tmp_path):
    path = tmp_path / "run.json"
    with dlcache.Loader(store, batch_size=8, crop=48, threads=2, trace=str(path)) as ld:
        n = 0
        for epoch in range(2):
            ld.set_epoch(epoch)
            for _ in ld:
                n += 1
    spans, tracks = _spans(path)
    assert {s["name"] for s in spans} <= {"io", "download", "work", "copy", "next", "fetch"}
    assert "dlcache I/O" in tracks.values()
    assert any(v.startswith("dlcache worker ") for v in tracks.values()), tracks
    for stage in ("io", "next"):
        keys = [(s["args"]["epoch"], s["args"]["batch"]) for s in spans if s["name"] == stage]
        assert len(keys) == n and len(set(keys)) == n, stage  # one span per batch
    work = {(s["args"]["epoch"], s["args"]["batch"]) for s in spans if s["name"] == "work"}
    assert len(work) == n  # every batch was worked on, by one worker or more
    assert all(s["dur"] >= 0 and s["ts"] >= 0 for s in spans)


def test_trace_stays_bounded_over_a_long_run(store, tmp_path, monkeypatch):
    path = tmp_path / "env.json"
    monkeypatch.setenv("DLCACHE_TRACE", str(path))
    with dlcache.Loader(store, batch_size=2, crop=32, threads=2, trace_batches=16) as ld:
        n = 0
        for epoch in range(6):
            ld.set_epoch(epoch)
            for _ in ld:
                n += 1
    assert n > 100
    spans, tracks = _spans(path)
    per_track = {}
    for s in spans:
        per_track[s["tid"]] = per_track.get(s["tid"], 0) + 1
    assert per_track and max(per_track.values()) <= 16, per_track
    nexts = [s for s in spans if s["name"] == "next"]
    assert len(nexts) == 16 and max(s["args"]["batch"] for s in nexts) == n // 6 - 1
    assert os.path.getsize(path) < 64 * 1024


def test_trace_download_tracks_one_span_per_shard(s3, tmp_path):
    """A streamed loader's download threads have tracks of their own, one "fetch" span per shard
    downloaded with the shard's name and bytes; bounded like the others (trace_batches)."""
    demo = tmp_path / "demo"
    subprocess.run([tool("mkdemo"), str(demo), "--count", "48", "--classes", "2", "--threads",
                    "2"], check=True, stdout=subprocess.DEVNULL)
    local = str(tmp_path / "set")
    dlcache.build(str(demo / "train"), local, size=48, threads=2, shards=6)
    r = subprocess.run([tool("cachewarm"), "push", local, "s3://b/sets/trace", "--endpoint", s3,
                        "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    sizes = {f: os.path.getsize(os.path.join(local, f))
             for f in os.listdir(local) if f.endswith(".dlc")}
    assert len(sizes) == 6, sizes
    opts = dict(batch_size=4, crop=32, threads=2, sampler="windows", window_shards=2,
                endpoint=s3, downloads=2)
    path = tmp_path / "stream.json"
    with dlcache.Loader("s3://b/sets/trace", cache_dir=str(tmp_path / "cache"), trace=str(path),
                        **opts) as ld:
        n = 0
        for epoch in range(2):
            ld.set_epoch(epoch)
            for _ in ld:
                n += 1
    spans, tracks = _spans(path)
    downloads = {tid: name for tid, name in tracks.items() if name.startswith("dlcache download")}
    assert sorted(downloads.values()) == ["dlcache download 0", "dlcache download 1"], tracks
    assert "dlcache I/O" in tracks.values()
    fetches = [s for s in spans if s["name"] == "fetch"]
    assert all(s["tid"] in downloads for s in fetches)
    assert not [s for s in spans if s["tid"] in downloads and s["name"] != "fetch"]
    # A fresh cache without a limit downloads each shard once, and the trace says which.
    assert sorted(s["args"]["shard"] for s in fetches) == sorted(sizes), fetches
    for s in fetches:
        assert s["args"]["bytes"] == sizes[s["args"]["shard"]], s
        assert s["args"]["ok"] is True and isinstance(s["args"]["ahead"], bool)
        assert s["dur"] > 0 and s["ts"] >= 0
    assert len([s for s in spans if s["name"] == "next"]) == n  # the batches' spans too

    # Bounded: with trace_batches=1 each download track keeps its last span only.
    path = tmp_path / "short.json"
    with dlcache.Loader("s3://b/sets/trace", cache_dir=str(tmp_path / "cache2"),
                        trace=str(path), trace_batches=1, **opts) as ld:
        for _ in ld:
            pass
    spans, tracks = _spans(path)
    per = {}
    for s in spans:
        per[s["tid"]] = per.get(s["tid"], 0) + 1
    fetches = [s for s in spans if s["name"] == "fetch"]
    assert 1 <= len(fetches) <= 2 and max(per.values()) == 1, per


def test_next_is_a_torch_profiler_range(store):
    import torch
    with dlcache.Loader(store, batch_size=8, crop=48, threads=2) as ld:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in ld:
                pass
    names = [e.key for e in prof.key_averages()]
    assert "dlcache.next" in names, names[:20]


def _digest(ld, epochs=2):
    import hashlib
    h = hashlib.sha256()
    for epoch in range(epochs):
        ld.set_epoch(epoch)
        for images, labels in ld:
            h.update(images.numpy().tobytes())
            h.update(labels.numpy().tobytes())
    return h.hexdigest()


def test_auto_threads_same_bytes_and_never_more_than_cores(big_store):
    cores = len(os.sched_getaffinity(0))
    opts = dict(batch_size=4, crop=224, random_resized_crop=True, dtype="float32", seed=7)
    with dlcache.Loader(big_store, threads=1, **opts) as ld:
        want = _digest(ld)
    seen = set()
    with dlcache.Loader(big_store, threads="auto", **opts) as ld:
        seen.add(ld.stats()["threads"])
        got = _digest(ld)
        seen.add(ld.stats()["threads"])
        rep = ld.report()
        assert rep.threads == ld.stats()["threads"]
        check_invariants(rep)
    assert got == want  # the thread count never changes a byte
    assert all(1 <= n <= cores for n in seen), (seen, cores)


def test_auto_threads_adds_workers_for_a_waiting_loop(big_store, monkeypatch):
    """A loop that does nothing waits for RandomResizedCrop to float32: the loader adds workers
    up to the cores it is given (LOCAL_WORLD_SIZE=1); with LOCAL_WORLD_SIZE as large as the
    cores, one worker is all it may use."""
    cores = len(os.sched_getaffinity(0))
    opts = dict(batch_size=2, crop=224, random_resized_crop=True, dtype="float32")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    most = 0
    with dlcache.Loader(big_store, threads="auto", **opts) as ld:
        for epoch in range(4):
            ld.set_epoch(epoch)
            for _ in ld:
                most = max(most, ld.stats()["threads"])
    assert 1 <= most <= cores, (most, cores)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))
    with dlcache.Loader(big_store, threads="auto", **opts) as ld:
        for _ in ld:
            assert ld.stats()["threads"] == 1

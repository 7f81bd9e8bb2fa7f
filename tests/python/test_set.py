"""A store set through the Python package, which goes through the C API: the
session's demo store split into a set of three parts (tests/lib/set_split.c
writes its records again as parts and joins them) reads the same records and
loads the same batches as the store itself."""

import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import require_lib, tool

require_lib("dlc_loader_open", "dlc_build")

import dlcache  # noqa: E402


@pytest.fixture(scope="module")
def store_set(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("set") / "demo.set"
    subprocess.run([tool("set_split"), str(store), "3", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def test_a_set_reads_and_loads_like_the_store_of_its_records(store, store_set):
    a = dlcache.info(str(store_set), verify=True)
    b = dlcache.info(str(store))
    assert a["verified"]
    for key in ("count", "classes", "label_counts", "fields", "height", "width", "channels",
                "skipped", "payload_bytes", "image_field", "label_field"):
        assert a[key] == b[key], key
    assert a["path"] == str(store_set) and a["file_bytes"] > b["payload_bytes"]

    with dlcache.Store(str(store_set)) as s, dlcache.Store(str(store)) as t:
        assert len(s) == len(t)
        for i in range(len(t)):
            x, y = s[i], t[i]
            assert x.keys() == y.keys()
            for k in x:
                assert np.array_equal(np.asarray(x[k]), np.asarray(y[k])), (i, k)

    def batches(path, epoch):
        loader = dlcache.Loader(str(path), batch_size=16, crop=48, random_resized_crop=True,
                                flip=0.5, seed=7, threads=2, return_indices=True)
        loader.set_epoch(epoch)
        out = [tuple(t.clone() for t in b) for b in loader]
        loader.close()
        return out

    for epoch in (0, 1):
        got, want = batches(store_set, epoch), batches(store, epoch)
        assert len(got) == len(want) > 2
        for g, w in zip(got, want):
            assert all(torch.equal(x, y) for x, y in zip(g, w))


def test_a_directory_without_an_index_is_named(tmp_path):
    with pytest.raises(dlcache.VersionError, match="not a store or a set: no index.dlcset"):
        dlcache.Store(str(tmp_path))


def test_build_shards_and_parts_then_join(demo_dir, store, tmp_path):
    """dlcache.build(shards=N) makes the set that cachebuild --shards makes; parts built one
    call each (as on N machines) are refused by join() while one is missing, then joined; both
    hold the records of the single store, in its order."""
    from conftest import STORE_SIZE
    whole = tmp_path / "whole"
    r = dlcache.build(str(demo_dir), str(whole), size=STORE_SIZE, threads=2, shards=3)
    assert r["parts"] == 3 and [b["part"] for b in r["built"]] == [0, 1, 2]
    assert sum(b["count"] for b in r["built"]) == r["count"] == dlcache.info(str(store))["count"]
    assert r["built"][0]["first_item"] == 0 and r["built"][2]["end_item"] == r["items"]

    apart = tmp_path / "apart"
    for i in (2, 0):
        one = dlcache.build(str(demo_dir), str(apart), size=STORE_SIZE, threads=2, shards=3,
                            part=i)
        assert [b["part"] for b in one["built"]] == [i] and one["set_id"] == r["set_id"]
    with pytest.raises(dlcache.DlcacheError, match="part-00001-of-00003.dlc"):
        dlcache.join(str(apart))
    assert not (apart / "index.dlcset").exists()
    dlcache.build(str(demo_dir), str(apart), size=STORE_SIZE, threads=2, shards=3, part=1)
    j = dlcache.join(str(apart))
    assert j["num_shards"] == 3 and j["count"] == r["count"] and j["set_id"] == r["set_id"]
    assert not j["unchanged"] and dlcache.join(str(apart))["unchanged"]

    with dlcache.Store(str(whole)) as a, dlcache.Store(str(apart)) as b, \
            dlcache.Store(str(store)) as c:
        for i in range(len(c)):
            assert np.array_equal(np.asarray(a[i]["image"]), np.asarray(c[i]["image"]))
            assert np.array_equal(np.asarray(b[i]["image"]), np.asarray(c[i]["image"]))
            assert a[i]["label"] == b[i]["label"] == c[i]["label"]

    with pytest.raises(ValueError, match="part needs shards"):
        dlcache.build(str(demo_dir), str(tmp_path / "x"), part=0)
    with pytest.raises(ValueError, match="part"):
        dlcache.build(str(demo_dir), str(tmp_path / "y"), shards=2, part=2)


def test_a_set_directory_swapped_for_a_link_is_not_written_through(demo_dir, tmp_path):
    """A co-tenant who owns the set's directory in a shared folder moves it aside mid-build and
    puts a link to someone else's set in its place: the build wrote its parts there and, failing,
    removed that set's part files through the link. It now stops, naming the directory, and
    the other set is untouched."""
    import time
    victim = tmp_path / "victim"
    dlcache.build(str(demo_dir), str(victim), size=16, threads=1, shards=16)  # the same names
    before = {n: (victim / n).read_bytes() for n in os.listdir(victim)}
    out = tmp_path / "set"
    out.mkdir()
    # Slow the build down: many parts, one thread, larger images.
    p = subprocess.Popen([tool("cachebuild"), str(demo_dir), "-o", str(out), "--shards", "16",
                          "--threads", "1", "--size", "160"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            if any(n.startswith("part-") and n.endswith(".dlc") for n in os.listdir(out)):
                break
            time.sleep(0.005)
        if p.poll() is not None:
            pytest.skip("the build ended before the swap: %s" % p.communicate()[1][-500:])
        os.rename(out, tmp_path / "set.moved")
        os.symlink(victim, out)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0, err
    # Which step notices first depends on when the swap lands (the part being written finds
    # its temporary file gone, the folder is missing for a moment): each names the folder.
    assert str(out) in err, err[-2000:]
    assert {n: (victim / n).read_bytes() for n in os.listdir(victim)} == before


def test_a_dead_builds_temporaries_go_with_the_next_build_of_another_n(demo_dir, tmp_path):
    """A set build SIGKILLed leaves part-I-of-N.dlc.tmp-PID (a whole part's bytes); its part's
    next writer removes it, but the next build of another N writes other names and never did:
    `--shards 3 --force` and `--join` left it for good. The tidy after a build removes a dead
    writer's temporary files of parts; a live one's stay."""
    out = tmp_path / "s"
    dlcache.build(str(demo_dir), str(out), size=16, threads=1, shards=2)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / ("part-00000-of-00002.dlc.tmp-%d" % dead.pid)
    stale.write_bytes(b"x" * 4096)
    (out / (stale.name + "-lock")).write_bytes(b"")
    live = out / ("part-00001-of-00002.dlc.tmp-%d" % os.getpid())
    live.write_bytes(b"y")
    dlcache.build(str(demo_dir), str(out), size=16, threads=1, shards=3, force=True)
    left = sorted(os.listdir(out))
    assert stale.name not in left and stale.name + "-lock" not in left, left
    assert live.name in left, left

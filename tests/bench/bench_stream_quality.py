"""Shuffle quality and resume of shard windows, for docs/BENCHMARKS.md ("Streaming").

usage: bench_stream_quality.py LOCAL_SET [URL ENDPOINT WORKDIR]

LOCAL_SET is a store set written in label order (mkdemo's classes, in turn, split into shards
by cachebuild --shards). Prints, as markdown:
  - per order (a plain shuffle, and shard windows of 1, 2, 4 and 8 shards on 1 and 2 streams),
    the chance that two samples of one batch share a label, and that neighbours do, measured on
    the labels the Loader delivered over one epoch, beside the plain shuffle's and cacheinfo
    --plan's prediction from the shards (two samples from one shard);
  - with URL (the same set pushed to s3rver at ENDPOINT): the time to the first batch of a
    fresh streaming Loader, cold (empty cache) and after a resume from a state saved mid-epoch
    (new process state, new empty cache: what a restarted job sees), and the same with the
    cache warm.
Run with Debian's python3 and DLCACHE_LIB / PYTHONPATH pointing at a build."""
import os
import shutil
import sys
import tempfile
import time

import dlcache

BATCH = 64


def label_pairs(loader):
    """Fractions of same-label pairs within batches, and of same-label neighbours."""
    same = pairs = nsame = nn = 0
    for _, labels in loader:
        y = labels.tolist()
        counts = {}
        for v in y:
            counts[v] = counts.get(v, 0) + 1
        same += sum(c * (c - 1) // 2 for c in counts.values())
        pairs += len(y) * (len(y) - 1) // 2
        nsame += sum(1 for a, b in zip(y, y[1:]) if a == b)
        nn += len(y) - 1
    return same / pairs, nsame / nn


def quality(path):
    print("| order | two samples of a batch share a label | neighbours share a label | "
          "plan: two samples of a batch share a shard |")
    print("| --- | ---: | ---: | ---: |")
    common = dict(crop=None, threads=2, seed=1)
    b, n = label_pairs(dlcache.Loader(path, BATCH, **common))
    print("| plain shuffle | %.4f | %.4f | - |" % (b, n))
    for streams in (1, 2):
        for window in (1, 2, 4, 8):
            ld = dlcache.Loader(path, BATCH, sampler="windows", window_shards=window,
                                streams=streams, **common)
            b, n = label_pairs(ld)
            p = dlcache.plan(path, BATCH, window_shards=window, streams=streams, seed=1)
            print("| windows of %d shards, %d stream%s | %.4f | %.4f | %.4f |" % (
                window, streams, "s" if streams > 1 else "", b, n, p["batch_same_shard"]))


def first_batch(make):
    t = time.monotonic()
    ld = make()
    it = iter(ld)
    next(it)
    return time.monotonic() - t, ld, it


def resume(url, endpoint, work):
    opts = dict(crop=None, threads=2, window_shards=2, streams=1, endpoint=endpoint)
    rows = []

    def fresh(tag):
        d = os.path.join(work, tag)
        shutil.rmtree(d, ignore_errors=True)
        return d

    cold = fresh("cold")
    s, ld, it = first_batch(lambda: dlcache.Loader(url, BATCH, cache_dir=cold, **opts))
    rows.append(("start of an epoch, empty cache", s))
    for _ in range(max(1, len(ld) // 2 - 1)):
        next(it)
    state = ld.state_dict()
    del it, ld
    s, ld, it = first_batch(lambda: _restored(url, fresh("resumed"), state, opts))
    rows.append(("resume mid-epoch, empty cache", s))
    del it, ld
    s, ld, it = first_batch(lambda: _restored(url, cold, state, opts))
    rows.append(("resume mid-epoch, warm cache", s))
    del it, ld
    print()
    print("| streamed Loader | first batch s |")
    print("| --- | ---: |")
    for what, sec in rows:
        print("| %s | %.3f |" % (what, sec))


def _restored(url, cache, state, opts):
    ld = dlcache.Loader(url, BATCH, cache_dir=cache, **opts)
    ld.load_state_dict(state)
    return ld


def main():
    quality(sys.argv[1])
    if len(sys.argv) == 5:
        resume(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    main()

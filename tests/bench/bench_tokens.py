#!/usr/bin/env python3
"""Packed sequences of a token store against the memcpy ceiling of their bytes and against a
nanoGPT-style np.memmap loader, and the open time of token indexes, in one run (ratios, never a
pass or fail; `make bench` runs it through tests/bench/run.sh). Each contender runs --seconds in
all, in --rounds slices taken in turn with the others'; each figure is the median of its slices.

    /usr/bin/python3 tests/bench/bench_tokens.py [WORK] [--tokens N] [--seq-len S] [--batch B]
        [--threads T] [--seconds X] [--rounds R] [--first-docs N] [--json]

* corpus: --tokens uint16 ids in documents of log-normal lengths (median ~245), written as a
  nanoGPT flat .bin (EOS 0 after each document) and built into a token store by
  `cachebuild --tokens` (the C ingest path);
* memcpy: numpy's copy of one batch's output bytes (input_ids, labels, position_ids as int64:
  24 bytes per token) into one of threads + 2 buffers in turn (the loader's slots), on one
  thread: the ceiling of making those bytes (a copy reads as many bytes as it writes, the
  loader reads 2 per 24 it writes, so writing them costs no more than copying them); and the
  same on --threads threads at once (numpy's copy releases the GIL), each with its own buffers,
  for the ratio at equal thread counts;
* dlcache C: dlc_token_loader_next() on --threads workers, the batch left in its slot (what a
  C consumer or the device path gets); dlcache Python: Loader(..., seq_len=S) iterated, each
  batch copied into torch tensors;
* np.memmap: nanoGPT's get_batch (random offsets, torch.stack of int64 slices, x and y), which
  has no epochs, no document masks and no resume;
* open: dlc_tokens_open() of the corpus, and the binary search of a synthetic prefix-sum table
  of 10^7 documents and 10^10 tokens (a file of u64, mapped, only its ends read: what open
  checks), with 10^5 random lookups;
* first batch (--first-docs N, default 10^7, 0 to skip): a token store of N short documents
  (what the per-document costs of an order scale with; built once into WORK), opened by
  dlc_token_loader_open() and its first batch taken, seeded and in record order: the cost of
  the documents' order, which 10^10 tokens in 10^7 documents would pay the same.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
BUILD = os.environ.get("DLCACHE_BUILD_DIR", os.path.join(REPO, "build"))
os.environ.setdefault("DLCACHE_LIB", os.path.join(BUILD, "lib", "libdlcache.so"))

import torch  # noqa: E402

import dlcache  # noqa: E402
from dlcache import tokens as T  # noqa: E402
from dlcache._lib import lib  # noqa: E402


def make_corpus(work, n_tokens, seed=0):
    path = os.path.join(work, "tokens.dlc")
    flat = os.path.join(work, "tokens.bin")
    if os.path.exists(path) and os.path.exists(flat):
        return path, flat
    rng = np.random.default_rng(seed)
    parts, total = [], 0
    while total < n_tokens:
        n = int(min(max(rng.lognormal(5.5, 1.0), 1), 20000))
        d = rng.integers(1, 50000, size=n + 1).astype(np.uint16)
        d[-1] = 0
        parts.append(d)
        total += n + 1
    np.concatenate(parts).tofile(flat)
    subprocess.run([os.path.join(BUILD, "bin", "cachebuild"), "--tokens", flat, "-o", path,
                    "--eos", "0", "--vocab", "50000", "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    return path, flat


def timed(fn, seconds):
    """Tokens per wall second and per CPU second of this process (all its threads)."""
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        n += fn()
        t = time.perf_counter() - t0
        if t >= seconds:
            return n / t, n / max(time.process_time() - c0, 1e-9)


# Each contender is made once and then measured in short slices taken in turn (memcpy, C,
# Python, np.memmap, memcpy, ...), each figure the median of its slices: on a shared machine the
# load moves between slices, not between one contender's run and the next's.

def make_memcpy(batch, seq, slots):
    # As many batch buffers as the loader has slots (threads + 2), written round-robin from a
    # source as large: the same bytes through the same cache levels.
    src = np.ones((slots, batch * seq * 3), np.int64)
    dst = np.empty_like(src)
    state = {"i": 0}

    def one():
        i = state["i"] = (state["i"] + 1) % slots
        np.copyto(dst[i], src[(i + 1) % slots])
        return batch * seq
    return lambda seconds: timed(one, seconds), lambda: None


def make_memcpy_threads(batch, seq, slots, threads):
    import threading
    bufs = [(np.ones((slots, batch * seq * 3), np.int64),
             np.empty((slots, batch * seq * 3), np.int64)) for _ in range(threads)]

    def measure(seconds):
        counts = [0] * threads
        stop = threading.Event()

        def run(k):
            src, dst = bufs[k]
            i = 0
            while not stop.is_set():
                i = (i + 1) % slots
                np.copyto(dst[i], src[(i + 1) % slots])
                counts[k] += batch * seq
        ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        t0, c0 = time.perf_counter(), time.process_time()
        for t in ts:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        return (sum(counts) / (time.perf_counter() - t0),
                sum(counts) / max(time.process_time() - c0, 1e-9))
    return measure, lambda: None


def make_c(path, batch, seq, threads):
    cfg = T.TokenLoaderConfig()
    lib.dlc_token_loader_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
    cfg.batch_size, cfg.seq_len, cfg.threads, cfg.seed = batch, seq, threads, 1
    h = ctypes.c_void_p()
    assert lib.dlc_token_loader_open(path.encode(), ctypes.byref(cfg), ctypes.byref(h)) == 0
    b = T.TokenBatch()
    state = {"epoch": 0}
    lib.dlc_token_loader_next(h, ctypes.byref(b))  # the first batch makes the order

    def one():
        rc = lib.dlc_token_loader_next(h, ctypes.byref(b))
        if rc == 1:
            state["epoch"] += 1
            lib.dlc_token_loader_seek(h, state["epoch"], 0)
            return 0
        assert rc == 0, lib.dlc_errmsg()
        return b.rows * seq
    return lambda seconds: timed(one, seconds), lambda: lib.dlc_token_loader_close(h)


def make_python(path, batch, seq, threads):
    L = dlcache.Loader(path, batch, seq_len=seq, seed=1, threads=threads)
    state = {"it": iter(L)}

    def one():
        try:
            b = next(state["it"])
        except StopIteration:
            state["it"] = iter(L)
            return 0
        return b["input_ids"].numel()
    return lambda seconds: timed(one, seconds), lambda: None


def make_memmap(flat, batch, seq):
    # nanoGPT's train.py get_batch().
    data = np.memmap(flat, dtype=np.uint16, mode="r")

    def one():
        ix = torch.randint(len(data) - seq, (batch,))
        x = torch.stack([torch.from_numpy((data[i:i + seq]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + seq]).astype(np.int64))
                         for i in ix])
        return x.numel() + 0 * y.numel()
    return lambda seconds: timed(one, seconds), lambda: None


def interleaved(contenders, seconds, rounds):
    """Medians of tokens per wall second and per CPU second."""
    rates = {k: [] for k in contenders}
    for _ in range(rounds):
        for k, (measure, _close) in contenders.items():
            rates[k].append(measure(seconds / rounds))
    for _measure, close in contenders.values():
        close()
    return ({k: float(np.median([w for w, _ in v])) for k, v in rates.items()},
            {k: float(np.median([c for _, c in v])) for k, v in rates.items()})


def bench_open(path, work):
    s, t = ctypes.c_void_p(), ctypes.c_void_p()
    t0 = time.perf_counter()
    assert lib.dlc_store_open(path.encode(), 0, ctypes.byref(s)) == 0
    t1 = time.perf_counter()
    assert lib.dlc_tokens_open(s, ctypes.byref(t)) == 0
    open_s, tokens_open_s = t1 - t0, time.perf_counter() - t1
    n_docs = lib.dlc_tokens_get_info(t).contents.num_docs
    lib.dlc_tokens_close(t)
    lib.dlc_store_close(s)
    # A synthetic index of 10^7 documents, 10^10 tokens: u64 prefix sums in a file.
    syn = os.path.join(work, "synthetic.offsets")
    docs = 10**7
    if not os.path.exists(syn):
        rng = np.random.default_rng(1)
        lens = rng.integers(1, 1999, size=docs, dtype=np.uint64)
        lens[-1] += np.uint64(10**10) - lens.sum()
        np.concatenate([[0], np.cumsum(lens)]).astype("<u8").tofile(syn)
    t0 = time.perf_counter()
    m = np.memmap(syn, dtype="<u8", mode="r")
    assert m[0] == 0 and m[-1] == 10**10 and len(m) == docs + 1  # what open checks
    syn_open = time.perf_counter() - t0
    q = np.random.default_rng(2).integers(0, 10**10, size=10**5)
    t0 = time.perf_counter()
    np.searchsorted(m, q, "right")
    lookup = (time.perf_counter() - t0) / len(q)
    return {"corpus_docs": int(n_docs), "corpus_open_s": open_s,
            "corpus_tokens_open_s": tokens_open_s,
            "synthetic_docs": docs, "synthetic_tokens": 10**10,
            "synthetic_open_s": syn_open, "synthetic_lookup_us": lookup * 1e6}


def make_many_docs(work, n_docs):
    path = os.path.join(work, "docs%d.dlc" % n_docs)
    if os.path.exists(path):
        return path
    flat = os.path.join(work, "docs%d.bin" % n_docs)
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 4, size=n_docs)  # 1..3 tokens, then the EOS 0
    ids = rng.integers(1, 50000, size=int(lens.sum() + n_docs)).astype(np.uint16)
    ends = np.cumsum(lens + 1) - 1
    ids[ends] = 0
    ids.tofile(flat)
    subprocess.run([os.path.join(BUILD, "bin", "cachebuild"), "--tokens", flat, "-o", path,
                    "--eos", "0", "--vocab", "50000", "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    os.unlink(flat)
    return path


def bench_first_batch(path, batch, seq, shuffle):
    cfg = T.TokenLoaderConfig()
    lib.dlc_token_loader_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
    cfg.batch_size, cfg.seq_len, cfg.threads, cfg.seed, cfg.shuffle = batch, seq, 2, 1, shuffle
    h = ctypes.c_void_p()
    b = T.TokenBatch()
    t0 = time.perf_counter()
    assert lib.dlc_token_loader_open(path.encode(), ctypes.byref(cfg), ctypes.byref(h)) == 0
    t1 = time.perf_counter()
    assert lib.dlc_token_loader_next(h, ctypes.byref(b)) == 0, lib.dlc_errmsg()
    t2 = time.perf_counter()
    lib.dlc_token_loader_close(h)
    return t1 - t0, t2 - t1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", nargs="?", default=os.path.join(BUILD, "bench"))
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--first-docs", type=int, default=10**7)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    path, flat = make_corpus(a.work, a.tokens)
    r = {}
    r["tokens_per_s"], r["tokens_per_cpu_s"] = interleaved({
        "memcpy_ceiling": make_memcpy(a.batch, a.seq_len, a.threads + 2),
        "memcpy_threads": make_memcpy_threads(a.batch, a.seq_len, a.threads + 2, a.threads),
        "dlcache_c": make_c(path, a.batch, a.seq_len, a.threads),
        "dlcache_python": make_python(path, a.batch, a.seq_len, a.threads),
        "np_memmap": make_memmap(flat, a.batch, a.seq_len)}, a.seconds, a.rounds)
    t, u = r["tokens_per_s"], r["tokens_per_cpu_s"]
    r["ratios"] = {"dlcache_c_over_memcpy": t["dlcache_c"] / t["memcpy_ceiling"],
                   "dlcache_c_over_memcpy_threads": t["dlcache_c"] / t["memcpy_threads"],
                   "dlcache_python_over_memcpy": t["dlcache_python"] / t["memcpy_ceiling"],
                   "dlcache_python_over_np_memmap": t["dlcache_python"] / t["np_memmap"],
                   # The same per CPU second the process used: what a shared machine's load
                   # does not move (the loader's threads and the caller's, against memcpy's).
                   "cpu_dlcache_c_over_memcpy": u["dlcache_c"] / u["memcpy_ceiling"],
                   "cpu_dlcache_python_over_memcpy": u["dlcache_python"] / u["memcpy_ceiling"]}
    r["open"] = bench_open(path, a.work)
    if a.first_docs:
        many = make_many_docs(a.work, a.first_docs)
        for name, sh in (("seeded", 1), ("record_order", 0)):
            o, f = bench_first_batch(many, a.batch, a.seq_len, sh)
            r["open"]["first_%s_open_s" % name] = o
            r["open"]["first_%s_batch_s" % name] = f
    r["config"] = {"tokens": a.tokens, "seq_len": a.seq_len, "batch": a.batch,
                   "threads": a.threads, "seconds": a.seconds, "rounds": a.rounds,
                   "cores": os.cpu_count()}
    if a.json:
        print(json.dumps(r, indent=2))
        return
    for k, v in t.items():
        print("%-16s %12.3g tokens/s  (%.2f GB/s of int64 input_ids+labels+position_ids); "
              "%.3g per CPU second" % (k, v, v * 24 / 1e9, u[k]))
    for k, v in r["ratios"].items():
        print("%-32s %.2f" % (k, v))
    o = r["open"]
    print("open: corpus of %d documents: dlc_store_open %.1f ms, dlc_tokens_open %.3f ms; "
          "synthetic 10^7 documents / 10^10 tokens: %.1f ms, %.2f us per lookup"
          % (o["corpus_docs"], o["corpus_open_s"] * 1e3, o["corpus_tokens_open_s"] * 1e3,
             o["synthetic_open_s"] * 1e3, o["synthetic_lookup_us"]))
    if a.first_docs:
        print("first batch on %d documents: seeded order: open %.1f ms, first batch %.1f ms; "
              "record order: open %.1f ms, first batch %.1f ms"
              % (a.first_docs, o["first_seeded_open_s"] * 1e3, o["first_seeded_batch_s"] * 1e3,
                 o["first_record_order_open_s"] * 1e3, o["first_record_order_batch_s"] * 1e3))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Token sequences of varying length fed by dlcache and by torch's DataLoader
with a pad_sequence collate, side by side, in one run.

The data: --docs text documents found on the machine (the licenses in
/usr/share/common-licenses, every /usr/share/doc/*/copyright, the Python sources
under /usr/lib/python3.11 and /usr/lib/python3/dist-packages; a seeded sample of
them), tokenised by a simple rule without byte pairs: runs of word characters
and single punctuation characters (``re.findall(r"\\w+|[^\\w\\s]")``), numbered
by a vocabulary of the --vocab most frequent tokens (0 is padding, 1 unknown),
one int32 sequence per document, cut to --max-len.

* dlcache: written once with ``dlcache.write([{"tokens": ids}...], store,
  fields={"tokens": "ndarray"})`` (a variable-length int32 array), loaded with
  ``dlcache.Loader(store, batch_size, fields=["tokens"])``: dict batches
  {"tokens": int32 [N, L] zero-padded to the longest of the batch,
  "tokens_lengths": int64 [N]}.
* torch: a Dataset over the same sequences as int32 tensors in memory, in a
  DataLoader with the same batch size, shuffled, whose collate pads them with
  torch.nn.utils.rnn.pad_sequence(batch_first=True) and returns the lengths:
  with 0 worker processes (the batches made in the training process) and with
  --workers.

It checks first that one unshuffled epoch of dlcache is, batch for batch, what
pad_sequence makes of the same sequences, then prints samples/s and tokens/s
(tokens without the padding) of each pipeline alone. The figures are of one run
on a possibly busy machine: compare the ratios.

    /usr/bin/python3 examples/tokens.py                        # a minute on 2 cores
    /usr/bin/python3 examples/tokens.py --docs 6000 --max-len 512 --batch-size 128
"""

import argparse
import collections
import glob
import os
import random
import re
import time

import _common as C

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402

import dlcache  # noqa: E402

TOKEN = re.compile(r"\w+|[^\w\s]")
SOURCES = ("/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
           "/usr/lib/python3.11/**/*.py", "/usr/lib/python3/dist-packages/**/*.py")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=4000, help="documents (default 4000)")
    p.add_argument("--vocab", type=int, default=16384, help="vocabulary size (16384)")
    p.add_argument("--max-len", type=int, default=1024,
                   help="tokens kept of each document (default 1024)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data-seconds", type=float, default=5.0,
                   help="length of the timed window of each pipeline (default 5 s)")
    p.add_argument("--sources", nargs="+", default=list(SOURCES), metavar="GLOB",
                   help="where the documents come from (default: %s)" % " ".join(SOURCES))
    C.add_common_args(p, photos=False)
    args = p.parse_args(argv)
    if args.vocab < 3 or args.max_len < 1 or args.batch_size < 1:
        p.error("--vocab must be at least 3, --max-len and --batch-size at least 1")
    return args


def documents(args):
    """Paths of --docs readable text files from --sources, a seeded sample, sorted."""
    seen, paths = set(), []
    for pattern in args.sources:
        for path in sorted(glob.glob(pattern, recursive=True)):
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            paths.append(path)
    if len(paths) < args.docs:
        raise SystemExit("found %d documents in %s, fewer than --docs %d"
                         % (len(paths), " ".join(args.sources), args.docs))
    random.Random(args.seed).shuffle(paths)
    return sorted(paths[:args.docs])


def tokenise(args, paths):
    """int32 sequences of token ids (vocabulary of the most frequent tokens)."""
    docs = []
    for path in paths:
        with open(path, "rb") as f:
            docs.append(TOKEN.findall(f.read().decode("utf-8", errors="replace")))
    counts = collections.Counter(t for d in docs for t in d)
    vocab = {t: i + 2 for i, (t, _) in enumerate(counts.most_common(args.vocab - 2))}
    seqs = [np.array([vocab.get(t, 1) for t in d[:args.max_len]], dtype=np.int32)
            for d in docs]
    return seqs, sum(len(d) for d in docs), len(counts)


def write_store(args, root, seqs):
    store = os.path.join(root, "tokens-%d-%d-%d-%d.dlc" % (args.docs, args.vocab,
                                                           args.max_len, args.seed))
    params = {"docs": args.docs, "vocab": args.vocab, "max_len": args.max_len,
              "seed": args.seed, "sources": args.sources}
    if C.done_marker(store, params):
        print("reusing %s" % store)
        return store, None
    r = dlcache.write([{"tokens": s} for s in seqs], store, fields={"tokens": "ndarray"},
                      workers=args.workers, force=True, progress=False)
    C.mark_done(store, params)
    print("dlcache.write: %d sequences in %.2f s (%.0f samples/s), %.1f MB"
          % (r.count, r.seconds, r.samples_per_s, r.file_bytes / 1e6), flush=True)
    return store, r


class Sequences(torch.utils.data.Dataset):
    def __init__(self, seqs):
        self.seqs = [torch.from_numpy(s) for s in seqs]

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return self.seqs[i]


def pad_collate(batch):
    return (pad_sequence(batch, batch_first=True, padding_value=0),
            torch.tensor([len(s) for s in batch], dtype=torch.int64))


def dlcache_loader(args, store, shuffle=True, threads=None):
    return dlcache.Loader(store, batch_size=args.batch_size, shuffle=shuffle, seed=args.seed,
                          fields=["tokens"], threads=threads or args.workers, as_dict=True)


def torch_loader(args, ds, workers, shuffle=True):
    g = torch.Generator()
    g.manual_seed(args.seed)
    return torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=shuffle,
                                       collate_fn=pad_collate, num_workers=workers,
                                       generator=g, persistent_workers=workers > 0)


def padded(b):
    """(tokens, lengths) of a dlcache batch. When every sequence of the store has the same
    length, dlcache.write() stores the field with a fixed shape and the batch has no
    tokens_lengths: then every length is the width."""
    x = b["tokens"]
    lengths = b.get("tokens_lengths")
    if lengths is None:
        lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64)
    return x, lengths


def check_same(args, store, ds):
    """One unshuffled epoch: dlcache's batches are pad_sequence's, value for value."""
    n = 0
    with dlcache_loader(args, store, shuffle=False, threads=1) as L:
        for b, (x, lengths) in zip(L, torch_loader(args, ds, 0, shuffle=False)):
            mine, my_lengths = padded(b)
            C.check(mine.dtype == torch.int32 and torch.equal(mine, x),
                    "batch %d: the padded tokens differ from pad_sequence's" % n)
            C.check(torch.equal(my_lengths, lengths), "batch %d: the lengths differ" % n)
            n += 1
    C.check(n == (len(ds) + args.batch_size - 1) // args.batch_size,
            "%d batches in the epoch" % n)


def pairs(name, loader):
    """(padded tokens, lengths) from either pipeline."""
    for b in C.forever(loader):
        yield padded(b) if name == "dlcache" else b


def run(args):
    # No model here: torch's own ops (pad_sequence, stack) run on one thread, as in its
    # DataLoader workers. With 2 intra-op threads on a busy 2-core machine pad_sequence
    # ran up to 10 times slower (OpenMP threads waiting for a core).
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    paths = documents(args)
    seqs, total_tokens, distinct = tokenise(args, paths)
    lengths = np.array([len(s) for s in seqs])
    print("%d documents, %d tokens (%d distinct) in %.1f s; sequences of %d..%d tokens, "
          "mean %.0f, median %.0f, %.0f%% cut to %d"
          % (len(seqs), total_tokens, distinct, time.perf_counter() - t0, lengths.min(),
             lengths.max(), lengths.mean(), np.median(lengths),
             100.0 * (lengths == args.max_len).mean(), args.max_len), flush=True)
    ds = Sequences(seqs)
    results = []
    with C.workdir(args.workdir, "dlcache-tokens-") as root:
        store, report = write_store(args, root, seqs)
        check_same(args, store, ds)
        print("checked: one unshuffled epoch of dlcache equals pad_sequence's batches")
        load0 = C.load_avg()
        runs = [("dlcache", "dlcache Loader, %d threads" % args.workers, None),
                ("torch", "torch DataLoader + pad_sequence, 0 workers", 0)]
        if args.workers > 0:
            runs.append(("torch", "torch DataLoader + pad_sequence, %d workers" % args.workers,
                         args.workers))
        for name, what, workers in runs:
            loader = dlcache_loader(args, store) if name == "dlcache" else \
                torch_loader(args, ds, workers)
            counted = [0]

            def size_of(b):
                counted[0] += int(b[1].sum())
                return b[1].shape[0]
            rate, n, secs = C.data_rate(pairs(name, loader), size_of, args.data_seconds)
            results.append((what, rate, counted[0] / secs))
            print("%s: %.0f samples/s, %.0f tokens/s" % (what, rate, counted[0] / secs),
                  flush=True)
            if name == "dlcache":
                loader.close()
            else:
                C.close_torch_loader(loader)
        load1 = C.load_avg()

    print("\ntokens: %d sequences of int32 ids, %d..%d long (mean %.0f), batch %d padded to "
          "the longest of the batch, shuffled" % (len(seqs), lengths.min(), lengths.max(),
                                                  lengths.mean(), args.batch_size))
    print("each pipeline alone: 3 warm-up batches untimed, then at least %g s; tokens/s "
          "counts tokens without the padding; torch intra-op threads 1; load average %.2f "
          "before, %.2f after"
          % (args.data_seconds, load0, load1))
    best_torch = max(r[1] for r in results if not r[0].startswith("dlcache"))
    rows = [(what, "%.0f" % rate, "%.0f" % toks, "%.1fx" % (results[0][1] / rate)
             if not what.startswith("dlcache") else "")
            for what, rate, toks in results]
    print(C.table(("pipeline", "samples/s", "tokens/s", "dlcache is"), rows))
    print("dlcache / best torch: %.1fx" % (results[0][1] / best_torch))
    if report is not None:
        print("store written by dlcache.write in %.2f s (%.0f samples/s)"
              % (report.seconds, report.samples_per_s))
    return results


def main(argv=None):
    args = parse_args(argv)
    t0 = time.perf_counter()
    run(args)
    print("done in %.0f s" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A small causal transformer trained on packed token sequences from a dlcache token store,
side by side with nanoGPT's np.memmap loader over the same tokens, in one run.

The data: --docs text documents found on the machine (the licenses in
/usr/share/common-licenses, every /usr/share/doc/*/copyright, the Python sources under
/usr/lib/python3.11; a seeded sample of them), written as JSON lines, a SentencePiece model of
--vocab pieces trained on them with Debian's spm_train, and

* dlcache: `cachebuild --tokens docs.jsonl --tokenizer m.model` (the documents tokenized in C,
  one record each, EOS appended), read with
  ``dlcache.Loader(store, B, seq_len=S, document_mask=True)``: input_ids, labels (-100 across
  documents), position_ids restarting at each document; every token an input once per epoch;
* np.memmap: the same tokens in record order as one flat uint16 file (nanoGPT's train.bin),
  read by nanoGPT's get_batch (random windows: no epochs, no document boundaries, no resume).

It prints the tokens/s of each loader alone and of training steps with each, then shows the
resume the memmap loader cannot do: a state saved after some steps, loaded into a new
dlcache.Loader, continues with exactly the batches the first one would have given.

    /usr/bin/python3 examples/lm.py                       # about a minute on 2 cores
    /usr/bin/python3 examples/lm.py --docs 800 --steps 60 --seq-len 256
"""

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import time

import _common as C

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dlcache  # noqa: E402

SOURCES = ("/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
           "/usr/lib/python3.11/**/*.py")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=400, help="documents (default 400)")
    p.add_argument("--vocab", type=int, default=2000, help="SentencePiece pieces (2000)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20, help="training steps per loader (20)")
    p.add_argument("--dim", type=int, default=64, help="model width (64)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--data-seconds", type=float, default=2.0,
                   help="length of the timed window of each loader alone (2 s)")
    p.add_argument("--sources", nargs="+", default=list(SOURCES), metavar="GLOB")
    C.add_common_args(p, workers=False, photos=False)
    args = p.parse_args(argv)
    if args.vocab < 50 or args.seq_len < 2 or args.batch_size < 1 or args.steps < 1:
        p.error("--vocab at least 50, --seq-len at least 2, --batch-size and --steps at least 1")
    return args


def documents(args):
    seen, paths = set(), []
    for pattern in args.sources:
        for path in sorted(glob.glob(pattern, recursive=True)):
            real = os.path.realpath(path)
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                paths.append(path)
    if len(paths) < args.docs:
        raise SystemExit("found %d documents, fewer than --docs %d" % (len(paths), args.docs))
    random.Random(args.seed).shuffle(paths)
    texts = []
    for path in sorted(paths[:args.docs]):
        with open(path, "rb") as f:
            texts.append(f.read(20000).decode("utf-8", errors="replace"))
    return texts


def make_data(args, root):
    """The JSON lines, the SentencePiece model, the token store and the flat .bin."""
    jsonl, model = os.path.join(root, "docs.jsonl"), os.path.join(root, "m")
    store, flat = os.path.join(root, "lm.dlc"), os.path.join(root, "train.bin")
    params = {"docs": args.docs, "vocab": args.vocab, "seed": args.seed, "sources": args.sources}
    if C.done_marker(store, params):
        print("reusing %s" % store)
        return store, flat
    texts = documents(args)
    with open(jsonl, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.write("\n".join(texts))
    spm = shutil.which("spm_train")
    if not spm:
        raise SystemExit("spm_train is missing: apt-get install sentencepiece")
    t0 = time.perf_counter()
    subprocess.run([spm, "--input", os.path.join(root, "train.txt"), "--model_prefix", model,
                    "--vocab_size", str(args.vocab), "--model_type", "bpe",
                    "--minloglevel", "2", "--input_sentence_size", "200000",
                    "--shuffle_input_sentence", "true"], check=True, capture_output=True)
    print("spm_train: %d pieces in %.1f s" % (args.vocab, time.perf_counter() - t0))
    t0 = time.perf_counter()
    r = subprocess.run([C.tool("cachebuild"), "--tokens", jsonl, "-o", store, "--tokenizer",
                        model + ".model", "--force", "--json"], check=True,
                       capture_output=True, text=True)
    rep = json.loads(r.stdout)
    print("cachebuild --tokens --tokenizer: %d documents, %d tokens (%s) in %.1f s"
          % (rep["documents"], rep["tokens"], rep["dtype"], time.perf_counter() - t0))
    # nanoGPT's train.bin: the same tokens, in record order, as one uint16 array.
    with dlcache.TokenStore(store) as t:
        np.concatenate([t.doc(i) for i in range(len(t))]).astype(np.uint16).tofile(flat)
    C.mark_done(store, params)
    return store, flat


class TinyGPT(nn.Module):
    def __init__(self, vocab, dim, layers, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1)
        self.register_buffer("causal", mask)

    def forward(self, ids, pos):
        x = self.tok(ids) + self.pos(pos)
        return self.head(self.body(x, mask=self.causal))


def memmap_batches(flat, batch, seq):
    """nanoGPT's get_batch(), forever."""
    data = np.memmap(flat, dtype=np.uint16, mode="r")
    while True:
        ix = torch.randint(len(data) - seq, (batch,))
        x = torch.stack([torch.from_numpy(data[i:i + seq].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + seq].astype(np.int64)) for i in ix])
        yield {"input_ids": x, "labels": y,
               "position_ids": torch.arange(seq).expand(batch, seq)}


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    with C.workdir(args.workdir, "dlcache-lm-") as root:
        store, flat = make_data(args, root)
        S, B = args.seq_len, args.batch_size
        info = dlcache.TokenStore(store)
        vocab = info.info["vocab_size"]
        loader = dlcache.Loader(store, B, seq_len=S, document_mask=True, seed=args.seed)
        print("token store: %d documents, %d tokens, tokenizer %s; %d windows of %d + 1 "
              "tokens per epoch, %d batches" % (len(info), info.info["num_tokens"],
                                                info.info["tokenizer"], loader.num_windows, S,
                                                len(loader)))
        info.close()

        def ntok(b):
            return b["input_ids"].numel()
        rows = []
        for name, batches in (("dlcache", C.forever(loader)),
                              ("np.memmap", memmap_batches(flat, B, S))):
            rate, _, _ = C.data_rate(batches, ntok, args.data_seconds)
            rows.append((name, rate))
        print(C.table(["loader alone", "tokens/s"], [(n, "%.0f" % r) for n, r in rows]))
        print("data path: dlcache / np.memmap = %.2f" % (rows[0][1] / rows[1][1]))

        results = []
        for name, batches in (("dlcache", C.forever(loader)),
                              ("np.memmap", memmap_batches(flat, B, S))):
            torch.manual_seed(args.seed)
            model = TinyGPT(vocab, args.dim, args.layers, S)
            opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

            def step(b, model=model, opt=opt):
                logits = model(b["input_ids"], b["position_ids"])
                loss = F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(),
                                       ignore_index=-100)
                opt.zero_grad()
                loss.backward()
                opt.step()
                return loss.item()
            out = C.train_steps(name, batches, step, args.steps, log_every=10)
            mean_step, wait, first, last = C.summarize_steps(out)
            results.append((name, "%.3f" % mean_step, "%.4f" % wait, "%.0f" % (B * S / mean_step),
                            "%.2f -> %.2f" % (first, last)))
        print(C.table(["training", "step s", "data wait s", "tokens/s", "loss"], results))

        # Resume: save after k batches, a new Loader continues with the same batches.
        k = 3
        again = dlcache.Loader(store, B, seq_len=S, document_mask=True, seed=args.seed)
        first = dlcache.Loader(store, B, seq_len=S, document_mask=True, seed=args.seed)
        fit = iter(first)
        for _ in range(k):
            next(fit)
        again.load_state_dict(first.state_dict())
        same = all(torch.equal(a["input_ids"], b["input_ids"]) and
                   torch.equal(a["labels"], b["labels"]) for a, b in zip(fit, again))
        C.check(same, "resumed loader diverged")
        print("checked: a state saved after %d batches resumes with exactly the batches that "
              "follow (np.memmap's get_batch draws random windows: nothing to resume)" % k)


if __name__ == "__main__":
    main()

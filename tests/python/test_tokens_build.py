"""cachebuild --tokens against files written by reference code here: nanoGPT's flat uint16 file
(as its prepare.py writes it), .npy arrays (numpy.save), Megatron-LM's indexed dataset (the
_IndexWriter layout of megatron/core/datasets/indexed_dataset.py, rewritten below), JSON lines
of token lists, and JSON lines of text tokenized with a SentencePiece model trained here by
Debian's spm_train, compared with python3-sentencepiece document for document. Bad input is
named with its file, line or record and reason."""
import glob
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from conftest import BIN, BUILD, HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

import dlcache  # noqa: E402

CACHEBUILD = os.path.join(BIN, "cachebuild")


def build(*args, ok=True):
    r = subprocess.run([CACHEBUILD, "--tokens", *map(str, args)], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def docs_of(path):
    with dlcache.TokenStore(path) as t:
        return t.info, [t.doc(i).tolist() for i in range(len(t))]


def with_eos(docs, eos):
    return [list(d) + ([eos] if not len(d) or d[-1] != eos else []) for d in docs if len(d)]


def random_docs(n, vocab, eos, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = rng.integers(0, vocab, size=int(rng.integers(1, 50)))
        d = d[d != eos]
        out.append(d.tolist())
    return out


def test_nanogpt_flat_bin(tmp_path):
    # nanoGPT's data/openwebtext/prepare.py: each document's ids with the EOT (50256) appended,
    # concatenated into one np.memmap of uint16.
    eot = 50256
    docs = [d + [eot] for d in random_docs(40, 50257, eot)]
    flat = np.concatenate([np.array(d, dtype=np.uint16) for d in docs])
    arr = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="w+", shape=flat.shape)
    arr[:] = flat
    arr.flush()
    del arr
    build(tmp_path / "train.bin", "-o", tmp_path / "s.dlc", "--dtype", "uint16", "--eos", eot)
    info, got = docs_of(tmp_path / "s.dlc")
    assert got == docs and info["dtype"] == "uint16" and info["eos_id"] == eot
    # A tail without the EOT becomes a last document with it.
    np.concatenate([flat, np.array([7, 8], np.uint16)]).tofile(tmp_path / "tail.bin")
    build(tmp_path / "tail.bin", "-o", tmp_path / "t.dlc", "--eos", eot)
    assert docs_of(tmp_path / "t.dlc")[1] == docs + [[7, 8, eot]]
    (tmp_path / "odd.bin").write_bytes(b"\1\2\3")
    r = build(tmp_path / "odd.bin", "-o", tmp_path / "o.dlc", "--eos", 0, ok=False)
    assert r.returncode == 1 and "odd.bin: 3 bytes, not a whole number of uint16" in r.stderr


def test_npy_one_and_two_dimensions(tmp_path):
    docs = random_docs(30, 70000, 3, seed=1)
    np.save(tmp_path / "a.npy", np.concatenate([np.array(d + [3]) for d in docs]).astype("<i8"))
    rows = np.random.default_rng(2).integers(4, 1000, size=(5, 16)).astype(np.uint32)
    np.save(tmp_path / "b.npy", rows)
    build(tmp_path / "a.npy", tmp_path / "b.npy", "-o", tmp_path / "s.dlc", "--eos", 3,
          "--vocab", 70000)
    info, got = docs_of(tmp_path / "s.dlc")
    assert info["dtype"] == "int32"
    assert got == with_eos(docs, 3) + with_eos(rows.tolist(), 3)
    np.save(tmp_path / "f.npy", np.zeros(4, np.float32))
    r = build(tmp_path / "f.npy", "-o", tmp_path / "x.dlc", "--eos", 0, ok=False)
    assert "f.npy: .npy of '<f4'" in r.stderr
    np.save(tmp_path / "neg.npy", np.array([1, -2], np.int16))
    r = build(tmp_path / "neg.npy", "-o", tmp_path / "x.dlc", "--eos", 0, ok=False)
    assert "neg.npy: token 1 is -2, not an id" in r.stderr


def _npy_header_only(path, shape):
    h = "{'descr': '<u2', 'fortran_order': False, 'shape': %s, }" % shape
    h += " " * ((64 - (len(h) + 11) % 64) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())


@pytest.mark.parametrize("shape,why", [
    # Rows of no tokens take no bytes: the size check cannot bound their number, and 2^64 - 1
    # empty rows kept cachebuild busy for ever.
    ("(18446744073709551615, 0)", "shape (18446744073709551615, 0): rows of no tokens"),
    ("(5, 0)", "shape (5, 0): rows of no tokens"),
    # strtoull() reads "-1" as 2^64 - 1.
    ("(-1, 0)", "token arrays are 1-D"),
    ("(-1,)", "token arrays are 1-D"),
    # The product overflows 64 bits: named as too large, not as a wrapped count.
    ("(4294967296, 4294967296)", "shape (4294967296, 4294967296) is larger than any file"),
])
def test_npy_shapes_that_lie_are_refused(tmp_path, shape, why):
    _npy_header_only(tmp_path / "lie.npy", shape)
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "lie.npy"), "-o",
                        str(tmp_path / "x.dlc"), "--eos", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "lie.npy: " in r.stderr and why in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "x.dlc") and not glob.glob(str(tmp_path / "x.dlc.*"))


# Megatron-LM's indexed dataset writer, after megatron/core/datasets/indexed_dataset.py
# (_IndexWriter.write and IndexedDatasetBuilder.add_item/end_document): the reference the
# builder's reader is checked against.
_MEGATRON_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                   np.float64: 6, np.float32: 7, np.uint16: 8}


class MegatronBuilder:
    def __init__(self, bin_path, dtype):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_item(self, tokens):
        arr = np.array(tokens, dtype=self.dtype)
        self.data_file.write(arr.tobytes(order="C"))
        self.sequence_lengths.append(arr.size)

    def end_document(self):
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        itemsize = np.dtype(self.dtype).itemsize
        pointers, curr = [], 0
        for length in self.sequence_lengths:
            pointers.append(curr)
            curr += length * itemsize
        with open(idx_path, "wb") as idx:
            idx.write(b"MMIDIDX\x00\x00")
            idx.write(struct.pack("<Q", 1))
            idx.write(struct.pack("<B", _MEGATRON_CODES[self.dtype]))
            idx.write(struct.pack("<Q", len(self.sequence_lengths)))
            idx.write(struct.pack("<Q", len(self.document_indices)))
            idx.write(np.array(self.sequence_lengths, dtype=np.int32).tobytes(order="C"))
            idx.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
            idx.write(np.array(self.document_indices, dtype=np.int64).tobytes(order="C"))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_pair(tmp_path, dtype):
    eod = 2
    rng = np.random.default_rng(3)
    b = MegatronBuilder(tmp_path / "corpus_text_document.bin", dtype)
    want = []
    for d in range(25):
        doc = []
        for _ in range(int(rng.integers(1, 4))):  # a document of several sentences
            s = [int(x) for x in rng.integers(3, 30000, size=int(rng.integers(1, 20)))]
            b.add_item(s)
            doc += s
        if d % 2:  # preprocess_data.py --append-eod: the EOD is inside the last sentence
            b.add_item([eod])
            doc.append(eod)
        b.end_document()
        want.append(doc)
    b.finalize(tmp_path / "corpus_text_document.idx")
    for src in ("corpus_text_document.idx", "corpus_text_document.bin"):
        build(tmp_path / src, "-o", tmp_path / "s.dlc", "--eos", eod, "--force")
        assert docs_of(tmp_path / "s.dlc")[1] == with_eos(want, eod)
    # Both halves, as a shell's corpus_text_document.* gives them: one data set, named once.
    # Before: each half read the pair, and every document was stored twice.
    r = build(tmp_path / "corpus_text_document.bin", tmp_path / "corpus_text_document.idx", "-o",
              tmp_path / "two.dlc", "--eos", eod, ok=False)
    assert r.returncode == 1 and "name one Megatron data set" in r.stderr, r.stderr
    assert "give it once" in r.stderr and not (tmp_path / "two.dlc").exists()
    # A pointer past the data file is named with the sequence.
    raw = bytearray((tmp_path / "corpus_text_document.idx").read_bytes())
    nseq = struct.unpack_from("<Q", raw, 18)[0]
    struct.pack_into("<q", raw, 34 + 4 * nseq + 8 * 3, 1 << 40)
    (tmp_path / "bad.idx").write_bytes(bytes(raw))
    shutil.copy(tmp_path / "corpus_text_document.bin", tmp_path / "bad.bin")
    r = build(tmp_path / "bad.idx", "-o", tmp_path / "x.dlc", "--eos", eod, ok=False)
    assert r.returncode == 1 and "bad.idx: sequence 3 (document" in r.stderr
    assert "lie outside" in r.stderr


def test_jsonl_token_lists_and_errors(tmp_path):
    docs = random_docs(20, 1000, 0, seed=4)
    with open(tmp_path / "a.jsonl", "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "ids": d}) + "\n")
    build(tmp_path / "a.jsonl", "-o", tmp_path / "s.dlc", "--field", "ids", "--eos", 0,
          "--vocab", 1000)
    assert docs_of(tmp_path / "s.dlc")[1] == with_eos(docs, 0)
    for line, why in ((json.dumps({"ids": [1, 2.5]}), '"ids"[1]: 2.5 is not a token id'),
                      (json.dumps({"x": [1]}), 'an object without a "ids" member'),
                      ('{"ids": [1, 2', "not one JSON value"),
                      ('{"ids": [1, 007]}', "not one JSON value"),
                      ('{"ids": [1], "x": %s1%s}' % ("[" * 17, "]" * 17),
                       "nested deeper than 16 levels"),
                      (json.dumps({"ids": [1, 5000]}), "token 1 is id 5000, not below 1000"),
                      # Python's json takes the last of two members, the first was read here.
                      ('{"ids": [1], "ids": [2]}', 'the object has two "ids" members'),
                      # A 26-digit id is JSON: it was called "not one JSON value".
                      ('{"ids": [1, %d]}' % 10**25,
                       '"ids"[1]: 10000000000000000000000000 is not a token id'),
                      # JSON text is UTF-8: json.loads() refuses this line, it was read here.
                      (b'{"ids": [1], "m": "\xff"}', "byte 20 (0xff) is not UTF-8")):
        if isinstance(line, str):
            line = line.encode()
        (tmp_path / "bad.jsonl").write_bytes(json.dumps({"ids": [1]}).encode() + b"\n" + line
                                             + b"\n")
        r = build(tmp_path / "bad.jsonl", "-o", tmp_path / "x.dlc", "--field", "ids", "--eos", 0,
                  "--vocab", 1000, ok=False)
        assert r.returncode == 1 and "bad.jsonl: line 2: " in r.stderr and why in r.stderr, \
            r.stderr
        assert not (tmp_path / "x.dlc").exists()


SPM_PLUGIN = os.path.join(BUILD, "lib", "libdlcache_spm.so")


@pytest.mark.skipif(not shutil.which("spm_train") or not os.path.exists(SPM_PLUGIN),
                    reason="needs spm_train and libdlcache_spm.so (libsentencepiece-dev)")
def test_sentencepiece_matches_python(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    texts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*"))[:12]:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    assert texts, "no text on this machine"
    (tmp_path / "train.txt").write_text("\n".join(texts))
    subprocess.run(["spm_train", "--input", str(tmp_path / "train.txt"), "--model_prefix",
                    str(tmp_path / "m"), "--vocab_size", "500", "--model_type", "bpe",
                    "--minloglevel", "2"], check=True, capture_output=True)
    docs = [t[:3000] for t in texts] + ["naïve café — “quotes” ✓ 𝄞", ""]
    with open(tmp_path / "d.jsonl", "w") as f:
        for d in docs:  # ensure_ascii (the default): non-ASCII as \\u escapes, pairs too
            f.write(json.dumps({"text": d}) + "\n")
    r = build(tmp_path / "d.jsonl", "-o", tmp_path / "s.dlc", "--tokenizer", tmp_path / "m.model",
              "--json")
    rep = json.loads(r.stdout)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    eos = sp.eos_id()
    want = [sp.encode(d) + [eos] for d in docs if sp.encode(d)]
    info, got = docs_of(tmp_path / "s.dlc")
    assert got == want
    assert rep["skipped"] == 1 and info["eos_id"] == eos and info["vocab_size"] == 500
    assert info["tokenizer"] == "sentencepiece:m.model" and info["tokenizer_digest"] != 0
    r = build(tmp_path / "d.jsonl", "-o", tmp_path / "x.dlc", "--tokenizer", tmp_path / "d.jsonl",
              ok=False)
    assert "d.jsonl: not a SentencePiece model" in r.stderr


def test_tokenizer_without_plugin_is_refused(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"text": "a"}\n')
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "d.jsonl"), "-o",
                        str(tmp_path / "s.dlc"), "--tokenizer", "/nonexistent.model"],
                       capture_output=True, text=True,
                       env=dict(os.environ, DLCACHE_SPM_PLUGIN=str(tmp_path / "none.so")))
    assert r.returncode == 1 and "no SentencePiece plugin" in r.stderr


def test_fifo_source_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "f.jsonl")
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "f.jsonl"), "-o",
                        str(tmp_path / "s.dlc"), "--eos", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "f.jsonl: a FIFO, not a regular file" in r.stderr


@pytest.mark.skipif(not os.path.exists(SPM_PLUGIN),
                    reason="needs libdlcache_spm.so (libsentencepiece-dev)")
def test_fifo_tokenizer_refused_without_blocking(tmp_path):
    """--tokenizer was loaded by SentencePiece from its path: a FIFO there stalled the build
    (SIGTERM too, until a writer came). The builder reads the model itself, as a regular file,
    and loads it from those bytes, the ones its digest is of."""
    (tmp_path / "d.jsonl").write_text('{"text": "a"}\n')
    os.mkfifo(tmp_path / "m.model")
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "d.jsonl"), "-o",
                        str(tmp_path / "s.dlc"), "--tokenizer", str(tmp_path / "m.model")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "m.model: a FIFO, not a regular file (a SentencePiece model must be one)" in r.stderr
    (tmp_path / "e.model").write_bytes(b"")
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "d.jsonl"), "-o",
                        str(tmp_path / "s.dlc"), "--tokenizer", str(tmp_path / "e.model")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "e.model: not a SentencePiece model: an empty file" in r.stderr


def test_sigterm_stops_a_token_build_cleanly(tmp_path):
    """SIGTERM (and SIGINT) cancel a token build through its progress callback: exit 143, no
    temporary file, the old store kept. It used to die with its temporary file (150 MB in a
    try) left for the next build to remove."""
    import signal
    import time
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50000, size=40_000_000, dtype=np.uint16)
    ids[::300] = 0
    ids.tofile(tmp_path / "big.bin")
    ids[:1_000_000].tofile(tmp_path / "small.bin")
    out = tmp_path / "t.dlc"
    build(tmp_path / "small.bin", "-o", out, "--eos", 0)
    with dlcache.TokenStore(out) as t:
        before = (t.info["num_docs"], t.info["num_tokens"])
    p = subprocess.Popen([CACHEBUILD, "--tokens", str(tmp_path / "big.bin"), "-o", str(out),
                          "--eos", "0", "--force"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not glob.glob(str(out) + ".tmp-*") and p.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.005)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert not glob.glob(str(out) + ".tmp-*"), "a temporary file was left"
    if p.returncode == 0:
        pytest.skip("the build finished before SIGTERM reached it")
    assert p.returncode == 143, err
    assert "interrupted; %s was not written" % out in err, err
    with dlcache.TokenStore(out) as t:
        assert (t.info["num_docs"], t.info["num_tokens"]) == before, "the old store changed"


def test_zero_rows_of_any_length_hold_nothing_and_break_nothing(tmp_path):
    """(0, N) needs no data bytes, so N was unbounded: the buffer for a row of N tokens wrapped
    its size (2^63 + 1: a loop for ever; 2^62: a 0-byte buffer written past by the next source,
    or a freed one freed again). Zero rows hold no document, whatever N."""
    _npy_header_only(tmp_path / "z63.npy", "(0, 9223372036854775809)")
    _npy_header_only(tmp_path / "z62.npy", "(0, 4611686018427387904)")
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"tokens": list(range(1, 5001))}) + "\n"
                            for _ in range(4)))
    for srcs in (["z62.npy", "good.jsonl"], ["good.jsonl", "z62.npy"]):
        r = subprocess.run([CACHEBUILD, "--tokens"] + [str(tmp_path / s) for s in srcs]
                           + ["-o", str(tmp_path / "x.dlc"), "--eos", "0", "--force"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "4 documents, 20004 tokens" in r.stdout, r.stdout  # with the end-of-document ids
    r = subprocess.run([CACHEBUILD, "--tokens", str(tmp_path / "z63.npy"), "-o",
                        str(tmp_path / "y.dlc"), "--eos", "0"],
                       capture_output=True, text=True, timeout=60)
    # The store's name once, not "y.dlc: y.dlc: the sources hold no document".
    assert r.returncode == 1 and r.stderr.count("y.dlc") == 1 and \
        "the sources hold no document" in r.stderr, r.stderr

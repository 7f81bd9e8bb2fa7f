"""Token stores written by dlcache.write_tokens() and read back, against numpy: records, the
prefix sums (and token position -> document by numpy's searchsorted), the tokenizer identity,
errors; and read by the generic record API as an older reader would (one variable array)."""
import lmdb
import struct

import numpy as np
import pytest

import dlcache


def make_docs(n, seed, vocab, eos):
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        d = rng.integers(1, vocab, size=int(rng.integers(0, 40)))
        if i % 4 == 0 and d.size:
            d[-1] = eos
        docs.append(d)
    return docs


def expected(docs, eos):
    out = []
    for d in docs:
        if d.size == 0:
            continue
        out.append(np.concatenate([d, [eos]]) if d[-1] != eos else d)
    return out


@pytest.mark.parametrize("vocab,dtype", [(1000, np.uint16), (70000, np.int32)])
def test_round_trip_and_offsets(tmp_path, vocab, dtype):
    docs = make_docs(300, 1, vocab, eos=vocab - 1)
    path = tmp_path / "t.dlc"
    r = dlcache.write_tokens(docs, path, eos_id=vocab - 1, vocab_size=vocab)
    want = expected(docs, vocab - 1)
    assert r["documents"] == len(want) and r["skipped"] == len(docs) - len(want)
    lens = np.array([len(d) for d in want])
    ref = np.concatenate([[0], np.cumsum(lens)])
    with dlcache.TokenStore(path) as t:
        assert t.info["dtype"] == np.dtype(dtype).name
        assert t.info["tokenizer"] == "pretokenized"
        assert t.info["num_tokens"] == lens.sum() and t.info["max_doc_tokens"] == lens.max()
        np.testing.assert_array_equal(t.offsets, ref)
        for i, d in enumerate(want):
            np.testing.assert_array_equal(t.doc(i), d)
        rng = np.random.default_rng(2)
        for p in rng.integers(0, lens.sum(), 200):
            assert t.find(p) == np.searchsorted(ref, p, "right") - 1
        t.verify()
        with pytest.raises(IndexError):
            t.find(int(lens.sum()))


def test_old_reader_sees_records_and_meta_layout(tmp_path):
    path = tmp_path / "t.dlc"
    dlcache.write_tokens([[5, 6, 7], [8]], path, eos_id=0, vocab_size=10, tokenizer="spm:x",
                         tokenizer_digest=1234)
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, max_dbs=2)
    meta = env.open_db(b"meta", create=False)
    with env.begin() as txn:
        block = txn.get(b"tokens", db=meta)
        off = txn.get(b"token_offsets", db=meta)
    # docs/FORMAT.md's struct format for the block.
    (magic, ver, dtype, docs, toks, eos, vocab, field, _res, longest, _dig, name, tdig,
     _h) = struct.unpack_from("<8sIIQQIIIIQQ48sQQ", block)
    assert (magic, ver, dtype, docs, toks, eos, vocab, field, longest) == (
        b"DLCTOK01", 1, 4, 2, 6, 0, 10, 0, 4)
    assert name.rstrip(b"\0") == b"spm:x" and tdig == 1234
    assert struct.unpack("<3Q", off) == (0, 4, 6)
    # The generic record API (what a library before token stores reads).
    with dlcache.Store(path) as s:
        assert len(s) == 2
        np.testing.assert_array_equal(s[1]["tokens"], [8, 0])


def test_bad_ids_named(tmp_path):
    with pytest.raises(dlcache.InvalidArgumentError, match="document 1: token 0 is id 10"):
        dlcache.write_tokens([[1], [10]], tmp_path / "x.dlc", eos_id=0, vocab_size=10)
    assert not list(tmp_path.iterdir()), "nothing left behind"
    with pytest.raises(ValueError, match="document 0: negative"):
        dlcache.write_tokens([[-1]], tmp_path / "y.dlc", eos_id=0)
    with pytest.raises(dlcache.NotFoundError, match="not a token store"):
        dlcache.write([{"x": 1}], tmp_path / "plain.dlc")
        dlcache.TokenStore(tmp_path / "plain.dlc")


def test_cacheinfo_shows_and_verifies_tokens(tmp_path):
    import os
    import subprocess
    from conftest import BIN
    path = tmp_path / "t.dlc"
    dlcache.write_tokens([[5, 6, 7], [8], [9, 9]], path, eos_id=0, vocab_size=10)
    info = os.path.join(BIN, "cacheinfo")
    r = subprocess.run([info, str(path), "--verify"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "tokens       3 documents, 9 tokens (uint16, end-of-document id 0" in r.stdout
    # Offsets with the right ends and a wrong middle: open accepts them, verify does not.
    env = lmdb.open(str(path), subdir=False, lock=False, max_dbs=2)
    meta = env.open_db(b"meta", create=False)
    with env.begin(write=True) as txn:
        txn.put(b"token_offsets", struct.pack("<4Q", 0, 3, 5, 9), db=meta)
    env.close()
    r = subprocess.run([info, str(path), "--verify"], capture_output=True, text=True)
    assert r.returncode == 1 and "token offsets: checksum mismatch" in r.stderr, r.stderr


def test_values_a_c_field_would_wrap_are_refused(tmp_path):
    """Python ints went into 32 and 64-bit C fields as they were: eos_id=2**32 + 7 wrote a store
    ending documents with 7, doc(2**64) read document 0, set_epoch(2**64) read epoch 0."""
    docs = [np.arange(1, 20)] * 3
    for kw, what in ((dict(eos_id=2**32 + 7), "eos_id"), (dict(eos_id=0, vocab_size=2**32 + 50),
                                                         "vocab_size"),
                     (dict(eos_id=-1), "eos_id"), (dict(eos_id=1.5), "eos_id")):
        with pytest.raises(ValueError, match=what):
            dlcache.write_tokens(docs, tmp_path / "w.dlc", force=True, **kw)
    dlcache.write_tokens(docs, tmp_path / "w.dlc", eos_id=np.int64(0), vocab_size=np.uint32(100))
    with dlcache.TokenStore(tmp_path / "w.dlc") as t:
        for i in (2**64, -1):
            with pytest.raises(ValueError, match="document must be in"):
                t.doc(i)
        assert t.doc(np.int64(1)).tolist()[:3] == [1, 2, 3]
    ld = dlcache.Loader(str(tmp_path / "w.dlc"), 2, seq_len=4)
    with pytest.raises(ValueError, match="epoch must be in"):
        ld.set_epoch(2**64)
    ld.close()


def test_find_checks_its_position(tmp_path):
    """find() gave int(pos) to a C uint64: 2**64 found document 0, 2**64 + 7553 document 299 (the
    low bits' one), and nan raised int()'s bare words. The position is checked as doc()'s
    document is."""
    docs = make_docs(300, 1, 1000, eos=999)
    dlcache.write_tokens(docs, tmp_path / "f.dlc", eos_id=999, vocab_size=1000)
    with dlcache.TokenStore(tmp_path / "f.dlc") as t:
        n = t.info["num_tokens"]
        for bad in (2**64, 2**64 + 7553, -1, float("nan"), 1.0, "3", True):
            with pytest.raises(ValueError, match="token position must be"):
                t.find(bad)
        with pytest.raises(IndexError, match="token position %d of %d" % (n, n)):
            t.find(n)
        assert t.find(np.uint64(n - 1)) == len(t) - 1 and t.find(np.int32(0)) == 0


def test_tokenizer_digest_is_checked(tmp_path):
    """tokenizer_digest went to a C uint64 through int(): 2**64 + 123 stored 123 and -1 stored
    2**64 - 1."""
    p = tmp_path / "d.dlc"
    for bad in (2**64 + 123, -1, 1.5, "12", True):
        with pytest.raises(ValueError, match="tokenizer_digest must be"):
            dlcache.write_tokens([[1, 2]], p, eos_id=0, tokenizer_digest=bad, force=True)
        assert not p.exists()
    for ok in (2**64 - 1, np.uint64(123)):
        dlcache.write_tokens([[1, 2]], p, eos_id=0, tokenizer_digest=ok, force=True)
        with dlcache.TokenStore(p) as t:
            assert t.info["tokenizer_digest"] == ok


def test_tokenizer_is_str_or_bytes(tmp_path):
    """tokenizer=b"x" raised "'bytes' object has no attribute 'encode'": bytes of UTF-8 text are
    taken as the str; other types, bytes that are not UTF-8 and a NUL (ctypes ended the name
    there) are refused naming tokenizer."""
    p = tmp_path / "n.dlc"
    for given, stored in ((b"spm:x", "spm:x"), (bytearray(b"spm:y"), "spm:y"),
                          ("caf\u00e9".encode(), "caf\u00e9"), ("spm:z", "spm:z"),
                          (b"", "pretokenized"), (None, "pretokenized")):
        dlcache.write_tokens([[1, 2]], p, eos_id=0, tokenizer=given, force=True)
        with dlcache.TokenStore(p) as t:
            assert t.info["tokenizer"] == stored
    for bad, err, why in ((5, TypeError, "tokenizer must be a str or bytes, not int"),
                          (["spm"], TypeError, "tokenizer must be a str or bytes, not list"),
                          (b"\xff\xfe", ValueError, "tokenizer must be UTF-8 text"),
                          ("a\udcffb", ValueError, "tokenizer must be UTF-8 text"),
                          ("spm\0x", ValueError, "tokenizer must not contain NUL")):
        with pytest.raises(err, match=why):
            dlcache.write_tokens([[1, 2]], tmp_path / "bad.dlc", eos_id=0, tokenizer=bad)
        assert not (tmp_path / "bad.dlc").exists()


def test_verify_finds_a_flipped_bit_inside_a_document(tmp_path):
    """doc() and the loader check a document's length and its last id only: a bit flipped
    inside one was read as another token, and TokenStore.verify() said nothing. It checks every
    document's checksum now, as cacheinfo --verify does."""
    p = tmp_path / "flip.dlc"
    dlcache.write_tokens([np.arange(1000, 1100)] * 5, p, eos_id=0, vocab_size=2000)
    with dlcache.TokenStore(p) as t:
        t.verify()
    raw = bytearray(p.read_bytes())
    i = raw.find(np.arange(1000, 1010, dtype=np.uint16).tobytes())
    raw[i + 2] ^= 1
    p.write_bytes(bytes(raw))
    with dlcache.TokenStore(p) as t:
        with pytest.raises(dlcache.CorruptError, match=r"flip.dlc: record \d: field \"tokens\": "
                           "checksum mismatch"):
            t.verify()

"""Token stores (include/dlcache/tokens.h, docs/FORMAT.md "Token stores").

* ``write_tokens(docs, path, eos_id, ...)`` writes one document's token ids per record, with the
  prefix sums of the documents' lengths and the tokenizer's identity in the metadata;
* ``TokenStore(path)`` reads one: ``offsets`` (a numpy view of the prefix sums), ``doc(i)``,
  ``find(pos)`` (the document of a token position, by binary search), ``info``.
"""

import ctypes
import os

import numpy as np

from . import _lib
from ._lib import lib
from .errors import check

_P = ctypes.c_void_p
_S = _lib.c_status


class TokensInfo(ctypes.Structure):
    """dlc_tokens_info."""
    _fields_ = [("num_docs", ctypes.c_uint64), ("num_tokens", ctypes.c_uint64),
                ("dtype", ctypes.c_uint32), ("eos_id", ctypes.c_uint32),
                ("vocab_size", ctypes.c_uint32), ("field", ctypes.c_uint32),
                ("max_doc_tokens", ctypes.c_uint64), ("offsets_digest", ctypes.c_uint64),
                ("tokenizer_digest", ctypes.c_uint64), ("tokenizer", ctypes.c_char * 48)]


class TokenWriterConfig(ctypes.Structure):
    """dlc_token_writer_config."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_uint32),
                ("vocab_size", ctypes.c_uint32), ("eos_id", ctypes.c_uint32),
                ("force", ctypes.c_int), ("tokenizer", ctypes.c_char_p),
                ("tokenizer_digest", ctypes.c_uint64), ("build_json", ctypes.c_char_p),
                ("source_digest", ctypes.c_uint64)]


_lib._PROTOTYPES.update({
    "dlc_tokens_open": (_S, [_P, ctypes.POINTER(_P)]),
    "dlc_tokens_close": (None, [_P]),
    "dlc_tokens_get_info": (ctypes.POINTER(TokensInfo), [_P]),
    "dlc_tokens_offsets": (ctypes.POINTER(ctypes.c_uint64), [_P]),
    "dlc_tokens_find": (ctypes.c_uint64, [_P, ctypes.c_uint64]),
    "dlc_tokens_doc": (_S, [_P, _P, ctypes.c_uint64, ctypes.POINTER(_P),
                            ctypes.POINTER(ctypes.c_uint64)]),
    "dlc_tokens_verify": (_S, [_P, _P]),
    "dlc_token_writer_config_init_sized": (None, [ctypes.POINTER(TokenWriterConfig),
                                                  ctypes.c_size_t]),
    "dlc_token_writer_open": (_S, [ctypes.c_char_p, ctypes.POINTER(TokenWriterConfig),
                                   ctypes.POINTER(_P)]),
    "dlc_token_writer_add": (_S, [_P, _P, ctypes.c_uint64]),
    "dlc_token_writer_count": (ctypes.c_uint64, [_P]),
    "dlc_token_writer_tokens": (ctypes.c_uint64, [_P]),
    "dlc_token_writer_finish": (_S, [_P]),
    "dlc_token_writer_abort": (None, [_P]),
})

_DTYPES = {None: 0, "auto": 0, "uint16": _lib.DTYPE_UINT16, "int32": _lib.DTYPE_INT32}


def write_tokens(docs, path, eos_id, vocab_size=0, dtype=None, tokenizer=None,
                 tokenizer_digest=0, force=False):
    """Write a token store at ``path``: one record per document of ``docs`` (an iterable of
    sequences of non-negative ints: lists, numpy arrays, tensors), each ending with ``eos_id``
    (appended when missing; an empty document is skipped and counted). ``dtype`` "uint16" or
    "int32" (default: uint16 when ``vocab_size`` is 1..65536, else int32); ``tokenizer`` names
    the tokenizer (default "pretokenized"). Returns {"documents", "tokens", "skipped"}."""
    cfg = TokenWriterConfig()
    lib.dlc_token_writer_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
    if dtype not in _DTYPES:
        raise ValueError("dtype is 'uint16' or 'int32', not %r" % (dtype,))
    cfg.dtype, cfg.vocab_size, cfg.eos_id = _DTYPES[dtype], int(vocab_size), int(eos_id)
    cfg.force = 1 if force else 0
    cfg.tokenizer = tokenizer.encode() if tokenizer else None
    cfg.tokenizer_digest = int(tokenizer_digest)
    w = _P()
    check(lib.dlc_token_writer_open(os.fsencode(path), ctypes.byref(cfg), ctypes.byref(w)),
          os.fsdecode(path))
    skipped = 0
    try:
        for i, d in enumerate(docs):
            if hasattr(d, "numpy"):
                d = d.numpy()
            a = np.asarray(d)
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise ValueError("%s: document %d: a 1-D sequence of ints, not %s %s"
                                 % (os.fsdecode(path), i, a.dtype, a.shape))
            if a.size and a.min() < 0:
                raise ValueError("%s: document %d: negative token id %d"
                                 % (os.fsdecode(path), i, int(a.min())))
            if a.size and a.max() > 0xFFFFFFFF:
                raise ValueError("%s: document %d: token id %d beyond 32 bits"
                                 % (os.fsdecode(path), i, int(a.max())))
            a = np.ascontiguousarray(a, dtype=np.uint32)
            skipped += a.size == 0
            check(lib.dlc_token_writer_add(w, a.ctypes.data, a.size), os.fsdecode(path))
        n, t = lib.dlc_token_writer_count(w), lib.dlc_token_writer_tokens(w)
    except BaseException:
        lib.dlc_token_writer_abort(w)
        raise
    check(lib.dlc_token_writer_finish(w), os.fsdecode(path))
    return {"documents": n, "tokens": t, "skipped": skipped}


class TokenStore:
    """A token store opened for reading: ``info`` (a dict of the "tokens" block), ``offsets``
    (numpy uint64 view of the prefix sums, num_docs + 1), ``doc(i)`` (numpy array of document
    i's ids, a copy), ``find(pos)``, ``verify()``. Close with ``close()`` or ``with``."""

    def __init__(self, path):
        self.path = os.fsdecode(path)
        self._s, self._t, self._r = _P(), _P(), _P()
        check(lib.dlc_store_open(os.fsencode(path), 0, ctypes.byref(self._s)), self.path)
        try:
            check(lib.dlc_tokens_open(self._s, ctypes.byref(self._t)), self.path)
            check(lib.dlc_store_reader_open(self._s, ctypes.byref(self._r)), self.path)
        except BaseException:
            self.close()
            raise
        i = lib.dlc_tokens_get_info(self._t).contents
        self.info = {"num_docs": i.num_docs, "num_tokens": i.num_tokens,
                     "dtype": _lib.DTYPE_NAMES[i.dtype], "eos_id": i.eos_id,
                     "vocab_size": i.vocab_size, "max_doc_tokens": i.max_doc_tokens,
                     "tokenizer": i.tokenizer.decode(), "tokenizer_digest": i.tokenizer_digest}
        ptr = lib.dlc_tokens_offsets(self._t)
        self.offsets = np.ctypeslib.as_array(ptr, shape=(i.num_docs + 1,))
        self._dtype = np.dtype(self.info["dtype"]).newbyteorder("<")

    def __len__(self):
        return self.info["num_docs"]

    def doc(self, i):
        data, n = _P(), ctypes.c_uint64()
        check(lib.dlc_tokens_doc(self._t, self._r, int(i), ctypes.byref(data), ctypes.byref(n)),
              self.path)
        buf = (ctypes.c_char * (n.value * self._dtype.itemsize)).from_address(data.value)
        return np.frombuffer(bytes(buf), dtype=self._dtype).copy()

    def find(self, pos):
        d = lib.dlc_tokens_find(self._t, int(pos))
        if d == 2**64 - 1:
            raise IndexError("%s: token position %d of %d" % (self.path, pos,
                                                              self.info["num_tokens"]))
        return d

    def verify(self):
        check(lib.dlc_tokens_verify(self._t, self._s), self.path)

    def close(self):
        self.offsets = None
        if self._r:
            lib.dlc_store_reader_close(self._r)
            self._r = _P()
        if self._t:
            lib.dlc_tokens_close(self._t)
            self._t = _P()
        if self._s:
            lib.dlc_store_close(self._s)
            self._s = _P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

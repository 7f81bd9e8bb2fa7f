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
                ("source_digest", ctypes.c_uint64), ("part", ctypes.c_uint32),
                ("parts", ctypes.c_uint32), ("set_id", ctypes.c_uint64),
                ("first_item", ctypes.c_uint64), ("end_item", ctypes.c_uint64)]


_lib._PROTOTYPES.update({
    "dlc_tokens_open": (_S, [_P, ctypes.POINTER(_P)]),
    "dlc_tokens_close": (None, [_P]),
    "dlc_tokens_get_info": (ctypes.POINTER(TokensInfo), [_P]),
    "dlc_tokens_offsets": (ctypes.POINTER(ctypes.c_uint64), [_P]),
    "dlc_tokens_find": (ctypes.c_uint64, [_P, ctypes.c_uint64]),
    "dlc_tokens_doc_start": (ctypes.c_uint64, [_P, ctypes.c_uint64]),
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
        if ptr:
            self.offsets = np.ctypeslib.as_array(ptr, shape=(i.num_docs + 1,))
        else:  # a set: its shards' tables, each from the shard's first token
            self.offsets = np.array([lib.dlc_tokens_doc_start(self._t, d)
                                     for d in range(i.num_docs + 1)], dtype=np.uint64)
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


# ---- Packed sequences ----------------------------------------------------------------------

class TokenLoaderConfig(ctypes.Structure):
    """dlc_token_loader_config."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("batch_size", ctypes.c_uint32),
                ("seq_len", ctypes.c_uint32), ("rank", ctypes.c_uint32),
                ("world_size", ctypes.c_uint32), ("threads", ctypes.c_uint32),
                ("out_dtype", ctypes.c_uint32), ("packing", ctypes.c_uint32),
                ("seed", ctypes.c_uint64), ("shuffle", ctypes.c_int), ("drop_last", ctypes.c_int),
                ("document_mask", ctypes.c_int), ("pad_id", ctypes.c_int32)]


class TokenBatch(ctypes.Structure):
    """dlc_token_batch."""
    _fields_ = [("rows", ctypes.c_uint32), ("seq_len", ctypes.c_uint32),
                ("dtype", ctypes.c_uint32), ("num_cu", ctypes.c_uint32),
                ("input_ids", _P), ("labels", _P), ("position_ids", _P),
                ("cu_seqlens", _P), ("max_seqlen", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("epoch", ctypes.c_uint64),
                ("index", ctypes.c_uint64)]


_lib._PROTOTYPES.update({
    "dlc_token_loader_config_init_sized": (None, [ctypes.POINTER(TokenLoaderConfig),
                                                  ctypes.c_size_t]),
    "dlc_token_loader_open": (_S, [ctypes.c_char_p, ctypes.POINTER(TokenLoaderConfig),
                                   ctypes.POINTER(_P)]),
    "dlc_token_loader_close": (None, [_P]),
    "dlc_token_loader_num_windows": (ctypes.c_uint64, [_P]),
    "dlc_token_loader_seek": (_S, [_P, ctypes.c_uint64, ctypes.c_uint64]),
    "dlc_token_loader_len": (ctypes.c_uint64, [_P]),
    "dlc_token_loader_position": (ctypes.c_uint64, [_P, ctypes.POINTER(ctypes.c_uint64)]),
    "dlc_token_loader_next": (_S, [_P, ctypes.POINTER(TokenBatch)]),
    "dlc_token_loader_doc_at": (ctypes.c_uint64, [_P, ctypes.c_uint64]),
    "dlc_token_loader_open_mix": (_S, [ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.POINTER(ctypes.c_double), ctypes.c_uint32,
                                       ctypes.c_uint64, ctypes.POINTER(TokenLoaderConfig),
                                       ctypes.POINTER(_P)]),
    "dlc_token_loader_mix_state": (_S, [_P, ctypes.c_char_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
    "dlc_token_loader_mix_restore": (_S, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "dlc_token_loader_packing": (_S, [_P, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_int)]),
})

_STATE_KEY = "dlcache_token_loader_state"
_PACKINGS = {"concat": 0, "best_fit": 1}


def _env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


class TokenLoader:
    """Packed sequences of a token store (docs/TOKENS.md): what ``dlcache.Loader(path,
    batch_size, seq_len=N)`` returns for a token store.

    Each batch is a dict of torch tensors: ``input_ids`` and ``labels`` [B, seq_len] (labels are
    the next tokens), ``position_ids`` [B, seq_len] (0 at each row's and each document's start),
    and with ``document_mask=True`` ``cu_seqlens`` (int32, the start of every document's piece in
    the flattened batch, then B x seq_len) and ``max_seqlen`` (int), and labels -100 where the
    target lies in the next document. ``dtype`` is torch.int64 (default) or torch.int32.

    Packing "best_fit": documents placed whole into rows by best-fit decreasing (longer ones
    cut into pieces of seq_len), the rest of a row ``pad_id`` with label -100; the plan is made
    once and kept beside the store (STORE.bestfit-SEQ_LEN-SEED); ``packing_info`` says how much
    is padding. The rows are permuted per epoch like windows.

    Packing "concat": the documents concatenated in an order fixed by ``seed``, cut into windows
    of seq_len + 1 tokens overlapping by one, the windows permuted per epoch and dealt to ranks as
    DistributedSampler deals samples: every token but the tail is an input exactly once per
    epoch. ``state_dict()``/``load_state_dict()`` resume exactly, also under another world size.
    The tensors are the loader's own copies (the C slots are reused).
    """

    def __init__(self, path, batch_size, *, seq_len=2048, seed=0, shuffle=True, drop_last=False,
                 document_mask=False, packing="concat", dtype=None, rank=None, world_size=None,
                 threads=2, pad_id=0, weights=None, rows_per_epoch=None):
        import torch
        self._torch = torch
        self._h = _P()
        if packing not in _PACKINGS:
            raise ValueError("packing is one of %s, not %r" % (sorted(_PACKINGS), packing))
        if dtype is None:
            dtype = torch.int64
        if dtype not in (torch.int64, torch.int32):
            raise ValueError("dtype is torch.int64 or torch.int32, not %r" % (dtype,))
        cfg = TokenLoaderConfig()
        lib.dlc_token_loader_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
        self.path = (" + ".join(map(os.fsdecode, path)) if isinstance(path, (list, tuple))
                     else os.fsdecode(path))
        self.batch_size, self.seq_len, self.seed = int(batch_size), int(seq_len), int(seed)
        self.rank = _env_int("RANK", 0) if rank is None else int(rank)
        self.world_size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.document_mask, self.packing, self.dtype = bool(document_mask), packing, dtype
        cfg.batch_size, cfg.seq_len, cfg.seed = self.batch_size, self.seq_len, self.seed
        cfg.rank, cfg.world_size, cfg.threads = self.rank, self.world_size, int(threads)
        cfg.out_dtype = _lib.DTYPE_INT64 if dtype == torch.int64 else _lib.DTYPE_INT32
        cfg.packing = _PACKINGS[packing]
        cfg.shuffle, cfg.drop_last = int(self.shuffle), int(self.drop_last)
        cfg.document_mask = int(self.document_mask)
        cfg.pad_id = int(pad_id)
        self._mix = isinstance(path, (list, tuple))
        if self._mix:
            paths = [os.fsencode(p) for p in path]
            if weights is None:
                weights = [1.0] * len(paths)
            if len(weights) != len(paths):
                raise ValueError("%d weights for %d token stores" % (len(weights), len(paths)))
            self.path = " + ".join(os.fsdecode(p) for p in paths)
            arr = (ctypes.c_char_p * len(paths))(*paths)
            w = (ctypes.c_double * len(paths))(*[float(x) for x in weights])
            check(lib.dlc_token_loader_open_mix(arr, w, len(paths), int(rows_per_epoch or 0),
                                                ctypes.byref(cfg), ctypes.byref(self._h)),
                  self.path)
        else:
            if weights is not None or rows_per_epoch is not None:
                raise ValueError("weights= and rows_per_epoch= go with a list of token stores")
            check(lib.dlc_token_loader_open(os.fsencode(path), ctypes.byref(cfg),
                                            ctypes.byref(self._h)), self.path)
        self.num_windows = lib.dlc_token_loader_num_windows(self._h)
        rows, pad, saved = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int()
        check(lib.dlc_token_loader_packing(self._h, ctypes.byref(rows), ctypes.byref(pad),
                                           ctypes.byref(saved)), self.path)
        #: best_fit: {"rows", "pad_tokens", "padding" (fraction), "saved" (plan file beside the
        #: store)}; concat: rows are the windows and nothing is padding.
        self.packing_info = {"rows": rows.value, "pad_tokens": pad.value,
                             "padding": pad.value / max(1, rows.value * self.seq_len),
                             "saved": bool(saved.value)}
        self._epoch = 0
        self._resume = None  # (epoch, position) from load_state_dict()
        self._finished = False

    def _ptr(self):
        if not self._h:
            raise RuntimeError("this dlcache TokenLoader is closed")
        return self._h

    def __len__(self):
        """Batches of this rank in a whole epoch."""
        w, b, n = self.world_size, self.batch_size, self.num_windows
        per = n // w if self.drop_last else -(-n // w)
        return per // b if self.drop_last else -(-per // b)

    def set_epoch(self, epoch):
        self._epoch = int(epoch)
        self._resume = None
        self._finished = False

    def doc_order(self):
        """The documents in the order of the concatenation (numpy uint64), for checks."""
        out = []
        k = 0
        while True:
            d = lib.dlc_token_loader_doc_at(self._ptr(), k)
            if d == 2**64 - 1:
                break
            out.append(d)
            k += 1
        return np.array(out, dtype=np.uint64)

    def __iter__(self):
        torch = self._torch
        h = self._ptr()
        placed = False
        if self._resume is not None:
            epoch, pos, placed = self._resume
            self._resume = None
            self._epoch = epoch
        else:
            if self._finished:
                self._epoch += 1
            pos = 0
        self._finished = False
        if not placed:
            check(lib.dlc_token_loader_seek(h, self._epoch, pos), self.path)
        b = TokenBatch()
        np_dtype = np.int64 if self.dtype == torch.int64 else np.int32
        while True:
            rc = lib.dlc_token_loader_next(h, ctypes.byref(b))
            if rc == 1:  # DLC_END
                self._finished = True
                return
            check(rc, self.path)
            out = {}
            # One copy of each lent array straight into its tensor (numpy views of the slots
            # cost more per batch than the copy of a small batch).
            nbytes = b.rows * b.seq_len * np.dtype(np_dtype).itemsize
            for name in ("input_ids", "labels", "position_ids"):
                t = torch.empty((b.rows, b.seq_len), dtype=self.dtype)
                ctypes.memmove(t.data_ptr(), getattr(b, name), nbytes)
                out[name] = t
            if self.document_mask:
                cu = torch.empty((b.num_cu,), dtype=torch.int32)
                ctypes.memmove(cu.data_ptr(), b.cu_seqlens, b.num_cu * 4)
                out["cu_seqlens"] = cu
                out["max_seqlen"] = int(b.max_seqlen)
            yield out

    def state_dict(self):
        """The stream's position (every batch yielded so far counts as consumed)."""
        ep = ctypes.c_uint64()
        pos = lib.dlc_token_loader_position(self._ptr(), ctypes.byref(ep))
        if self._resume is not None:
            epoch, pos, _ = self._resume
        else:
            epoch = ep.value
        out = {_STATE_KEY: 1, "epoch": int(epoch), "position": int(pos),
                "seed": self.seed, "seq_len": self.seq_len, "packing": self.packing,
                "shuffle": self.shuffle, "num_windows": int(self.num_windows),
                "world_size": self.world_size, "batch_size": self.batch_size}
        if self._mix:
            buf = ctypes.create_string_buffer(72 + 40 * 64 + 8)
            n = ctypes.c_size_t()
            check(lib.dlc_token_loader_mix_state(self._ptr(), buf, len(buf), ctypes.byref(n)),
                  self.path)
            out["mixture"] = buf.raw[:n.value]
        return out

    def load_state_dict(self, state):
        """Continue from a state_dict(), also one saved under another world size."""
        if not isinstance(state, dict) or state.get(_STATE_KEY) != 1:
            raise ValueError("not a dlcache TokenLoader state_dict")
        if self._mix != ("mixture" in state):
            raise ValueError("state_dict is a %s's and this loader reads %s"
                             % ("mixture" if "mixture" in state else "single store",
                                "a mixture" if self._mix else "one store"))
        keys = ("seed", "seq_len", "packing", "shuffle") + (() if self._mix else ("num_windows",))
        for key in keys:
            if state[key] != getattr(self, key):
                raise ValueError("state_dict was saved with %s=%r, this loader has %r"
                                 % (key, state[key], getattr(self, key)))
        if self._mix:
            raw = bytes(state["mixture"])
            check(lib.dlc_token_loader_mix_restore(self._ptr(), raw, len(raw)), self.path)
            self._resume = (int(state["epoch"]), int(state["position"]), True)
        else:
            self._resume = (int(state["epoch"]), int(state["position"]), False)
        self._finished = False

    def close(self):
        if self._h:
            lib.dlc_token_loader_close(self._h)
            self._h = _P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

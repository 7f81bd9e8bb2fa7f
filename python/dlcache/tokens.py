"""Token stores (include/dlcache/tokens.h, docs/FORMAT.md "Token stores").

* ``write_tokens(docs, path, eos_id, ...)`` writes one document's token ids per record, with the
  prefix sums of the documents' lengths and the tokenizer's identity in the metadata;
* ``TokenStore(path)`` reads one: ``offsets`` (a numpy view of the prefix sums), ``doc(i)``,
  ``find(pos)`` (the document of a token position, by binary search), ``info``.
"""

import ctypes
import inspect
import os

import numpy as np

from . import _lib
from . import _stream
from ._lib import lib
from .errors import check, redact
from .store import _flag, _mix_weights, _uint

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
    # Checked before the C fields take them: 2**32 + 7 would be an end-of-document id of 7.
    cfg.dtype = _DTYPES[dtype]
    cfg.vocab_size = _uint(vocab_size, "vocab_size", 0, 2**32 - 1)
    cfg.eos_id = _uint(eos_id, "eos_id", 0, 2**32 - 1)
    cfg.force = int(_flag(force, "force"))
    cfg.tokenizer = _tokenizer_name(tokenizer)
    cfg.tokenizer_digest = _uint(tokenizer_digest, "tokenizer_digest", 0, 2**64 - 1)
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


def _tokenizer_name(name):
    """write_tokens()'s @p name (str or bytes) as the C writer's bytes, or None for the default:
    UTF-8 text, which TokenStore.info reads back as str, without the NUL that would end it."""
    if name is None:
        return None
    if isinstance(name, (bytes, bytearray)):
        try:
            name = bytes(name).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("tokenizer must be UTF-8 text, not %r" % (name,)) from None
    elif not isinstance(name, str):
        raise TypeError("tokenizer must be a str or bytes, not %s" % type(name).__name__)
    if not name:
        return None  # "pretokenized", as None
    if "\0" in name:
        raise ValueError("tokenizer must not contain NUL: %r" % (name,))
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("tokenizer must be UTF-8 text, not %r" % (name,)) from None


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
        i = _uint(i, "document", 0, 2**64 - 1)  # 2**64 was document 0
        check(lib.dlc_tokens_doc(self._t, self._r, i, ctypes.byref(data), ctypes.byref(n)),
              self.path)
        buf = (ctypes.c_char * (n.value * self._dtype.itemsize)).from_address(data.value)
        return np.frombuffer(bytes(buf), dtype=self._dtype).copy()

    def find(self, pos):
        pos = _uint(pos, "token position", 0, 2**64 - 1)  # 2**64 was document 0
        d = lib.dlc_tokens_find(self._t, pos)
        if d == 2**64 - 1:
            raise IndexError("%s: token position %d of %d" % (self.path, pos,
                                                              self.info["num_tokens"]))
        return d

    def verify(self):
        """Check the prefix sums' digest, then every document's bytes against its checksum
        (dlc_store_verify(), as ``cacheinfo --verify`` and ``dlcache.info(path, verify=True)``):
        a flipped bit inside a document is found here, not by doc() or the loader, which check
        a document's length and its end-of-document id only. Raises CorruptError naming the
        first bad document."""
        check(lib.dlc_tokens_verify(self._t, self._s), self.path)
        bad = ctypes.c_uint64()
        check(lib.dlc_store_verify(self._s, ctypes.cast(None, _lib.VERIFY_FN), None,
                                   ctypes.byref(bad)), self.path)

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
                ("document_mask", ctypes.c_int), ("pad_id", ctypes.c_int32),
                ("cache_dir", ctypes.c_char_p), ("cache_limit", ctypes.c_uint64),
                ("downloads", ctypes.c_uint32), ("verify", ctypes.c_uint32),
                ("net", ctypes.c_void_p)]


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
    "dlc_token_loader_stream_stats": (_S, [_P, _P]),
    "dlc_token_loader_host_slots": (ctypes.c_uint32, [_P, ctypes.POINTER(ctypes.c_void_p),
                                                      ctypes.POINTER(ctypes.c_size_t),
                                                      ctypes.c_uint32]),
    "dlc_token_loader_packing": (_S, [_P, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_int)]),
})

_STATE_KEY = "dlcache_token_loader_state"
_PACKINGS = {"concat": 0, "best_fit": 1}
_END = 1  # DLC_END
_MIX_STATE_MAX = 72 + 40 * 64 + 8  # DLC_TOKEN_MIX_STATE_SIZE(64)


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

    ``verify="first"`` checks each document's checksum (the store's XXH3 of its tokens) the
    first time this loader reads it, ``"always"`` at every read, as the image Loader's verify=;
    a mismatch raises ``CorruptError`` naming the store, the record and both digests (there is
    no stand-in: other tokens would be wrong data). A streamed set's parts are checked whole
    when they are downloaded in any case.

    It fits where a torch DataLoader goes as the image Loader does: ``len()``, ``batch_size``,
    ``drop_last``, ``dataset`` and ``sampler`` (``sampler.set_epoch(e)``), ``set_epoch()``,
    ``epoch``, ``stats()``, ``close()`` and ``with``, and pickling (a copy re-opens from the
    arguments given and continues from this one's state at its first use).
    """

    # What frameworks read of a torch DataLoader, with torch's meaning (as dlcache.Loader).
    batch_sampler = None  # the batches are made by the C loader
    num_workers = 0  # no worker processes: the C loader's threads are ``threads``
    collate_fn = None
    worker_init_fn = None
    persistent_workers = False

    def __init__(self, path, batch_size, *, seq_len=2048, seed=0, shuffle=True, drop_last=False,
                 document_mask=False, packing="concat", dtype=None, rank=None, world_size=None,
                 threads=2, pad_id=0, weights=None, rows_per_epoch=None, device=None,
                 cache_dir=None, cache_limit=None, downloads=2, endpoint=None, region=None,
                 timeout=None, retries=None, verify="off"):
        import torch
        given = {k: v for k, v in locals().items() if k not in ("self", "torch")}
        self._torch = torch
        self._h = _P()
        self._pid = os.getpid()  # a fork's copy has none of the C loader's threads
        self._gen = 0
        # The arguments as given (those not at their default): what a pickled copy re-opens
        # with. URLs lose their secrets (credentials come from the environment again).
        from .loader import _without_secrets
        self._args = _without_secrets(
            {k: v for k, v in given.items()
             if k in ("path", "batch_size") or not _is_default(k, v)})
        if not isinstance(packing, str) or packing not in _PACKINGS:
            raise ValueError("packing is one of %s, not %r" % (sorted(_PACKINGS), packing))
        if dtype is None:
            dtype = torch.int64
        if dtype not in (torch.int64, torch.int32):
            raise ValueError("dtype is torch.int64 or torch.int32, not %r" % (dtype,))
        from . import _device
        self._device = _device.parse_device(device)  # ValueError without a usable GPU
        cfg = TokenLoaderConfig()
        lib.dlc_token_loader_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
        self.path = redact(" + ".join(map(os.fsdecode, path)) if isinstance(path, (list, tuple))
                           else os.fsdecode(path))
        # Checked here: a ctypes field keeps the low bits of what it is given (seq_len 2**32 + 8
        # would be 8 to C and 2**32 + 8 to len() and the state).
        self.batch_size = _uint(batch_size, "batch_size", 1, 2**32 - 1)
        self.seq_len = _uint(seq_len, "seq_len", 1, 2**32 - 1)
        self.seed = _uint(seed, "seed", 0, 2**64 - 1)
        r, w = _stream.default_rank_world(rank, world_size)
        self.world_size = _uint(w, "world_size", 1)
        self.rank = _uint(r, "rank", 0, self.world_size - 1)
        # Not bool(): shuffle="False" shuffled.
        self.shuffle = _flag(shuffle, "shuffle")
        self.drop_last = _flag(drop_last, "drop_last")
        self.document_mask = _flag(document_mask, "document_mask")
        self.packing, self.dtype = packing, dtype
        self.threads = 2 if threads is None else _uint(threads, "threads", 0, 256)
        cfg.batch_size, cfg.seq_len, cfg.seed = self.batch_size, self.seq_len, self.seed
        cfg.rank, cfg.world_size, cfg.threads = self.rank, self.world_size, self.threads
        cfg.out_dtype = _lib.DTYPE_INT64 if dtype == torch.int64 else _lib.DTYPE_INT32
        cfg.packing = _PACKINGS[packing]
        cfg.shuffle, cfg.drop_last = int(self.shuffle), int(self.drop_last)
        cfg.document_mask = int(self.document_mask)
        cfg.pad_id = _uint(pad_id, "pad_id", 0, 2**31 - 1)
        # As the image Loader's verify=: each document's checksum the first time it is read, or
        # every time; a mismatch raises CorruptError naming the record (no stand-in).
        from .loader import _VERIFY
        if not isinstance(verify, (str, bool)) or verify not in _VERIFY:
            raise ValueError("verify must be 'off', 'first' or 'always', got %r" % (verify,))
        self.verify = verify
        cfg.verify = _VERIFY[verify]
        self._mix = isinstance(path, (list, tuple))
        if self._mix:
            # Checked before anything opens: a ctypes uint64 kept the low bits of rows_per_epoch
            # (2**64 + 40 was 40 rows, -1 was 2**64 - 1 and len() overflowed: it holds 2**63 - 1);
            # the weights are refused by name (["a", 1] was float()'s bare words).
            mix_weights = _mix_weights(weights, len(path), "token stores")
            rows = 0 if rows_per_epoch is None else \
                _uint(rows_per_epoch, "rows_per_epoch", 1, 2**63 - 1)
        # A set's URL (or a mixture with some) is read through the streaming cache: every part
        # downloaded once per node into cache_dir, checked, and held while the loader is open.
        keep = []
        self._url = any(_stream.is_url(os.fsencode(p))
                        for p in (path if self._mix else [path]))
        if self._url:
            if cache_dir is None:
                raise ValueError(
                    "dlcache TokenLoader(%s): a URL is read through a local cache of its parts: "
                    "pass cache_dir= (a folder on this node's local disk, shared by its ranks "
                    "and jobs) and cache_limit= (None = no limit)" % self.path)
            keep.append(os.fsencode(cache_dir))
            cfg.cache_dir = keep[-1]
            cfg.cache_limit = 0 if cache_limit is None else _stream.parse_size(cache_limit)
            cfg.downloads = _uint(downloads, "downloads", 1, 64)
            net = _stream.net_options(keep, endpoint=endpoint, region=region,
                                      log=_stream.NET_LOG_CB, timeout=timeout, retries=retries)
            cfg.net = ctypes.cast(net, ctypes.c_void_p)
        elif cache_dir is not None or cache_limit is not None:
            raise ValueError("cache_dir= and cache_limit= are for a URL (s3://, gs://, "
                             "http(s)://), not %s" % self.path)
        if self._mix:
            paths = [os.fsencode(p) for p in path]
            self.path = redact(" + ".join(os.fsdecode(p) for p in paths))
            arr = (ctypes.c_char_p * len(paths))(*paths)
            w = (ctypes.c_double * len(paths))(*mix_weights)
            with _stream.interruptible():
                rc = lib.dlc_token_loader_open_mix(arr, w, len(paths), rows,
                                                   ctypes.byref(cfg), ctypes.byref(self._h))
            check(rc, self.path)
        else:
            if weights is not None or rows_per_epoch is not None:
                raise ValueError("weights= and rows_per_epoch= go with a list of token stores")
            with _stream.interruptible():
                rc = lib.dlc_token_loader_open(os.fsencode(path), ctypes.byref(cfg),
                                               ctypes.byref(self._h))
            check(rc, self.path)
        del keep
        self.num_windows = lib.dlc_token_loader_num_windows(self._h)
        rows, pad, saved = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int()
        check(lib.dlc_token_loader_packing(self._h, ctypes.byref(rows), ctypes.byref(pad),
                                           ctypes.byref(saved)), self.path)
        #: best_fit: {"rows", "pad_tokens", "padding" (fraction), "saved" (plan file beside the
        #: store)}; concat: rows are the windows and nothing is padding.
        self.packing_info = {"rows": rows.value, "pad_tokens": pad.value,
                             "padding": pad.value / max(1, rows.value * self.seq_len),
                             "saved": bool(saved.value)}
        self._feed = None
        if self._device is not None:
            self._feed = _TokenFeed(self._device, self._h)
        self._epoch = 0
        # Where the next iter() starts: "fresh" (at self._epoch's start, or at _resume), "used"
        # (an iter() began this epoch: the next one starts the following epoch), "ended" (a
        # state saved at the end of self._epoch was loaded: the same as "used"), "drained"
        # (then set_epoch(self._epoch): the next iter() is that end, an empty pass).
        self._pos = "fresh"
        self._taken = 0  # batches taken since the last seek
        self._resume = None  # (epoch, position, placed) from load_state_dict()
        self._stats = {"batches": 0, "rows": 0, "tokens": 0, "wait_seconds": 0.0}

    # ------------------------------------------------------------ pickling
    def __reduce__(self):
        """A TokenLoader pickles (and copy.deepcopy()s) as its arguments and its state_dict(),
        never its threads or memory: the copy opens at its first use and continues where this
        one is."""
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            return (_restore, lazy)
        if not self._h:
            raise ValueError("a closed dlcache TokenLoader cannot be pickled: its position went "
                             "with it (pickle it before close())")
        return (_restore, (type(self), self._args, self.state_dict()))

    def __getattr__(self, name):
        # Only for what normal lookup did not find: an unpickled loader opens at its first use.
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name.startswith("__"):
            raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))
        self._materialize()
        return getattr(self, name)

    def _materialize(self):
        _, args, state = self.__dict__.pop("_lazy")
        kw = dict(args)
        self.__init__(kw.pop("path"), kw.pop("batch_size"), **kw)
        self.load_state_dict(state)

    # ------------------------------------------------------------ attributes
    def _ptr(self):
        if "_lazy" in self.__dict__:
            self._materialize()
        if self.__dict__.get("_h") and self._pid != os.getpid():
            from .loader import FORKED
            raise RuntimeError(FORKED % self._pid)
        if not self.__dict__.get("_h"):
            raise ValueError("this dlcache TokenLoader is closed")
        return self._h

    def __len__(self):
        """Batches of this rank in a whole epoch."""
        return -(-len(self.sampler) // self.batch_size) if not self.drop_last \
            else len(self.sampler) // self.batch_size

    @property
    def epoch(self):
        """The epoch the last iter() started (or the next one starts)."""
        return self._epoch

    @property
    def dataset(self):
        """The rows of an epoch over all ranks: ``len()`` is the windows (concat), the best-fit
        rows, or a mixture's rows_per_epoch (as ``len(DataLoader.dataset)``)."""
        return _TokenDataset(self)

    @property
    def sampler(self):
        """The epoch's order as frameworks drive it: ``set_epoch(e)`` is the loader's own;
        ``len()`` is this rank's rows per epoch (DistributedSampler's num_samples)."""
        return _TokenSampler(self)

    @property
    def pin_memory(self):
        """True when batches go to a CUDA device (the slots are page-locked then)."""
        return self._device is not None

    @property
    def device(self):
        """The torch.device of the batches: cuda:N, or cpu."""
        return self._device if self._device is not None else self._torch.device("cpu")

    @property
    def device_backend(self):
        """"torch" (copies through torch's CUDA runtime) for CUDA batches, else None."""
        return "torch" if self._feed is not None else None

    def as_iterable_dataset(self):
        """An IterableDataset of these batches, for code that insists on a DataLoader
        (``DataLoader(loader.as_iterable_dataset(), batch_size=None)``, num_workers=0)."""
        from .loader import _BatchDataset
        return _BatchDataset(self)

    def stats(self):
        """Counters since open: batches, rows, tokens (input tokens handed out), wait_seconds
        (time this process waited for a batch), device (the GPU index of CUDA batches, else
        -1), device_bytes (bytes copied to the GPU) and device_backend (as the property)."""
        out = dict(self._stats)
        out["device"] = self._device.index if self._device is not None else -1
        out["device_bytes"] = self._feed.bytes if self._feed is not None else 0
        out["device_backend"] = self.device_backend
        return out

    def stream_stats(self):
        """What streaming did since open (zeros for local stores): stall_s, hits, misses,
        bytes_fetched, requests, peak_cache_bytes, evictions and downloads (parts this process
        downloaded; 0 when the node's cache_dir held them already), as the Loader's."""
        from .loader import _STREAM_STATS
        st = _lib.LoaderStreamStats()
        st.struct_size = ctypes.sizeof(st)
        check(lib.dlc_token_loader_stream_stats(self._ptr(), ctypes.byref(st)), self.path)
        return {key: getattr(st, field) for key, field in _STREAM_STATS}

    def __repr__(self):
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            path = lazy[1]["path"]
            return ("dlcache.TokenLoader(%r, batch_size=%d, opens at first use)"
                    % (os.fsdecode(path) if not isinstance(path, (list, tuple)) else "[...]",
                       lazy[1]["batch_size"]))
        dev = ", device=%s" % self._device if self._device is not None else ""
        return ("dlcache.TokenLoader(%r, batch_size=%d, seq_len=%d, packing=%r, rank=%d/%d, "
                "epoch=%d, %d batches/epoch%s%s)"
                % (self.path, self.batch_size, self.seq_len, self.packing, self.rank,
                   self.world_size, self._epoch, len(self), dev,
                   "" if self._h else ", closed"))

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

    # ------------------------------------------------------------ epochs and batches
    def set_epoch(self, epoch):
        """Make the next iter() start epoch ``epoch`` from its beginning (DistributedSampler's
        set_epoch()). After load_state_dict() of a mid-epoch state, set_epoch() with that same
        epoch keeps the restored position (the usual resume loop calls it for every epoch)."""
        epoch = _uint(epoch, "epoch", 0, 2**63 - 1)  # 2**64 was epoch 0 in C
        if self._resume is not None and self._resume[0] == epoch:
            return
        if self._pos in ("ended", "drained") and epoch == self._epoch:
            # Restored at the end of this epoch: the next iter() is that end (an empty pass),
            # not a replay of the epoch; the following one starts the next epoch.
            self._pos = "drained"
            return
        self._epoch = epoch
        self._resume = None
        self._pos = "fresh"

    def __iter__(self):
        """This rank's batches of an epoch: the one set_epoch() or load_state_dict() chose, else
        the epoch after the last iter()'s (finished or abandoned), else epoch 0. A new iter(),
        load_state_dict() or close() makes the iterators before it stale."""
        h = self._ptr()
        if self._pos == "drained":
            self._pos = "ended"
            self._gen += 1
            return iter(())
        placed = False
        if self._resume is not None:
            epoch, pos, placed = self._resume
            self._resume = None
            self._epoch = epoch
        else:
            if self._pos in ("used", "ended"):
                self._epoch += 1
            pos = 0
        self._sync()
        if not placed:
            check(lib.dlc_token_loader_seek(h, self._epoch, pos), self.path)
        self._taken = 0
        self._pos = "used"
        self._gen += 1
        return self._batches(self._gen)

    def _sync(self):
        """Wait for a device copy that may still read the lent slot (before the C loader takes
        it back: next(), a seek, close)."""
        if self._feed is not None:
            self._feed.sync()

    def _batches(self, gen):
        import time
        torch = self._torch
        b = TokenBatch()
        np_dtype = np.int64 if self.dtype == torch.int64 else np.int32
        st = self._stats
        while True:
            if gen != self._gen or not self._h:
                raise (ValueError("this dlcache TokenLoader is closed") if not self._h else
                       RuntimeError("this dlcache TokenLoader iterator is stale: iter(), "
                                    "load_state_dict() or close() was called on the loader "
                                    "since"))
            self._sync()
            t0 = time.perf_counter()
            rc = lib.dlc_token_loader_next(self._h, ctypes.byref(b))  # GIL released
            st["wait_seconds"] += time.perf_counter() - t0
            if rc == _END:
                return
            check(rc, self.path)
            self._taken += 1
            n = b.rows * b.seq_len
            st["batches"] += 1
            st["rows"] += b.rows
            st["tokens"] += n
            if self._feed is not None:
                out = self._feed.upload(b, self.document_mask, np_dtype)
            else:
                out = {}
                # One copy of each lent array straight into its tensor (numpy views of the slots
                # cost more per batch than the copy of a small batch).
                nbytes = n * np.dtype(np_dtype).itemsize
                for name in ("input_ids", "labels", "position_ids"):
                    t = torch.empty((b.rows, b.seq_len), dtype=self.dtype)
                    ctypes.memmove(t.data_ptr(), getattr(b, name), nbytes)
                    out[name] = t
                if self.document_mask:
                    cu = torch.empty((b.num_cu,), dtype=torch.int32)
                    ctypes.memmove(cu.data_ptr(), b.cu_seqlens, b.num_cu * 4)
                    out["cu_seqlens"] = cu
            if self.document_mask:
                out["max_seqlen"] = int(b.max_seqlen)
            yield out

    # ------------------------------------------------------------ state
    def state_dict(self):
        """The stream's position, to save with a checkpoint (torch.save-able): every batch
        yielded so far counts as consumed."""
        h = self._ptr()
        if self._resume is None and self._pos == "fresh":
            # set_epoch() or open: the C loader goes to that epoch's start now (the next iter()
            # seeks there anyway), so that a mixture's state is the same position's.
            self._sync()
            self._gen += 1
            check(lib.dlc_token_loader_seek(h, self._epoch, 0), self.path)
        ep = ctypes.c_uint64()
        pos = lib.dlc_token_loader_position(h, ctypes.byref(ep))
        finished = False
        if self._resume is not None:
            epoch, pos, _ = self._resume
        elif self._pos == "fresh":
            epoch = self._epoch
        elif self._pos in ("ended", "drained"):
            epoch, pos, finished = self._epoch, self.num_windows, True
        else:
            epoch = ep.value
            # With drop_last the windows cut from the epoch's end are never delivered, so the
            # position stays below num_windows: this rank's last batch taken ends it too.
            finished = (pos >= self.num_windows or
                        self._taken >= lib.dlc_token_loader_len(h))
        out = {_STATE_KEY: 1, "epoch": int(epoch), "position": int(pos),
               "epoch_finished": bool(finished),
               "seed": self.seed, "seq_len": self.seq_len, "packing": self.packing,
               "shuffle": self.shuffle, "num_windows": int(self.num_windows),
               "world_size": self.world_size, "batch_size": self.batch_size}
        if self._mix:
            buf = ctypes.create_string_buffer(_MIX_STATE_MAX)
            n = ctypes.c_size_t()
            check(lib.dlc_token_loader_mix_state(self._ptr(), buf, len(buf), ctypes.byref(n)),
                  self.path)
            out["mixture"] = buf.raw[:n.value]
        return out

    def load_state_dict(self, state):
        """Continue from a state_dict(), also one saved under another world size. A state
        saved at the end of an epoch makes the next iter() start the following one. Every field
        read is checked (type and range) before anything changes: a bad one is a ValueError
        naming it, and the loader stays as it was."""
        version = state.get(_STATE_KEY) if isinstance(state, dict) else None
        if type(version) is not int or version != 1:
            raise ValueError("not a dlcache TokenLoader state_dict")
        if self._mix != ("mixture" in state):
            raise ValueError("state_dict is a %s's and this loader reads %s"
                             % ("mixture" if "mixture" in state else "single store",
                                "a mixture" if self._mix else "one store"))
        # Python ints went on as they were: epoch 2**64 + 1 resumed epoch 1 in C while
        # self.epoch said 2**64 + 1, position 2**64 + 8 resumed at 8, and epoch_finished="no"
        # skipped the rest of the epoch.
        for key in ("seed", "seq_len", "packing", "shuffle", "epoch", "position") + \
                (() if self._mix else ("num_windows",)):
            if key not in state:
                raise ValueError("state_dict has no %r: not a dlcache TokenLoader state_dict"
                                 % key)
        saved = {"seed": _uint(state["seed"], "state_dict['seed']", 0, 2**64 - 1),
                 "seq_len": _uint(state["seq_len"], "state_dict['seq_len']", 1, 2**32 - 1),
                 "packing": state["packing"], "shuffle": state["shuffle"]}
        if not isinstance(saved["packing"], str) or saved["packing"] not in _PACKINGS:
            raise ValueError("state_dict['packing'] must be one of %s, not %r"
                             % (sorted(_PACKINGS), saved["packing"]))
        finished = state.get("epoch_finished", False)  # states before it was kept had none
        for key, value in (("shuffle", saved["shuffle"]), ("epoch_finished", finished)):
            if not isinstance(value, bool):
                raise ValueError("state_dict[%r] must be a bool, not %r" % (key, value))
        if not self._mix:
            saved["num_windows"] = _uint(state["num_windows"], "state_dict['num_windows']", 0,
                                         2**64 - 1)
        for key, value in saved.items():
            if value != getattr(self, key):
                raise ValueError("state_dict was saved with %s=%r, this loader has %r"
                                 % (key, value, getattr(self, key)))
        epoch = _uint(state["epoch"], "state_dict['epoch']", 0, 2**63 - 1)  # as set_epoch()
        position = _uint(state["position"], "state_dict['position']", 0, int(self.num_windows))
        raw = None
        if self._mix:
            raw = state["mixture"]
            if not isinstance(raw, (bytes, bytearray)) or not 40 <= len(raw) <= _MIX_STATE_MAX:
                raise ValueError("state_dict['mixture'] must be a token mixture's state, 40 to %d "
                                 "bytes, not %s" % (_MIX_STATE_MAX, type(raw).__name__))
            raw = bytes(raw)
            # The C state holds the epoch at bytes 24..31 and the position at 32..39 (C checks
            # the rest): the dict's copies must agree, or self.epoch and the next state_dict()
            # would say other than where C resumes. At an epoch's end the dict's position is
            # the epoch's length and C's may be short of it (drop_last).
            c_epoch = int.from_bytes(raw[24:32], "little")
            c_position = int.from_bytes(raw[32:40], "little")
            if raw[:8] == b"DLCTMIX1" and (c_epoch != epoch or
                                           (not finished and c_position != position)):
                raise ValueError("state_dict['epoch'] and ['position'] are %d and %d and its "
                                 "mixture state says %d and %d: the dict was edited or put "
                                 "together from two states"
                                 % (epoch, position, c_epoch, c_position))
        self._ptr()
        self._sync()
        if raw is not None:
            check(lib.dlc_token_loader_mix_restore(self._ptr(), raw, len(raw)), self.path)
        self._gen += 1  # iterators made before are stale
        if finished:
            self._epoch, self._resume, self._pos = epoch, None, "ended"
            return
        self._resume = (epoch, position, self._mix)
        self._epoch = epoch
        self._pos = "fresh"

    def close(self):
        """Stop the workers and free the slots; tensors handed out stay valid (they are the
        caller's). Idempotent."""
        if self.__dict__.pop("_lazy", None) is not None:
            self._h, self._gen, self._feed = _P(), 0, None  # never opened
            return
        self._gen += 1
        if self._h and self._pid != os.getpid():
            self._h = _P()  # a fork's copy: the parent's threads are not here to stop
            return
        if self._h:
            try:
                self._sync()
            finally:
                if self._feed is not None:
                    self._feed.release()
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


_TL_DEFAULTS = {k: p.default for k, p in inspect.signature(TokenLoader.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}


def _is_default(name, value):
    d = _TL_DEFAULTS.get(name, inspect.Parameter.empty)
    return value is d or (type(value) is type(d) and value == d)


def _restore(cls, args, state):
    """Unpickling: a TokenLoader (of class @p cls) that opens at its first use."""
    ld = object.__new__(cls)
    ld.__dict__["_lazy"] = (cls, args, state)
    return ld


class _TokenSampler:
    """loader.sampler: the order as frameworks drive a DataLoader's sampler. Not a torch
    Sampler: the order is drawn in C."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch):
        """The loader's set_epoch()."""
        self._loader.set_epoch(epoch)

    @property
    def epoch(self):
        return self._loader.epoch

    @property
    def shuffle(self):
        return self._loader.shuffle

    @property
    def num_replicas(self):
        return self._loader.world_size

    @property
    def rank(self):
        return self._loader.rank

    def __len__(self):
        """This rank's rows per epoch: padded to a multiple of world_size, or cut with
        drop_last."""
        ld = self._loader
        n, w = int(ld.num_windows), ld.world_size
        return n // w if ld.drop_last else -(-n // w)

    def __repr__(self):
        return "dlcache.TokenLoader.sampler(epoch=%d, rank=%d/%d)" % (
            self.epoch, self.rank, self.num_replicas)


class _TokenDataset:
    """loader.dataset: ``len()`` is the rows of an epoch over all ranks."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self):
        return int(self._loader.num_windows)

    def __getitem__(self, index):
        raise TypeError("the rows of packed sequences are not read by index: iterate the "
                        "loader (dlcache.TokenStore(path).doc(i) reads document i)")

    def __repr__(self):
        return "dlcache.TokenLoader.dataset(%d rows)" % len(self)


class _TokenFeed:
    """CUDA batches of packed sequences through torch's CUDA runtime, as the image Loader's
    torch backend makes them: the C loader's batch slots are page-locked once
    (cudaHostRegister, released before the slots are freed), each output is copied with one
    asynchronous copy on a side stream into a tensor allocated there and marked used by the
    current stream (record_stream), the current stream waits for the copy's event, and the
    loader waits for that event (sync()) before the C loader gets the slot back: the next batch,
    a seek, close. The tensors are the caller's."""

    def __init__(self, dev, h):
        import torch
        from . import _device
        self._torch = torch
        self.dev = dev
        self.pins = _device._Pins(dev)
        self.bytes = 0
        with torch.cuda.device(dev):
            self.side = torch.cuda.Stream(device=dev)
        self._register(h)

    def _register(self, h):
        """Page-lock the slots (a refusal warns: those copies come from pageable memory)."""
        import warnings
        torch = self._torch
        n = lib.dlc_token_loader_host_slots(h, None, None, 0)
        bases = (ctypes.c_void_p * max(n, 1))()
        sizes = (ctypes.c_size_t * max(n, 1))()
        n = lib.dlc_token_loader_host_slots(h, bases, sizes, n)
        try:
            cudart = torch.cuda.cudart()
        except (AttributeError, RuntimeError) as e:
            warnings.warn("dlcache: torch.cuda.cudart() cannot page-lock memory here (%s); the "
                          "token batches' copies to %s come from pageable memory, slower"
                          % (e, self.dev), RuntimeWarning, stacklevel=4)
            return
        with torch.cuda.device(self.dev):
            for k in range(n):
                if not bases[k] or not sizes[k]:
                    continue
                rc = cudart.cudaHostRegister(bases[k], sizes[k], 0)
                if int(rc) != 0:
                    warnings.warn("dlcache: cudaHostRegister of a token batch slot (%d bytes) "
                                  "failed (%s); its copies to %s come from pageable memory"
                                  % (sizes[k], rc, self.dev), RuntimeWarning, stacklevel=4)
                    continue
                self.pins.regs.append(bases[k])

    def sync(self):
        self.pins.sync()

    def release(self):
        self.pins.release()

    def _copy(self, ptr, code, shape, cur):
        from . import _device
        torch = self._torch
        t = torch.empty(shape, dtype=_device._RAW_DTYPE[code], device=self.dev)
        if t.numel() and ptr:
            t.copy_(_device._host_view(ptr, code, shape, None), non_blocking=True)
            self.bytes += t.numel() * t.element_size()
        t.record_stream(cur)
        return t

    def upload(self, b, mask, np_dtype):
        """The lent batch @p b as CUDA tensors, ordered before the current stream's later work."""
        torch = self._torch
        code = _lib.DTYPE_INT64 if np_dtype == np.int64 else _lib.DTYPE_INT32
        shape = (int(b.rows), int(b.seq_len))
        out = {}
        with torch.cuda.device(self.dev):
            cur = torch.cuda.current_stream(self.dev)
            with torch.cuda.stream(self.side):
                for name in ("input_ids", "labels", "position_ids"):
                    out[name] = self._copy(getattr(b, name), code, shape, cur)
                if mask:
                    out["cu_seqlens"] = self._copy(b.cu_seqlens, _lib.DTYPE_INT32,
                                                   (int(b.num_cu),), cur)
                ev = torch.cuda.Event()
                ev.record(self.side)
            self.pins.event = ev
            cur.wait_event(ev)
        return out

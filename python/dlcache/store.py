"""dlcache.build() and dlcache.info(): the builder and the store reader for notebooks."""

import ctypes
import json
import math
import operator
import os
import sys
from typing import Sequence

from . import _lib as L
from ._lib import lib
from .errors import CorruptError, InvalidArgumentError, check, error_for, redact

__all__ = ["build", "info", "BuildReport", "StoreInfo", "Store"]

_ENCODINGS = {"raw": L.ENCODING_RAW, "jpeg": L.ENCODING_JPEG}
_ENCODING_NAMES = {L.ENCODING_RAW: "raw", L.ENCODING_JPEG: "jpeg", L.ENCODING_PNG: "png"}
_KIND_NAMES = {L.FIELD_IMAGE: "image", L.FIELD_NDARRAY: "ndarray", L.FIELD_INT: "int",
               L.FIELD_FLOAT: "float", L.FIELD_BYTES: "bytes"}


def _fspath(value, name):
    try:
        p = os.fspath(value)
    except TypeError:
        raise TypeError("%s must be a path (str or os.PathLike), not %s"
                        % (name, type(value).__name__)) from None
    if isinstance(p, str):
        p = p.encode(sys.getfilesystemencoding(), "surrogateescape")
    if not p:
        raise ValueError("%s must not be empty" % name)
    if b"\0" in p:
        raise ValueError("%s must not contain NUL bytes" % name)
    return p


def _uint(value, name, lo=0, hi=2**32 - 1):
    """@p value as an int in lo..hi, else a ValueError naming @p name: what a C field takes
    without wrapping. Integers of any kind (numpy's, a 0-d integral tensor) are taken; bools,
    floats and strings are not."""
    if isinstance(value, bool):
        raise ValueError("%s must be an integer, not %r" % (name, value))
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError("%s must be an integer, not %r" % (name, value)) from None
    if not lo <= value <= hi:
        raise ValueError("%s must be in [%d, %d], got %d" % (name, lo, hi, value))
    return value


def _flag(value, name):
    """@p value as a bool, else a TypeError naming @p name: a bool, numpy's bool or the ints 0
    and 1. Any other value is refused rather than taken for its truth ("False" is true)."""
    if isinstance(value, bool):
        return value
    import numpy as np
    if isinstance(value, np.bool_):
        return bool(value)
    try:
        number = operator.index(value)
    except TypeError:
        number = -1
    if number not in (0, 1):
        raise TypeError("%s must be a bool, not %r" % (name, value))
    return number == 1


def _mix_weights(weights, n, what):
    """A mixture's @p weights for @p n sources (@p what they are, for messages) as floats, all
    1.0 for None; refused as the C library would refuse them (an InvalidArgumentError, a
    ValueError), before anything is opened. Shared by the image and the token mixtures."""
    if weights is None:
        return [1.0] * n
    try:
        if isinstance(weights, (str, bytes)) or any(isinstance(w, (str, bytes)) for w in weights):
            raise TypeError  # "2" read as 2.0
        out = [float(w) for w in weights]
    except (TypeError, ValueError, OverflowError):
        raise ValueError("weights must be numbers, got %r" % (weights,)) from None
    if len(out) != n:
        raise ValueError("%d weights for %d %s" % (len(out), n, what))
    # The C sampler scales them by the largest before it adds them.
    for i, w in enumerate(out):
        if not (math.isfinite(w) and w >= 0):
            raise InvalidArgumentError(-1000, "invalid argument",
                                       "weights[%d] is %r: a weight is a finite number, "
                                       "0 or more" % (i, w))
    if not any(out):
        raise InvalidArgumentError(-1000, "invalid argument",
                                   "weights are all 0: a mixture draws from the %s of "
                                   "weight > 0" % what)
    return out


class BuildReport(dict):
    """What dlcache.build() did: a dict with attribute access.

    Keys: path, count, skipped, skips (list of (path, reason)), bytes_in,
    bytes_out, file_bytes, seconds, images_per_s, threads, content_digest,
    channels (of the image field), converted (images stored with other
    channels than their source's).
    """

    __getattr__ = dict.get

    def __repr__(self):
        return "BuildReport(%s)" % ", ".join(
            "%s=%r" % (k, v) for k, v in self.items() if k != "skips")


class StoreInfo(dict):
    """What dlcache.info() found: a dict with attribute access.

    Keys: path, format_version, encoding ("raw"/"jpeg"/"png", of the first
    image field), count, height, width, channels (of the first image field; 0
    when there is none, or height and width 0 when records differ in size),
    num_labels, classes (names by label), label_counts, skipped,
    payload_bytes, content_digest, file_bytes, resident_bytes, build (the
    builder's metadata as a dict, or None), verified (True after verify=True),
    fields (the schema), image_field and label_field (names, or None).

    Each entry of ``fields`` is a dict: name, kind ("image", "ndarray",
    "int", "float", "bytes"), dtype (numpy's name), encoding ("raw", "jpeg",
    "png"; images only), shape (images (H, W, C); None where it varies per
    record), variable, mask, boxes, label (flags), classes (the field of a
    boxes field's classes, or None), max_dim0, max_dim1, max_size (the
    largest leading dimension, width and payload bytes of any record), and
    for images min_dim0, min_dim1 (the smallest height and width) with
    min_record0, min_record1 (a record of each), None where the store does
    not record them (built before they were).
    """

    __getattr__ = dict.get

    def __repr__(self):
        return "StoreInfo(%s)" % ", ".join(
            "%s=%r" % (k, v) for k, v in self.items()
            if k not in ("classes", "label_counts", "fields"))


def _log_to_logging(_user, level, msg):
    import logging
    lvl = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING}.get(level, logging.INFO)
    logging.getLogger("dlcache").log(lvl, "%s", msg.decode("utf-8", "replace") if msg else "")


_LOG_CB = L.LOG_FN(_log_to_logging)


def build(sources, out, size=256, crop="center", encoding="raw", quality=90, threads=None,
          strict=False, force=False, progress=None, shards=None, part=None):
    """Build the store ``out`` from image sources (the library behind `cachebuild`).

    Args:
        sources: a path or a list of paths: one ImageFolder directory (one
            folder per class, numbered like torchvision's ImageFolder), or
            manifest files (``path<TAB>label``), or WebDataset ``.tar`` shards.
        out: the store file to write. It is written to ``out.tmp-PID`` and
            renamed, so a failure leaves the previous store or none.
        size: shorter side after the resize, in pixels.
        crop: "center" to keep a size x size center crop, "none" to keep the
            aspect ratio (the loader then needs a crop smaller than any image).
        encoding: "raw" (uint8 pixels, fastest to load) or "jpeg" (smaller).
        quality: JPEG quality with encoding="jpeg".
        threads: worker threads (None = all cores).
        strict: stop at the first bad image instead of skipping it.
        force: replace an existing ``out``.
        progress: None; True for a progress line on stderr; False for
            silence: no line, and the builder's notices (a line per skipped
            file, which otherwise go to the "dlcache" logger, shown on stderr
            when logging is not configured) are dropped: the report's
            ``skips`` still lists them; or a callable taking a dict (done,
            total, skipped, bytes_in, bytes_out, seconds) about 10 times a
            second and returning True to cancel.
        shards: None for one store file; N for a store set (docs/SETS.md):
            ``out`` is then a directory of N parts and an index, all parts
            built here at once (as ``cachebuild --shards N``).
        part: with shards: build part I of N alone (as ``cachebuild --part
            I/N``), one machine's share of a build across machines; join()
            writes the index once every part is there.

    Returns:
        A BuildReport (count, skipped, skips, seconds, images_per_s, ...);
        for a set also parts (N), set_id, items and built: one dict per part
        written (part, first_item, end_item, count, skipped, file_bytes).

    Raises:
        ValueError for a bad argument; ExistsError when ``out`` exists without
        force; NoImagesError; DecodeError (strict); CanceledError (progress
        returned True, or KeyboardInterrupt arrived; then that exception is
        re-raised); DlcacheOSError (-errno, e.g. a full disk).
        Each message carries the C library's text naming file and reason.

    The GIL is released while the build runs; callbacks run on this thread.
    """
    if isinstance(sources, (str, bytes, os.PathLike)):
        sources = [sources]
    try:
        srcs = [_fspath(s, "sources") for s in sources]
    except TypeError:
        raise
    if not srcs:
        raise ValueError("sources must name at least one path")
    outp = _fspath(out, "out")
    if part is not None and shards is None:
        raise ValueError("part needs shards: part=I builds part I of shards=N")
    opts = L.BuildOptions()
    lib.dlc_build_options_init(ctypes.byref(opts))
    if shards is not None:
        opts.parts = _uint(shards, "shards", 1, 65536)
        if part is not None:
            opts.one_part = 1
            opts.part = _uint(part, "part", 0, opts.parts - 1)
    opts.size = _uint(size, "size", 1, 65535)
    if crop in ("center", True):
        opts.center_crop = 1
    elif crop in ("none", None, False):
        opts.center_crop = 0
    else:
        raise ValueError("crop must be 'center' or 'none', got %r" % (crop,))
    if encoding not in _ENCODINGS:
        raise ValueError("encoding must be 'raw' or 'jpeg', got %r" % (encoding,))
    opts.encoding = _ENCODINGS[encoding]
    opts.quality = _uint(quality, "quality", 1, 100)
    opts.threads = 0 if threads is None else _uint(threads, "threads", 1, 4096)
    opts.strict = 1 if strict else 0
    opts.force = 1 if force else 0
    command = "dlcache.build(%r, %r, size=%d, crop=%r, encoding=%r, quality=%d)" % (
        [os.fsdecode(s) for s in srcs], os.fsdecode(outp), size, crop, encoding, quality)
    opts.command = command.encode("utf-8", "replace")
    if progress is not False:
        # progress=False leaves it NULL: the builder's notices (a line per skipped file...)
        # are dropped, and the report's skips still lists every skipped file.
        opts.log = _LOG_CB

    if progress is not None and progress is not False and not callable(progress) \
            and progress is not True:
        raise ValueError("progress must be None, True or a callable, got %r" % (progress,))

    # The callback always runs: it is how Ctrl-C reaches a long build. A
    # Python exception cannot cross the C frames, so it is kept here, the
    # build is canceled, and the exception is raised again afterwards.
    pending = []

    def on_progress(_user, p):
        try:
            c = p.contents
            d = {"done": c.done, "total": c.total, "skipped": c.skipped,
                 "bytes_in": c.bytes_in, "bytes_out": c.bytes_out, "seconds": c.seconds}
            if progress is True:
                sys.stderr.write("\rdlcache.build: %d/%d images, %d skipped, %.1f s"
                                 % (d["done"], d["total"], d["skipped"], d["seconds"]))
                sys.stderr.flush()
                return 0
            if callable(progress):
                return 1 if progress(d) else 0
            return 0
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt included on purpose
            pending.append(e)
            return 1

    cb = L.BUILD_PROGRESS_FN(on_progress)
    opts.progress = cb

    arr = (ctypes.c_char_p * len(srcs))(*srcs)
    rep = ctypes.POINTER(L.BuildReport)()
    rc = lib.dlc_build(arr, len(srcs), outp, ctypes.byref(opts), ctypes.byref(rep))
    if progress is True:
        sys.stderr.write("\n")
    err = error_for(rc, "dlcache.build(%s)" % os.fsdecode(outp)) if rc < 0 else None
    try:
        if pending:
            raise pending[0]
        if err is not None:
            raise err
        r = rep.contents
        skips = [(r.skips[i].path.decode("utf-8", "replace"),
                  r.skips[i].reason.decode("utf-8", "replace"))
                 for i in range(r.skipped)] if r.skips else []
        report = BuildReport(path=os.fsdecode(outp), count=r.count, skipped=r.skipped,
                             skips=skips, bytes_in=r.bytes_in, bytes_out=r.bytes_out,
                             file_bytes=r.file_bytes, seconds=r.seconds,
                             images_per_s=r.images_per_s, threads=r.threads,
                             content_digest=r.content_digest, channels=r.channels,
                             converted=r.converted)
        if shards is not None:
            report.update(parts=r.parts, set_id=r.set_id, items=r.items, built=[
                {"part": b.part, "first_item": b.first_item, "end_item": b.end_item,
                 "count": b.count, "skipped": b.skipped, "file_bytes": b.file_bytes}
                for b in (r.built[i] for i in range(r.num_built))])
        return report
    finally:
        lib.dlc_build_report_free(rep)


def join(path):
    """Check the parts in the store set ``path`` and write its index (the
    library behind ``cachebuild --join``), once every part built with
    ``build(..., shards=N, part=I)`` is there.

    Refuses, naming each part: no part at all, parts of different N, a part
    missing or there twice, a damaged part, a part built from other sources or
    options than the others. A refused join writes no index. Joining again
    writes nothing new (the index is a function of the parts).

    Returns:
        A dict: path, num_shards, count (records), file_bytes, set_id,
        temp_files (parts still being written, or left by a crash, not taken)
        and unchanged (True when the index already held these bytes).

    Raises:
        ValueError for a bad argument; a DlcacheError naming the part and the
        reason otherwise.
    """
    p = _fspath(path, "path")
    rep = L.SetJoinReport()
    rc = lib.dlc_set_join(p, ctypes.byref(rep))
    if rc < 0:
        raise error_for(rc, "dlcache.join(%s)" % os.fsdecode(p))
    return {"path": os.fsdecode(p), "num_shards": rep.num_shards, "count": rep.count,
            "file_bytes": rep.file_bytes, "set_id": rep.set_id, "temp_files": rep.temp_files,
            "unchanged": bool(rep.unchanged)}


class _Store:
    """An open store handle (internal); closes itself."""

    def __init__(self, path, flags=0):
        self.h = None
        self.path = _fspath(path, "path")
        h = ctypes.c_void_p()
        check(lib.dlc_store_open(self.path, flags, ctypes.byref(h)), os.fsdecode(self.path))
        self.h = h

    def close(self):
        if self.h:
            lib.dlc_store_close(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def _fields_of(st):
    """The schema of an open store as a list of dicts (see info())."""
    n = lib.dlc_store_get_info(st.h).contents.num_fields
    fp = lib.dlc_store_fields(st.h)
    raw = [fp[i] for i in range(n)]
    out = []
    for f in raw:
        variable = bool(f.flags & L.FIELD_VARIABLE)
        kind = _KIND_NAMES.get(f.kind, str(f.kind))
        ndim = 3 if kind == "image" else f.ndim
        shape = [int(f.shape[d]) for d in range(ndim)]
        if variable:
            shape[0] = None
            if kind == "image":
                shape[1] = None
        out.append(dict(
            name=f.name.decode("utf-8", "replace"), kind=kind,
            dtype=L.DTYPE_NAMES[f.dtype] if f.dtype < len(L.DTYPE_NAMES) else str(f.dtype),
            encoding=_ENCODING_NAMES.get(f.encoding, str(f.encoding)),
            shape=tuple(shape), variable=variable, mask=bool(f.flags & L.FIELD_MASK),
            boxes=bool(f.flags & L.FIELD_BOXES), label=bool(f.flags & L.FIELD_LABEL),
            classes=(raw[f.link].name.decode("utf-8", "replace")
                     if f.link != L.NO_FIELD and f.link < n else None),
            max_dim0=f.max_dim0, max_dim1=f.max_dim1, max_size=f.max_size,
            min_dim0=f.min_dim0 or None, min_dim1=f.min_dim1 or None,
            min_record0=f.min_record0 if f.min_dim0 else None,
            min_record1=f.min_record1 if f.min_dim0 else None))
    return out


def _read_schema(path):
    """{"fields": [...]} of the store at @p path, without the rest of info()."""
    with _Store(path) as st:
        return {"fields": _fields_of(st)}


def _read_info(st):
    i = lib.dlc_store_get_info(st.h).contents
    counts_p = lib.dlc_store_label_counts(st.h)
    classes = []
    for k in range(i.num_labels):
        name = lib.dlc_store_label_name(st.h, k)
        classes.append(name.decode("utf-8", "replace") if name is not None else str(k))
    counts = [int(counts_p[k]) for k in range(i.num_labels)] if counts_p else []
    build_meta = None
    data, size = ctypes.c_void_p(), ctypes.c_size_t()
    if lib.dlc_store_meta(st.h, b"build", ctypes.byref(data), ctypes.byref(size)) == 0 and data:
        raw = ctypes.string_at(data, size.value)
        try:
            build_meta = json.loads(raw.decode("utf-8"))
        except ValueError:
            build_meta = raw.decode("utf-8", "replace")
    resident = ctypes.c_uint64()
    res = resident.value if lib.dlc_store_resident(st.h, ctypes.byref(resident)) == 0 else None
    return StoreInfo(path=public_path(st.path), format_version=i.format_version,
                     encoding=_ENCODING_NAMES.get(i.encoding, str(i.encoding)), count=i.count,
                     height=i.height, width=i.width, channels=i.channels,
                     num_labels=i.num_labels, classes=classes, label_counts=counts,
                     skipped=i.skipped, payload_bytes=i.payload_bytes,
                     content_digest=i.content_digest, file_bytes=i.file_bytes,
                     resident_bytes=res, build=build_meta, verified=False,
                     fields=_fields_of(st),
                     image_field=_field_name(st, i.image_field),
                     label_field=_field_name(st, i.label_field))


def public_path(path):
    """@p path (str or bytes) as the API may return or save it: a URL redacted (no password,
    no query string such as X-Amz-Signature; dlc_warm_redact_text()), a local path as it is."""
    text = os.fsdecode(path)
    return redact(text) if "://" in text else text


def _field_name(st, index):
    if index == L.NO_FIELD:
        return None
    return lib.dlc_store_fields(st.h)[index].name.decode("utf-8", "replace")


def info(path, verify=False):
    """Describe the store at ``path`` (what `cacheinfo` prints), as a StoreInfo dict.

    With verify=True every record is re-hashed and the counts and content
    digest are checked against the metadata (reads the whole file); a
    mismatch raises CorruptError whose ``bad`` attribute lists
    (record, message) for each bad record.

    Raises DlcacheFileNotFoundError (a FileNotFoundError), VersionError (not
    a dlcache store, or a newer format), CorruptError, ...
    with the C library's message naming the file and the reason.
    """
    verify = _flag(verify, "verify")  # verify="no" verified
    with _Store(path, L.STORE_SEQUENTIAL if verify else 0) as st:
        out = _read_info(st)
        if verify:
            bad_list, pending = [], []

            def on_verify(_user, p):
                try:
                    c = p.contents
                    if c.bad_status != 0:
                        bad_list.append((int(c.bad_index),
                                         (c.bad_msg or b"").decode("utf-8", "replace")))
                    return 0
                except BaseException as e:  # noqa: B902
                    pending.append(e)
                    return 1

            cb = L.VERIFY_FN(on_verify)
            bad = ctypes.c_uint64()
            rc = lib.dlc_store_verify(st.h, cb, None, ctypes.byref(bad))
            err = error_for(rc, "dlcache.info(%s, verify=True)" % out["path"]) if rc < 0 else None
            if pending:
                raise pending[0]
            if err is not None:
                err.bad = bad_list
                if isinstance(err, CorruptError) and bad.value:
                    err.args = ("%s (%d bad records)" % (err, bad.value),)
                    err._text = err.args[0]
                raise err
            out["verified"] = True
        return out



class Store:
    """Records of a store by index, as Python and numpy values: ``Store(path)[i]``.

    For looking at a store and for tests; training reads through the Loader.
    ``store[i]`` is a dict {field name: value}: images as uint8 HxWxC numpy
    arrays (JPEG and PNG decoded), ndarrays as numpy arrays of their dtype and
    shape, int and float fields as Python numbers, bytes fields as bytes. Each
    value is a copy. ``store[a:b:k]`` (negative indices and steps as for a
    list) is a list of such dicts. An int index out of range raises
    IndexError. Also: ``len(store)``, ``store.info`` (what info() gives),
    ``store.fields`` (the schema), ``close()``, and ``with``. One Store may be
    used from several threads.
    """

    def __init__(self, path: "str | os.PathLike[str] | bytes") -> None:
        self._st = _Store(path)
        self.info = _read_info(self._st)
        self.fields = self.info["fields"]

    def __len__(self) -> int:
        return self.info["count"]

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._st.close()

    def __getitem__(self, index: "int | slice") -> "dict | list[dict]":
        rows: "Sequence[int]"
        if isinstance(index, slice):
            rows = range(*index.indices(len(self)))
        elif isinstance(index, bool) or not hasattr(index, "__index__"):
            raise TypeError("records are read by int or slice, not %s" % type(index).__name__)
        else:
            i = index.__index__()  # an int, or a numpy integer
            if i < 0:
                i += len(self)
            if not 0 <= i < len(self):
                raise IndexError("record %d of a store of %d" % (index, len(self)))
            rows = (i,)
        if not self._st.h:
            raise ValueError("this dlcache.Store is closed")
        # One reader and one codec for all the records of a slice.
        r = ctypes.c_void_p()
        check(lib.dlc_store_reader_open(self._st.h, ctypes.byref(r)),
              "dlcache.Store(%s)" % self.info["path"])
        codec = ctypes.c_void_p()
        try:
            out = [self._read(r, codec, i) for i in rows]
        finally:
            lib.dlc_codec_destroy(codec)
            lib.dlc_store_reader_close(r)
        return out if isinstance(index, slice) else out[0]

    def _read(self, r, codec, index):
        """Record @p index as a dict, through reader @p r; @p codec is made on first need."""
        import numpy as np
        ctx = "dlcache.Store(%s)[%d]" % (self.info["path"], index)
        values = (L.Value * len(self.fields))()
        check(lib.dlc_store_read_values(r, index, values), ctx)
        out = {}
        for f, v in zip(self.fields, values):
            kind = f["kind"]
            if kind == "int":
                out[f["name"]] = int(v.i)
            elif kind == "float":
                out[f["name"]] = float(v.f)
            elif kind == "bytes":
                out[f["name"]] = ctypes.string_at(v.data, v.size) if v.size else b""
            elif kind == "ndarray":
                raw = ctypes.string_at(v.data, v.size) if v.size else b""
                out[f["name"]] = np.frombuffer(raw, dtype=f["dtype"]).reshape(
                    (v.dim0,) + tuple(f["shape"][1:])).copy()
            else:
                c = f["shape"][2]
                if f["encoding"] == "raw":
                    raw = ctypes.string_at(v.data, v.size)
                    out[f["name"]] = np.frombuffer(raw, np.uint8).reshape(
                        v.dim0, v.dim1, c).copy()
                    continue
                if not codec:
                    check(lib.dlc_codec_create(ctypes.byref(codec)), ctx)
                img = L.Image()
                if f["encoding"] == "png":
                    rc = lib.dlc_png_decode(codec, v.data, v.size, ctypes.byref(img))
                else:
                    rc = lib.dlc_jpeg_decode_as(codec, v.data, v.size, c, 0, 0,
                                                ctypes.byref(img))
                check(rc, "%s: field %r" % (ctx, f["name"]))
                rows = ctypes.string_at(img.data, img.stride * img.height)
                a = np.frombuffer(rows, np.uint8).reshape(img.height, img.stride)
                out[f["name"]] = a[:, :img.width * img.channels].reshape(
                    img.height, img.width, img.channels).copy()
        return out

    def __repr__(self):
        return "dlcache.Store(%r, %d records, fields %s)" % (
            self.info["path"], len(self), ", ".join(f["name"] for f in self.fields))

"""dlcache.write(): a store from Python samples, through the C writer (include/dlcache/writer.h).

A sample is a dict {name: value} (or a tuple, named by the rule in write()'s docstring) of numpy
arrays, torch tensors, PIL images, ints, floats, bytes or str. The schema is inferred from the
first sample unless given, and so are the sizes of its images and arrays unless a field is
declared variable: a later sample that does not fit is an error naming it, never a quietly
widened schema. Worker threads turn samples into C buffers and seal records (encode,
hash, lay out: C work, GIL released) with one dlc_record_builder per record in flight; the
calling thread appends them in sample order, so the store's bytes do not depend on the number
of workers. numpy is imported here, not by ``import dlcache``.
"""

import collections
import concurrent.futures
import ctypes
import json
import numbers
import os
import queue
import re
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Sized, cast

import numpy as np

from . import _lib as L
from ._lib import lib
from .errors import CODES, ExistsError, InvalidArgumentError, check, error_for
from .store import _flag, _fspath, _Store, _read_info, _uint

__all__ = ["write", "WriteReport"]

_EINVAL = CODES["EINVAL"][0]
_EEXIST = CODES["EEXIST"][0]
_MAX_LABELS = 1 << 24  # DLC__MAX_LABELS: labels named at finish are below this.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,30}\Z")
_DTYPE_CODES = {name: code for code, name in enumerate(L.DTYPE_NAMES)}
# An image's largest side (the store's DLC__MAX_SIDE; libjpeg's own is 65500).
_MAX_SIDE = 1 << 20
_KINDS = ("image", "mask", "boxes", "ndarray", "int", "float", "bytes", "label")
_KIND_CODES = {"image": L.FIELD_IMAGE, "ndarray": L.FIELD_NDARRAY, "int": L.FIELD_INT,
               "float": L.FIELD_FLOAT, "bytes": L.FIELD_BYTES}
_ENCODINGS = {"raw": L.ENCODING_RAW, "jpeg": L.ENCODING_JPEG, "png": L.ENCODING_PNG}
# Options a field's dict may carry, by kind (None: the kind is inferred).
_OPTIONS = {
    "image": {"kind", "encoding", "quality", "channels", "variable"},
    "mask": {"kind", "encoding", "channels", "variable"},
    "boxes": {"kind", "classes"},
    "ndarray": {"kind", "dtype", "variable"},
    "int": {"kind", "label"},
    "label": {"kind"},
    "float": {"kind"},
    "bytes": {"kind"},
    None: {"kind", "encoding", "quality", "channels", "dtype", "label", "variable"},
}
# PIL modes and the channels an image field of them gets (masks keep palette indices).
_PIL_CHANNELS = {"1": 1, "L": 1, "P": 3, "LA": 4, "PA": 4, "RGBA": 4, "RGBa": 4, "RGB": 3,
                 "RGBX": 3, "CMYK": 3, "YCbCr": 3, "LAB": 3, "HSV": 3}
_PIL_MODE_OF = {1: "L", 3: "RGB", 4: "RGBA"}


class WriteReport(dict):
    """What dlcache.write() did: a dict with attribute access.

    Keys: path, count, seconds, samples_per_s, file_bytes, payload_bytes,
    content_digest, workers, num_labels, fields (the schema, as info() gives it).
    """

    __getattr__ = dict.get

    def __repr__(self):
        return "WriteReport(%s)" % ", ".join(
            "%s=%r" % (k, v) for k, v in self.items() if k != "fields")


def _bad(where, msg):
    return InvalidArgumentError(_EINVAL, "invalid argument", "%s: %s" % (where, msg))


def _is_torch(v):
    return type(v).__module__.startswith("torch") and hasattr(v, "detach")


def _is_pil(v):
    return type(v).__module__.startswith("PIL.") and hasattr(v, "getbands")


def _describe(v):
    """A short description of a value for messages: what was found."""
    if _is_pil(v):
        return "a PIL image of mode %r (%dx%d)" % (v.mode, v.height, v.width)
    if _is_torch(v):
        return "a %s tensor of shape %s" % (str(v.dtype).replace("torch.", ""),
                                            tuple(v.shape))
    if isinstance(v, np.ndarray):
        return "a %s array of shape %s" % (v.dtype, v.shape)
    if isinstance(v, (bool, np.bool_)):
        return "a bool (%r)" % (v,)
    if isinstance(v, (numbers.Integral, numbers.Real)):
        return "a %s (%r)" % (type(v).__name__, v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "%d bytes" % len(v)
    if isinstance(v, str):
        return "a str"
    if isinstance(v, (list, tuple)):
        return "a %s of %d value%s" % (type(v).__name__, len(v), "" if len(v) == 1 else "s")
    return "a %s" % type(v).__name__


def _to_numpy(v, where):
    """@p v as a numpy array, or None when it is not array-like."""
    if isinstance(v, np.ma.MaskedArray):
        raise _bad(where, "a masked array: its mask would be lost; store v.filled(value), and "
                   "the mask (np.ma.getmaskarray(v)) as a field of its own")
    if isinstance(v, np.ndarray):
        return v
    if _is_torch(v):
        t = v.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if str(t.dtype) == "torch.bfloat16":
            raise _bad(where, "a bfloat16 tensor: dlcache (and numpy) have no bfloat16; "
                       "convert it with .float() or .half()")
        if t.is_conj():
            t = t.resolve_conj()
        return t.numpy()
    if isinstance(v, np.generic):
        return np.asarray(v)
    if isinstance(v, (list, tuple)):
        a = np.asarray(v)
        if a.dtype == object:
            raise _bad(where, "a %s that is not a rectangular array of numbers"
                       % type(v).__name__)
        return a
    return None


def _snapshot(v):
    """A sample (or one of its values) as it is when the iterator yields it: arrays, tensors
    and containers copied (their bytes, not their Python objects), immutable values as they
    are. The workers prepare a sample after the iterator has moved on, so a generator that
    reuses one buffer or one dict (``buf[:] = x; yield {"x": buf}``) would have its later
    values stored in the earlier samples: 158 of 200 records were wrong in a try. Tuples keep
    their type (a namedtuple names the fields). PIL images are not copied: a lazily opened one
    is decoded on the worker threads, which copying here would undo."""
    if isinstance(v, np.ndarray):
        return np.array(v, copy=True, subok=True)
    if _is_torch(v):
        return v.detach().clone()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dict):
        return {k: _snapshot(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_snapshot(x) for x in v]
    if isinstance(v, tuple):
        vals = [_snapshot(x) for x in v]
        return type(v)(*vals) if hasattr(v, "_fields") else tuple(vals)
    return v


def _native(a):
    """C-contiguous, in the machine's byte order (the store's, little-endian)."""
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return np.ascontiguousarray(a)


def _infer_kind(v, where, name):
    """The kind of a value when fields= does not give it (PYTHON.md, inference rules)."""
    if _is_pil(v):
        return "image"
    if isinstance(v, (bytes, bytearray, memoryview, str)):
        return "bytes"
    if isinstance(v, (bool, numbers.Integral, np.bool_)):
        return "int"
    if isinstance(v, numbers.Real):
        return "float"
    a = _to_numpy(v, where)
    if a is None:
        raise _bad(where, "%s cannot be stored: give a numpy array, a torch tensor, a PIL "
                   "image, an int, a float, bytes or a str" % _describe(v))
    if a.ndim == 0:
        if a.dtype.kind in "biu":
            return "int"
        if a.dtype.kind == "f":
            return "float"
        raise _bad(where, "%s cannot be stored" % _describe(v))
    shape = a.shape
    if a.dtype == np.uint8:
        if a.ndim == 2 or (a.ndim == 3 and shape[2] in (1, 3, 4)):
            return "image"
        if a.ndim == 3 and shape[0] in (1, 3, 4):
            raise _bad(where, "%s looks like a CHW image; an image field holds HWC pixels: "
                       "store x.permute(1, 2, 0) (torch) or x.transpose(1, 2, 0) (numpy), or "
                       "give fields={%r: 'ndarray'} to keep it as an array"
                       % (_describe(v), name))
    elif a.dtype.kind == "f" and a.ndim == 3 and (shape[0] in (1, 3, 4) or shape[2] in (1, 3, 4)):
        raise _bad(where, "%s looks like an image, but image fields hold uint8 HWC pixels: "
                   "convert it, e.g. (x * 255).round().clamp(0, 255).to(torch.uint8)"
                   ".permute(1, 2, 0) for a normalized CHW tensor, or give fields={%r: "
                   "'ndarray'} to store the floats as they are"
                   % (_describe(v), name))
    return "ndarray"


def _kind_or_none(v):
    """The inferred kind of @p v, or None where inference refuses it (then the field's own
    inference, under its name, says why)."""
    try:
        return _infer_kind(v, "", "")
    except InvalidArgumentError:
        return None


def _array_dtype(a, where):
    """The dlcache element type of array @p a (bool is stored as uint8)."""
    if a.dtype == np.bool_:
        return np.dtype(np.uint8)
    name = a.dtype.name
    if name not in _DTYPE_CODES:
        raise _bad(where, "%s: dlcache stores %s; convert it (e.g. .astype('int64'))"
                   % (_describe(a), ", ".join(L.DTYPE_NAMES)))
    return np.dtype(name)


class _Codecs:
    """One dlc_codec per thread (a codec must not be shared), to read encoded images' headers;
    all destroyed together when the threads are done."""

    def __init__(self):
        self.tls = threading.local()
        self.made = []
        self.lock = threading.Lock()

    def get(self):
        c = getattr(self.tls, "h", None)
        if c is None:
            h = ctypes.c_void_p()
            check(lib.dlc_codec_create(ctypes.byref(h)), "dlcache.write")
            c = self.tls.h = h.value
            with self.lock:
                self.made.append(c)
        return c

    def destroy_all(self):
        with self.lock:
            for c in self.made:
                lib.dlc_codec_destroy(c)
            del self.made[:]


class _Field:
    """One field of the schema being written, and how a value becomes its C buffer."""

    def __init__(self, name, kind, opt, value, where, names, codecs):
        self.name = name
        self.kind = kind            # image, ndarray, int, float, bytes
        self.mask = self.boxes = self.label = False
        self.classes = None         # boxes: the name of the field of their classes
        self.encoding = "raw"
        self.quality = 0
        self.channels = 0
        self.dtype = None           # ndarray: a numpy dtype
        self.explicit_dtype = False
        self.trailing = ()          # ndarray: shape[1:]
        # Whether records may differ in the leading dimension (ndarray) or in height and width
        # (image); _schema() decides it. A fixed field holds every record to sample 0's.
        self.variable = False
        self.first_dim0 = None      # ndarray: sample 0's leading dimension
        self.first_hw = None        # image: sample 0's (height, width)
        self.label_limit = _MAX_LABELS
        self.codecs = codecs
        if kind in ("image", "mask"):
            self._init_image(kind, opt, value, where)
        elif kind == "boxes":
            self.kind, self.boxes, self.dtype, self.trailing = "ndarray", True, \
                np.dtype(np.float32), (4,)
            self.classes = opt.get("classes")
            if self.classes is None:
                for cand in (name + "_classes", name + "_labels", "classes", "labels"):
                    if cand in names:
                        self.classes = cand
                        break
            if self.classes is None or self.classes not in names:
                raise _bad(where, "a boxes field needs the field of its per-box classes (an "
                           "ndarray of N ids), named with fields={%r: {'kind': 'boxes', "
                           "'classes': NAME}}%s" % (name, "" if self.classes is None else
                                                     "; the samples have no field %r"
                                                     % self.classes))
        elif kind == "ndarray":
            a = _to_numpy(value, where)
            if a is None or a.ndim == 0:
                raise _bad(where, "an ndarray field needs an array of at least one dimension, "
                           "found %s" % _describe(value))
            if a.ndim > L.MAX_DIMS:
                raise _bad(where, "%s has more than %d dimensions" % (_describe(a), L.MAX_DIMS))
            if a.size == 0 and "dtype" not in opt and not isinstance(value, np.ndarray) \
                    and not _is_torch(value):
                # numpy would call an empty list float64, which is rarely what the later
                # samples hold; the schema is fixed here, at sample 0, so it must be declared.
                raise _bad(where, "an empty %s has no element type to infer: declare the field, "
                           "e.g. fields={%r: {'kind': 'ndarray', 'dtype': 'int64'}} (a declared "
                           "'ndarray' may vary in length), or give a typed empty array such as "
                           "np.array([], dtype=np.int64)" % (type(value).__name__, name))
            if "dtype" in opt:
                try:
                    self.dtype = np.dtype(opt["dtype"])
                except TypeError:
                    raise _bad(where, "dtype %r is not a numpy dtype" % (opt["dtype"],)) \
                        from None
                if self.dtype.name not in _DTYPE_CODES:
                    raise _bad(where, "dtype %r: dlcache stores %s"
                               % (opt["dtype"], ", ".join(L.DTYPE_NAMES)))
                self.explicit_dtype = True
            else:
                self.dtype = _array_dtype(a, where)
            self.trailing = tuple(int(d) for d in a.shape[1:])
            self.first_dim0 = int(a.shape[0])
            if any(d == 0 for d in self.trailing):
                raise _bad(where, "%s: only the leading dimension may be 0" % _describe(a))
        elif kind == "label":
            self.kind, self.label = "int", True
        elif kind == "int":
            self.label = name == "label" and opt.get("label", True) is not False
            if opt.get("label") is True:
                self.label = True
        elif kind not in ("float", "bytes"):
            raise _bad(where, "unknown kind %r (one of %s)" % (kind, ", ".join(_KINDS)))

    def _init_image(self, kind, opt, value, where):
        self.kind, self.mask = "image", kind == "mask"
        self.encoding = opt.get("encoding", "png" if self.mask else "raw")
        if not isinstance(self.encoding, str) or self.encoding not in _ENCODINGS:
            raise _bad(where, "encoding %r; an image is 'raw', 'jpeg' or 'png'"
                       % (self.encoding,))
        if self.mask and self.encoding == "jpeg":
            raise _bad(where, "a mask is stored 'png' or 'raw': JPEG would blend its class ids")
        if "quality" in opt:
            if self.encoding != "jpeg":
                raise _bad(where, "quality applies to encoding 'jpeg' only")
            self.quality = _uint(opt["quality"], "%s: quality" % where, 1, 100)
        if "channels" in opt:
            self.channels = opt["channels"]
            if isinstance(self.channels, bool) or not isinstance(self.channels, numbers.Integral) \
                    or self.channels not in (1, 3, 4):
                raise _bad(where, "channels %r; an image has 1, 3 or 4" % (self.channels,))
            self.channels = int(self.channels)
        else:
            self.channels = self._first_channels(value, where)
        self.first_hw = self._first_size(value, where)
        if self.encoding == "jpeg" and self.channels == 4:
            raise _bad(where, "JPEG holds 1 or 3 channels, not 4: give encoding 'png' or 'raw' "
                       "(or channels 3)")

    def _first_channels(self, v, where):
        if _is_pil(v):
            if self.mask:
                # The modes _pil_pixels() takes, so that sample 0's mode is refused as any
                # later sample's would be, naming it, not by the schema as "2 channels".
                if v.mode in ("1", "L", "P") or v.mode.startswith("I"):
                    return 1
                if v.mode in ("RGB", "RGBA"):
                    return len(v.mode)
                raise _bad(where, "a mask from %s: give an L or P image of class ids"
                           % _describe(v))
            if v.mode.startswith("I") or v.mode == "F":
                raise _bad(where, "%s has more than 8 bits per sample; store np.asarray(img) "
                           "with fields={%r: 'ndarray'}, or convert it to 8 bits"
                           % (_describe(v), self.name))
            if v.mode == "P":
                return 4 if "transparency" in v.info else 3
            return _PIL_CHANNELS.get(v.mode, 3)
        if isinstance(v, (bytes, bytearray, memoryview)) and self.encoding != "raw":
            return self._encoded_dims(bytes(v), where, self.codecs)[2]
        a = _to_numpy(v, where)
        if a is None or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3, 4)):
            raise _bad(where, "an image is uint8 HxW or HxWxC with C = 1, 3 or 4 (or a PIL "
                       "image), found %s" % _describe(v))
        return 1 if a.ndim == 2 else int(a.shape[2])

    def _first_size(self, v, where):
        """(height, width) of sample 0's image, which a fixed image field holds every record to;
        None when it cannot be told here (then prepare() refuses the value anyway)."""
        if _is_pil(v):
            return (int(v.height), int(v.width))
        if isinstance(v, (bytes, bytearray, memoryview)):
            if self.encoding == "raw":
                return None
            return self._encoded_dims(bytes(v), where, self.codecs)[:2]
        a = _to_numpy(v, where)
        if a is None or a.ndim not in (2, 3):
            return None
        return (int(a.shape[0]), int(a.shape[1]))

    def _encoded_dims(self, data, where, codec):
        """(height, width, channels) of an encoded JPEG or PNG, from its header."""
        w, h, c = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
        fn = lib.dlc_jpeg_header if self.encoding == "jpeg" else lib.dlc_png_info
        rc = fn(codec.get(), data, len(data), ctypes.byref(w), ctypes.byref(h), ctypes.byref(c))
        if rc < 0:
            e = error_for(rc)
            raise _bad(where, "bytes given to a %s image field are not a %s: %s"
                       % (self.encoding, self.encoding.upper(), e.detail or e.strerror))
        return h.value, w.value, c.value

    def spec(self):
        s = L.FieldSpec()
        s.name = self.name.encode()
        s.kind = _KIND_CODES[self.kind]
        flags = 0
        if self.kind == "image":
            s.encoding = _ENCODINGS[self.encoding]
            s.quality = self.quality
            s.ndim = 3
            s.shape[0], s.shape[1], s.shape[2] = 0, 0, self.channels
            flags |= L.FIELD_VARIABLE | (L.FIELD_MASK if self.mask else 0)
        elif self.kind == "ndarray":
            s.dtype = _DTYPE_CODES[self.dtype.name]
            s.ndim = 1 + len(self.trailing)
            for d, n in enumerate(self.trailing):
                s.shape[1 + d] = n
            # Declared variable; the writer stores it fixed when every record agrees.
            flags |= L.FIELD_VARIABLE
            if self.boxes:
                flags |= L.FIELD_BOXES
                s.link = self.classes.encode()
        elif self.label:
            flags |= L.FIELD_LABEL
        s.flags = flags
        return s

    def describe(self):
        """The field as the error messages and the build metadata say it."""
        if self.kind == "image":
            return "%s (%d channels, %s)" % ("mask" if self.mask else "image", self.channels,
                                            self.encoding)
        if self.kind == "ndarray":
            # A variable field's leading dimension is N; a fixed one's is sample 0's.
            dims = ["N" if self.variable or self.first_dim0 is None else str(self.first_dim0)]
            dims += [str(d) for d in self.trailing]
            return "%s %s of shape (%s%s)" % ("boxes" if self.boxes else "ndarray", self.dtype,
                                             ", ".join(dims), "," if len(dims) == 1 and
                                             dims[0] != "N" else "")
        return "label" if self.label else self.kind

    # ---- one value -> what the C setter takes (runs on the worker threads) ----
    def prepare(self, v, where, codec):
        kind = self.kind
        if kind == "image":
            return self._prepare_image(v, where, codec)
        if kind == "ndarray":
            return ("array", self._prepare_array(v, where))
        if kind == "int":
            if isinstance(v, (bool, numbers.Integral, np.bool_)):
                x = int(v)
            else:
                a = _to_numpy(v, where)
                if a is None or a.ndim != 0 or a.dtype.kind not in "biu":
                    raise _bad(where, "expected an int%s, found %s%s"
                               % (" (the store's label)" if self.label else "", _describe(v),
                                  " (use .item() for a one-element tensor)"
                                  if a is not None and a.size == 1 else ""))
                x = int(a)
            if not -2**63 <= x < 2**63:
                raise _bad(where, "%d does not fit in an int64" % x)
            if self.label and not 0 <= x < self.label_limit:
                raise _bad(where, "label %d is not in 0..%d (%s); to store other values give "
                           "the field another name, or fields={%r: {'kind': 'int', "
                           "'label': False}}"
                           % (x, self.label_limit - 1, "label_names has %d names"
                              % self.label_limit if self.label_limit != _MAX_LABELS else
                              "the store's label", self.name))
            return ("int", x)
        if kind == "float":
            if isinstance(v, numbers.Real):
                x = v
            else:
                a = _to_numpy(v, where)
                if a is None or a.ndim != 0 or a.dtype.kind not in "biuf":
                    raise _bad(where, "expected a float, found %s" % _describe(v))
                x = a.item()
            try:
                f = float(x)
            except OverflowError:
                raise _bad(where, "an int of %d digits does not fit in a float64"
                           % len(str(abs(int(x))))) from None
            # An int the float64 rounds (2**53 + 1) would be stored as another number.
            if isinstance(x, numbers.Integral) and not isinstance(x, bool) and int(f) != x:
                raise _bad(where, "the int %d is not exactly a float64 (it would be stored as "
                           "%r): store it in an int field" % (x, f))
            return ("float", f)
        # bytes
        if isinstance(v, str):
            try:
                return ("bytes", v.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise _bad(where, "a str that is not valid UTF-8: %s" % e) from None
        if isinstance(v, bytes):
            return ("bytes", v)
        if isinstance(v, (bytearray, memoryview)):
            return ("bytes", bytes(v))
        if isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 1:
            return ("bytes", v.tobytes())
        raise _bad(where, "expected bytes or a str, found %s" % _describe(v))

    def _prepare_image(self, v, where, codec):
        c = self.channels
        if _is_pil(v):
            # A lazily opened image knows its size before it is decoded: a 30000 x 30000 one in
            # a field of 10 x 10 images took 61 s and 8.6 GB to be refused after its decode.
            self._check_size(v.size[1], v.size[0], where, _describe(v))
            a = self._pil_pixels(v, where)
        elif isinstance(v, (bytes, bytearray, memoryview)):
            if self.encoding == "raw":
                raise _bad(where, "%s for a raw image field: give pixels, or declare the field "
                           "{'kind': 'image', 'encoding': 'jpeg'} (or 'png') to store encoded "
                           "images as they are" % _describe(v))
            data = bytes(v)
            h, w, got = self._encoded_dims(data, where, codec)
            if got != c:
                raise _bad(where, "expected %d channels (%s), found a %s of %d"
                           % (c, self.describe(), self.encoding.upper(), got))
            self._check_size(h, w, where, "a %dx%d %s" % (h, w, self.encoding.upper()))
            return ("encoded", data, h, w)
        else:
            a = _to_numpy(v, where)
            if a is None:
                raise _bad(where, "expected %s pixels, found %s" % (self.describe(), _describe(v)))
            if self.mask and a.dtype != np.uint8:
                if a.dtype.kind not in "biu":
                    raise _bad(where, "a mask holds class ids 0..255, found %s" % _describe(v))
                if a.size and (a.min() < 0 or a.max() > 255):
                    raise _bad(where, "a mask holds class ids 0..255, found values %d..%d"
                               % (a.min(), a.max()))
                a = a.astype(np.uint8)
            elif a.dtype != np.uint8:
                raise _bad(where, "an image field holds uint8 HWC pixels, found %s: convert it "
                           "(e.g. (x * 255).round().clip(0, 255).astype('uint8')), or store "
                           "it with fields={%r: 'ndarray'}" % (_describe(v), self.name))
        given = a
        if a.ndim == 2:
            a = a[:, :, None]
        if a.ndim != 3 or a.shape[2] != c:
            hint = ""
            if a.ndim == 3 and a.shape[0] == c:
                hint = " (a CHW tensor? store x.permute(1, 2, 0))"
            # The array as given: a 2-D HxW image is described as (H, W), not as the
            # (H, W, 1) it was widened to here.
            raise _bad(where, "expected %s as HxWx%d, found %s%s"
                       % (self.describe(), c, _describe(given), hint))
        if not (1 <= a.shape[0] <= _MAX_SIDE and 1 <= a.shape[1] <= _MAX_SIDE):
            # Checked here: C's dlc_image takes 32-bit sides, so a side of 2^32 + 2 reached
            # the store's own check as 2 and a 1x2 image was stored.
            raise _bad(where, "an image's sides are 1 to %d pixels, found %s"
                       % (_MAX_SIDE, _describe(given)))
        self._check_size(a.shape[0], a.shape[1], where, _describe(v))
        if a.strides[2] != 1 or a.strides[1] != c or a.strides[0] < a.shape[1] * c:
            a = np.ascontiguousarray(a)
        return ("image", a)

    def _check_size(self, h, w, where, found):
        """A fixed image field takes sample 0's height and width only."""
        if self.variable or self.first_hw is None or (h, w) == self.first_hw:
            return
        raise _bad(where, "expected a %dx%d (HxW) image like sample 0, found %s: the size of "
                   "an image field is fixed by sample 0 unless the field is declared variable, "
                   "with write(..., variable=[%r]) (or variable=True), or resize the images "
                   "to one size" % (self.first_hw[0], self.first_hw[1], found, self.name))

    def _pil_pixels(self, img, where):
        c = self.channels
        mode = img.mode
        if self.mask:
            if mode == "1":
                a = np.asarray(img).astype(np.uint8)
            elif mode in ("L", "P", "RGB", "RGBA"):
                a = np.asarray(img)  # P: the palette indices, which are the class ids
            elif mode.startswith("I"):
                a = np.asarray(img)
                if a.size and (a.min() < 0 or a.max() > 255):
                    raise _bad(where, "a mask holds class ids 0..255, found %s with values "
                               "%d..%d" % (_describe(img), a.min(), a.max()))
                a = a.astype(np.uint8)
            else:
                raise _bad(where, "a mask from %s: give an L or P image of class ids"
                           % _describe(img))
            return a
        if mode.startswith("I") or mode == "F":
            raise _bad(where, "%s has more than 8 bits per sample; store np.asarray(img) with "
                       "fields={%r: 'ndarray'}, or convert it to 8 bits"
                       % (_describe(img), self.name))
        target = _PIL_MODE_OF[c]
        if mode != target:
            img = img.convert(target)
        return np.asarray(img)

    def _prepare_array(self, v, where):
        a = _to_numpy(v, where)
        if a is None:
            raise _bad(where, "expected %s, found %s" % (self.describe(), _describe(v)))
        if self.boxes:
            if a.size == 0:
                a = a.reshape(0, 4)
            if a.ndim != 2 or a.shape[1] != 4 or a.dtype.kind not in "iuf":
                raise _bad(where, "boxes are N x 4 numbers (x0, y0, x1, y1 in pixels), found %s"
                           % _describe(v))
            return _native(a.astype(np.float32, copy=False))
        if a.size == 0 and a.ndim == 1 and self.trailing:
            a = a.reshape((0,) + self.trailing)  # [] for a field of shape (N, d1, ...)
        if a.ndim != 1 + len(self.trailing) or tuple(a.shape[1:]) != self.trailing:
            raise _bad(where, "expected %s, found %s (%s)" % (
                self.describe(), _describe(v), "only the leading dimension may differ from "
                "sample to sample" if self.variable else "the shape is sample 0's"))
        if not self.variable and a.shape[0] != self.first_dim0:
            raise _bad(where, "expected %s like sample 0, found %s: the shape of an ndarray "
                       "field is fixed by sample 0 unless the field is declared variable, with "
                       "write(..., variable=[%r]) (or variable=True) or fields={%r: 'ndarray'}"
                       % (self.describe(), _describe(v), self.name, self.name))
        if a.shape[0] >= 2**32:
            raise _bad(where, "a leading dimension of %d is over 2^32 - 1" % a.shape[0])
        if a.size == 0:
            # No element to convert: an empty list (numpy's float64) fits a field of any dtype.
            return np.empty(a.shape, self.dtype)
        if a.dtype != self.dtype:
            rule = "same_kind" if self.explicit_dtype else "safe"
            if not np.can_cast(a.dtype, self.dtype, rule):
                raise _bad(where, "expected %s elements (%s), found %s: give fields={%r: "
                           "{'kind': 'ndarray', 'dtype': ...}} to choose the type, or convert "
                           "the values" % (self.dtype, "as declared" if self.explicit_dtype
                                           else "the first sample's", _describe(v), self.name))
            with np.errstate(over="ignore", invalid="ignore"):  # refused below, by name
                b = a.astype(self.dtype)
            i = _first_loss(a, b)
            if i >= 0:
                raise _bad(where, "element %d (%r) would be stored as %r in %s (the field's "
                           "dtype, %s): convert the values, or declare a dtype that holds them"
                           % (i, a.flat[i].item(), b.flat[i].item(), self.dtype,
                              "as declared" if self.explicit_dtype else "the first sample's"))
            a = b
        return _native(a)


def _lost(a, b):
    """Elements of @p a (the caller's) that the cast @p b does not hold: an integer out of an
    integer type's range (same_kind casting wraps it: 300 as int8 is 44); an integer a float
    type rounds (2**53 + 1 as float64); a finite float that overflows a narrower float to inf.
    Rounding a float to a narrower float is the conversion asked for, and is kept."""
    if b.dtype.kind in "iu" and a.dtype.kind in "iu":
        info = np.iinfo(b.dtype)
        return (a < info.min) | (a > info.max)
    if b.dtype.kind == "f" and a.dtype.kind in "iu":
        with np.errstate(invalid="ignore", over="ignore"):
            back = np.where(np.isfinite(b), b, 0).astype(a.dtype)
        return ~np.isfinite(b) | (back != a)
    if b.dtype.kind == "f" and a.dtype.kind == "f":
        return np.isfinite(a) & ~np.isfinite(b)
    return None


def _first_loss(a, b):
    """The flat index of the first element of @p a that the cast @p b lost, or -1."""
    m = _lost(a, b)
    if m is None or not m.any():
        return -1
    return int(np.flatnonzero(m)[0])


def _set(b, index, f, prep):
    """Hand one prepared value to builder @p b; the buffers stay alive in @p prep."""
    what = prep[0]
    if what == "image":
        a = prep[1]
        img = L.Image(a.ctypes.data, a.shape[1], a.shape[0], a.shape[2], a.strides[0])
        return lib.dlc_record_set_image(b, index, ctypes.byref(img))
    if what == "encoded":
        return lib.dlc_record_set_encoded(b, index, prep[1], len(prep[1]), prep[2], prep[3])
    if what == "array":
        a = prep[1]
        return lib.dlc_record_set_array(b, index, a.ctypes.data, a.nbytes, a.shape[0])
    if what == "int":
        return lib.dlc_record_set_int(b, index, prep[1])
    if what == "float":
        return lib.dlc_record_set_float(b, index, prep[1])
    return lib.dlc_record_set_bytes(b, index, prep[1], len(prep[1]))


def _normalize_fields(fields):
    """fields= as {name: options dict or None} (None: leave the field out) and its order."""
    if fields is None:
        return {}, []
    if isinstance(fields, (list, tuple)):
        seen = set()
        for name in fields:
            if name in seen:
                raise ValueError("fields names %r twice: a tuple's values are named in order, "
                                 "each name once" % (name,))
            seen.add(name)
        fields = {name: {} for name in fields}
    if not isinstance(fields, dict):
        raise ValueError("fields must be a dict {name: kind or options} or a list of names, "
                         "got %r" % (fields,))
    out = {}
    for name, spec in fields.items():
        if not isinstance(name, str):
            raise ValueError("fields: names are str, got %r" % (name,))
        if spec is None:
            out[name] = None
            continue
        if isinstance(spec, str):
            spec = {"kind": spec}
        if not isinstance(spec, dict):
            raise ValueError("fields[%r] must be a kind (%s), a dict of options or None, got %r"
                             % (name, ", ".join(_KINDS), spec))
        kind = spec.get("kind")
        if kind is not None and kind not in _KINDS:
            raise ValueError("fields[%r]: unknown kind %r (one of %s)"
                             % (name, kind, ", ".join(_KINDS)))
        unknown = set(spec) - _OPTIONS[kind]
        if unknown:
            raise ValueError("fields[%r]: %s not an option of %s (options: %s)"
                             % (name, ", ".join(sorted(unknown)),
                                "kind %r" % kind if kind else "an inferred kind",
                                ", ".join(sorted(_OPTIONS[kind]))))
        out[name] = dict(spec)
    return out, list(fields)


class _Sampler:
    """Names the values of every sample: dicts by their keys, tuples by the rule of write()."""

    def __init__(self, first, opts, order):
        self.opts = opts
        self.tuple_names = None
        if isinstance(first, dict):
            names = list(first)
            for k in names:
                if not isinstance(k, str):
                    raise _bad("sample 0", "field names are str, found %r" % (k,))
            missing = [n for n in order if n not in first]
            if missing:
                raise _bad("sample 0", "fields= names %s, which the sample does not have (it "
                           "has: %s)" % (", ".join(map(repr, missing)), ", ".join(names)))
        elif isinstance(first, (tuple, list)):
            n = len(first)
            if hasattr(first, "_fields"):
                names = list(first._fields)
            elif order:
                if len(order) != n:
                    raise _bad("sample 0", "a tuple of %d values, but fields= names %d; name "
                               "every value, in order (None leaves one out)" % (n, len(order)))
                names = list(order)
            elif n == 2 and _kind_or_none(first[0]) == "image" and \
                    _kind_or_none(first[1]) == "int":
                names = ["image", "label"]
            else:
                names = ["f%d" % i for i in range(n)]
            self.tuple_names = names
        else:
            raise _bad("sample 0", "%s; a sample is a dict {name: value} or a tuple"
                       % _describe(first))
        self.all_names = names
        self.names = [n for n in names if opts.get(n, {}) is not None]
        self.name_set = set(names)
        if not self.names:
            raise _bad("sample 0", "no field left to store")

    def values(self, sample, i):
        """{name: value} of sample @p i, checked against sample 0's names."""
        where = "sample %d" % i
        if self.tuple_names is not None:
            if not isinstance(sample, (tuple, list)) or len(sample) != len(self.tuple_names):
                raise _bad(where, "expected a tuple of %d values (%s) like sample 0, found %s"
                           % (len(self.tuple_names), ", ".join(self.tuple_names),
                              _describe(sample) if not isinstance(sample, (tuple, list))
                              else "%d values" % len(sample)))
            return dict(zip(self.tuple_names, sample))
        if not isinstance(sample, dict):
            raise _bad(where, "expected a dict like sample 0, found %s" % _describe(sample))
        if len(sample) != len(self.name_set) or any(k not in self.name_set for k in sample):
            extra = [k for k in sample if k not in self.name_set]
            missing = [k for k in self.all_names if k not in sample]
            raise _bad(where, "%s (sample 0 has: %s)" % (
                "; ".join(s for s in (
                    "field %s not in sample 0" % ", ".join(map(repr, extra)) if extra else "",
                    "no field %s" % ", ".join(map(repr, missing)) if missing else "") if s),
                ", ".join(self.all_names)))
        return sample


def _variable_names(variable):
    """write()'s variable= as True or a set of names."""
    if variable is None:
        return set()
    if variable is True:
        return True
    if isinstance(variable, str):
        return {variable}
    try:
        names = set(variable)
    except TypeError:
        names = None
    if isinstance(variable, (bool, bytes, dict)) or names is None or \
            not all(isinstance(n, str) for n in names):
        raise ValueError("variable must be None, True or field names (a str or a list of str), "
                         "got %r" % (variable,))
    return names


def _decide_variable(fields, opts, variable):
    """Which fields may vary from record to record: a field is fixed by sample 0 (shape, or
    image height and width) unless variable= names it (or is True), its options say
    "variable": True, it is declared kind "ndarray" (which PYTHON.md has always described as
    of variable length), or it is boxes or the classes of boxes (N per image by nature)."""
    by_name = {f.name: f for f in fields}
    if variable is not True:
        unknown = sorted(n for n in variable if n not in by_name)
        if unknown:
            raise ValueError("variable names %s, which the samples do not have as a stored "
                             "field (they have: %s)" % (", ".join(map(repr, unknown)),
                                                        ", ".join(by_name)))
        for n in sorted(variable):
            f = by_name[n]
            if f.kind not in ("image", "ndarray", "bytes"):  # bytes: of any length already
                raise ValueError("variable names %r, %s: only images and ndarrays have a size "
                                 "that can vary" % (n, "the label" if f.label else
                                                    "an int" if f.kind == "int" else "a float"))
    for f in fields:
        opt = opts.get(f.name) or {}
        if f.kind not in ("image", "ndarray"):
            if opt.get("variable"):
                raise ValueError("fields[%r]: 'variable' applies to images and ndarrays, and "
                                 "this field is %s" % (f.name, f.describe()))
            continue
        if "variable" in opt:
            if not isinstance(opt["variable"], bool):
                raise ValueError("fields[%r]: variable must be True or False, got %r"
                                 % (f.name, opt["variable"]))
            if opt["variable"] is False and variable is not True and f.name in variable:
                raise ValueError("%r is in variable= but fields[%r] says 'variable': False"
                                 % (f.name, f.name))
            f.variable = opt["variable"] or variable is True or f.name in variable
        else:
            f.variable = variable is True or f.name in variable or opt.get("kind") == "ndarray"
        if f.boxes:
            f.variable = True
    for f in fields:
        if f.boxes and f.classes in by_name:
            by_name[f.classes].variable = True


def _schema(first, sampler, opts, label_names, codecs, variable=frozenset()):
    """The fields of the store, inferred from sample 0 where fields= does not say."""
    values = sampler.values(first, 0)
    out = []
    for name in sampler.names:
        where = "sample 0: field %r" % name
        if not _NAME.match(name):
            raise _bad(where, "a field name is 1 to 31 of [A-Za-z0-9_], not starting with a "
                       "digit")
        opt = opts.get(name) or {}
        kind = opt.get("kind") or _infer_kind(values[name], where, name)
        out.append(_Field(name, kind, opt, values[name], where, sampler.names, codecs))
    by_name = {f.name: f for f in out}
    explicit = [f for f in out if f.label and (opts.get(f.name) or {}).get("kind") == "label"]
    labels = [f for f in out if f.label]
    if len(explicit) > 1:
        raise _bad("fields", "%s are all 'label'; a store has one label"
                   % ", ".join(repr(f.name) for f in explicit))
    if explicit and len(labels) > 1:
        for f in labels:
            if f is not explicit[0]:
                f.label = False  # a field named "label" beside an explicit one stays an int
    labels = [f for f in out if f.label]
    if len(labels) > 1:
        raise _bad("fields", "%s are all the label; a store has one label"
                   % ", ".join(repr(f.name) for f in labels))
    for f in out:
        if f.boxes:
            c = by_name.get(f.classes)
            if c is None or c.kind != "ndarray" or c.trailing != () or c.boxes:
                raise _bad("sample 0: field %r" % f.name,
                           "its classes field %r must be an ndarray of one dimension (N ids), "
                           "is %s" % (f.classes, c.describe() if c else "left out"))
    _decide_variable(out, opts, variable)
    label = next((f for f in out if f.label), None)
    if label_names is not None:
        if label is None:
            raise ValueError("label_names given, but no field is the label (an int field named "
                             "'label', or fields={NAME: 'label'})")
        label.label_limit = len(label_names)
    return out


def _open_writer(path, fields, label_names, force, build_json):
    specs = (L.FieldSpec * len(fields))(*[f.spec() for f in fields])
    cfg = L.WriterConfig()
    lib.dlc_writer_config_init(ctypes.byref(cfg))
    cfg.fields, cfg.num_fields = specs, len(fields)
    names = None
    if label_names is not None:
        names = (ctypes.c_char_p * len(label_names))(*[n.encode("utf-8") for n in label_names])
        cfg.label_names, cfg.num_labels = names, len(label_names)
    cfg.force = 1 if _flag(force, "force") else 0
    cfg.build_json = build_json.encode()
    h = ctypes.c_void_p()
    check(lib.dlc_writer_open(path, ctypes.byref(cfg), ctypes.byref(h)),
          "dlcache.write(%s)" % os.fsdecode(path))
    return h.value


class _Progress:
    """tqdm when importable, else a line on stderr when it is a terminal; or a callable."""

    def __init__(self, progress, total):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.bar = self.fn = None
        self.line = False
        self.last = 0.0
        if progress is False:
            return
        if callable(progress) and progress is not True:
            self.fn = progress
            return
        try:
            from tqdm import tqdm  # type: ignore[import]
            self.bar = tqdm(total=total, unit="samples", desc="dlcache.write")
            return
        except ImportError:
            pass
        self.line = progress is True or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())

    def update(self, done):
        self.done = done
        if self.bar is not None:
            self.bar.update(1)
            return
        now = time.monotonic()
        if now - self.last < 0.1:
            return
        self.last = now
        secs = now - self.t0
        if self.fn is not None:
            self.fn({"done": done, "total": self.total, "seconds": secs})
        elif self.line:
            sys.stderr.write("\rdlcache.write: %d%s samples, %.0f/s, %.1f s" % (
                done, "/%d" % self.total if self.total is not None else "",
                done / secs if secs > 0 else 0.0, secs))
            sys.stderr.flush()

    def finish(self, done):
        """The store is written: a callable hears of it once more, with done == total (the
        calls of update() are at most 10 a second, so the last sample's may have been
        skipped)."""
        if self.fn is not None:
            self.last = 0.0
            self.update(done)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.line:
            self.last = 0.0
            self.update(self.done)
            sys.stderr.write("\n")
            sys.stderr.flush()


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _indexable(samples):
    if isinstance(samples, (dict, str, bytes)):
        return False
    for cls in type(samples).__mro__:
        if cls.__name__ == "IterableDataset" and cls.__module__.startswith("torch.utils.data"):
            return False
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__")


def write(samples: "Iterable[Any]", path: "str | os.PathLike[str] | bytes",
          fields: "Mapping[str, Any] | Sequence[str] | None" = None,
          workers: "int | None" = None, label_names: "Sequence[str] | None" = None,
          force: bool = False, progress: "bool | Callable[[dict], Any] | None" = None, *,
          variable: "bool | str | Iterable[str] | None" = None) -> "WriteReport":
    """Write ``samples`` into a new store at ``path`` (the C writer; docs/PYTHON.md).

    Args:
        samples: an indexable (a torch map-style Dataset, a list: ``len()`` and
            ``[i]``, read as samples[0], samples[1], ... on the worker threads) or
            an iterable (a generator, an IterableDataset; read on this thread)
            of samples. A sample is a dict {name: value} or a tuple; values are
            numpy arrays, torch tensors, PIL images, ints, floats, bytes or str.
            A namedtuple is named by its fields, another tuple by ``fields`` (its
            order) when given, an (image, int) pair ("image", "label"), others
            "f0", "f1"...
        path: the store file. It is written to PATH.tmp-PID and renamed at the
            end: an exception (a bad sample, one raised by the samples,
            KeyboardInterrupt) leaves the previous store or none.
        fields: None (infer every field from the first sample), or a dict
            {name: kind or options}: kinds "image", "mask", "boxes", "ndarray",
            "int", "float", "bytes", "label"; options are a dict with "kind"
            and "encoding" ("raw", "jpeg", "png"), "quality" (JPEG),
            "channels" (images), "dtype" (ndarrays), "classes" (boxes: the
            field of their per-box classes), "label" (False: an int field named
            "label" is not the store's label), "variable" (images, ndarrays:
            see ``variable``); None leaves a field out. A list of names only
            names tuple values.
        workers: threads that convert and seal records (default: the cores).
        label_names: names of the label values 0..K-1 (default: "0".."K-1",
            K = the largest label + 1, decided at the end).
        force: replace an existing store.
        progress: None (tqdm if importable, else a line on stderr when it is a
            terminal), False, True, or a callable taking a dict (done, total,
            seconds) about 10 times a second, and a last time once the store
            is written, with done == total (total is None for an iterable
            without ``len()``).
        variable: which image and ndarray fields may differ in size from
            record to record: True for all, or names (``("tokens",)``). Every
            other field is fixed by sample 0: an ndarray's shape, an image's
            height and width; a later sample that differs is an error naming
            it and the field. A field declared ``"ndarray"`` in ``fields``,
            one whose options say ``"variable": True``, boxes and the classes
            of boxes are variable without it. A variable field whose records
            all turn out the same is still stored with a fixed shape.

    Returns:
        A WriteReport (path, count, seconds, samples_per_s, file_bytes,
        payload_bytes, content_digest, workers, num_labels, fields).

    Raises:
        InvalidArgumentError (a ValueError) for a sample that does not fit the
        schema, naming the sample, the field, what was expected and what was
        found; ExistsError when ``path`` exists without force; the samples'
        own exceptions, unchanged; DlcacheOSError for a full disk.
    """
    outp = _fspath(path, "path")
    ctx = "dlcache.write(%s)" % os.fsdecode(outp)
    nworkers = _cores() if workers is None else _uint(workers, "workers", 1, 1024)
    opts, order = _normalize_fields(fields)
    variable = _variable_names(variable)
    if label_names is not None:
        if isinstance(label_names, str) or not all(isinstance(n, str) for n in label_names):
            raise ValueError("label_names must be a list of str, got %r" % (label_names,))
        label_names = list(label_names)
        if not 1 <= len(label_names) <= _MAX_LABELS or any("\0" in n for n in label_names):
            raise ValueError("label_names must hold 1 to 2^24 names without NUL characters")
        for k, n in enumerate(label_names):
            try:
                n.encode("utf-8")
            except UnicodeEncodeError as e:  # a lone surrogate, from a file name's bytes
                raise ValueError("label_names[%d] is not text UTF-8 can hold (%r at %d): %s"
                                 % (k, n[e.start:e.end], e.start, e.reason)) from None
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise ValueError("progress must be None, True, False or a callable, got %r"
                         % (progress,))
    # Refuse early, before reading any sample; the C writer checks again at open.
    if not force and os.path.lexists(outp):
        raise ExistsError(_EEXIST, "destination exists",
                          "%s: exists; give force=True to replace it" % os.fsdecode(outp), ctx)

    indexable = _indexable(samples)
    total: "Optional[int]"
    it: "Optional[Iterator[Any]]"
    if indexable:
        seq = cast("Sequence[Any]", samples)
        total = len(seq)
        if total == 0:
            raise _bad(ctx, "no samples: a store holds at least one record")
        it = None
        first = seq[0]
    else:
        try:
            it = iter(samples)
        except TypeError:
            raise TypeError("samples must be indexable (len() and [i]) or iterable, not %s"
                            % type(samples).__name__) from None
        total = None
        if hasattr(samples, "__len__"):
            try:
                total = len(cast("Sized", samples))
            except TypeError:
                total = None
        try:
            first = _snapshot(next(it))
        except StopIteration:
            raise _bad(ctx, "no samples: a store holds at least one record") from None

    codec = _Codecs()
    sampler = _Sampler(first, opts, order)
    try:
        schema = _schema(first, sampler, opts, label_names, codec, variable)
    except BaseException:
        codec.destroy_all()
        raise
    build_json = json.dumps({"tool": "dlcache.write", "library": lib.dlc_version().decode(),
                             "source": type(samples).__name__,
                             "fields": {f.name: f.describe() for f in schema}},
                            sort_keys=True)
    t0 = time.monotonic()
    w = _open_writer(outp, schema, label_names, force, build_json)

    # One builder per record in flight: a worker never waits for the appender to free one.
    window = 2 * nworkers + 2
    builders = []
    free: "queue.Queue[Any]" = queue.Queue()
    stop = threading.Event()
    bar = None
    pool = None
    try:
        for _ in range(window):
            h = ctypes.c_void_p()
            check(lib.dlc_record_builder_create(w, ctypes.byref(h)), ctx)
            builders.append(h.value)
            free.put(h.value)

        def task(i, sample, have):
            if stop.is_set():
                return None
            b = free.get()
            field = None
            try:
                if not have:
                    sample = samples[i]
                values = sampler.values(sample, i)
                # The prepared buffers must live until dlc_record_seal() returns.
                preps = []
                for f in schema:
                    field = f.name  # Named in the note of another library's error (below).
                    preps.append(f.prepare(values[f.name], "sample %d: field %r"
                                           % (i, f.name), codec))
                field = None
                for k, (f, p) in enumerate(zip(schema, preps)):
                    rc = _set(b, k, f, p)
                    if rc < 0:
                        raise error_for(rc, "%s: sample %d" % (ctx, i))
                rc = lib.dlc_record_seal(b)  # GIL released: encode, hash, lay out
                if rc < 0:
                    raise error_for(rc, "%s: sample %d" % (ctx, i))
                return b
            except BaseException as e:
                lib.dlc_record_builder_reset(b)
                free.put(b)
                if not isinstance(e, (InvalidArgumentError, KeyboardInterrupt)) and \
                        hasattr(e, "add_note"):
                    # Another library's error (torch's, PIL's) names neither.
                    e.add_note("dlcache.write: raised by sample %d%s"
                               % (i, "" if field is None else ", field %r" % field))
                raise

        bar = _Progress(progress, total)
        pool = concurrent.futures.ThreadPoolExecutor(nworkers, thread_name_prefix="dlcache-write")
        pending = collections.deque([pool.submit(task, 0, first, True)])
        first = None
        nxt, done, exhausted = 1, 0, False
        while pending or not exhausted:
            while not exhausted and len(pending) < window:
                if indexable:
                    assert total is not None
                    if nxt >= total:
                        exhausted = True
                        break
                    pending.append(pool.submit(task, nxt, None, False))
                else:
                    assert it is not None
                    try:
                        s = _snapshot(next(it))
                    except StopIteration:
                        exhausted = True
                        break
                    except BaseException as e:
                        if not isinstance(e, KeyboardInterrupt) and hasattr(e, "add_note"):
                            e.add_note("dlcache.write: raised by the samples' iterator for "
                                       "sample %d" % nxt)
                        raise
                    pending.append(pool.submit(task, nxt, s, True))
                nxt += 1
            if not pending:
                break
            b = pending.popleft().result()
            rc = lib.dlc_writer_append(w, b)
            if rc < 0:
                raise error_for(rc, "%s: sample %d" % (ctx, done))
            free.put(b)
            done += 1
            bar.update(done)
        pool.shutdown(wait=True)
        pool = None
        rc = lib.dlc_writer_finish(w)  # frees w in every case
        w = None
        check(rc, ctx)
        bar.finish(done)
    except BaseException as e:
        stop.set()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            pool = None
        if w is not None:
            lib.dlc_writer_abort(w)
            w = None
        if not isinstance(e, (InvalidArgumentError, KeyboardInterrupt)) and \
                hasattr(e, "add_note"):
            e.add_note("dlcache.write: %s was not written (a store there before is unchanged)"
                       % os.fsdecode(outp))
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for b in builders:
            lib.dlc_record_builder_destroy(b)
        codec.destroy_all()
        if bar is not None:
            bar.close()
    seconds = time.monotonic() - t0
    with _Store(outp) as st:
        i = _read_info(st)
    return WriteReport(path=os.fsdecode(outp), count=i["count"], seconds=seconds,
                       samples_per_s=i["count"] / seconds if seconds > 0 else 0.0,
                       file_bytes=i["file_bytes"], payload_bytes=i["payload_bytes"],
                       content_digest=i["content_digest"], workers=nworkers,
                       num_labels=i["num_labels"], fields=i["fields"])

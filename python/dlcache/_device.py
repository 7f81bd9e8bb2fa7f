"""The device side of dlcache.Loader: batches delivered as CUDA tensors.

Two backends, chosen once when the Loader is made (``Loader.device_backend``):

* "plugin": the C loader's own device path (libdlcache_cuda.so, see "The device path" in
  include/dlcache/loader.h). The slots are page-locked by the library, a copy thread of the
  loader stages each batch on the GPU, and dlc_loader_device_emit() converts the images
  (uint8 to float16/float32, normalized, NCHW or NHWC) and copies every other output into
  tensors that torch allocated, on torch's current stream.
* "torch": the same work through torch's own CUDA runtime, for when the plugin is missing or
  cannot run. The C loader makes uint8 host batches whose slots are page-locked once with
  torch.cuda.cudart().cudaHostRegister(); each output is copied with one asynchronous copy on
  a side stream, the current stream waits for that copy's event, and the images are converted
  there with torch operations written to give the same bits as the C loader's CPU path.

Either way the tensors belong to the caller (allocated by torch's caching allocator on the
current stream, or on the side stream and marked used by the current stream with
record_stream), so they stay valid however long they are kept, after close() too; work that
the caller enqueues on the current stream after getting a batch sees it complete.
"""

import ctypes
import os
import warnings
from typing import Optional

import torch

from . import _batchaug
from . import _lib as L
from ._lib import lib
from .errors import error_for

# The environment variable that forces a backend ("torch" or "plugin"), for benchmarks.
BACKEND_ENV = "DLCACHE_DEVICE_BACKEND"

_warned = False

# The torch type that device memory of a dlc_dtype is allocated as: the raw bytes. uint16 is
# allocated as int16 and then viewed as torch.uint16 (torch >= 2.3) or widened to int32 like
# the host path does (older torch has no uint16).
_RAW_DTYPE = {L.DTYPE_UINT8: torch.uint8, L.DTYPE_FLOAT32: torch.float32,
              L.DTYPE_FLOAT16: torch.float16, L.DTYPE_INT8: torch.int8,
              L.DTYPE_UINT16: torch.int16, L.DTYPE_INT16: torch.int16,
              L.DTYPE_INT32: torch.int32, L.DTYPE_INT64: torch.int64,
              L.DTYPE_FLOAT64: torch.float64}
_ITEMSIZE = {L.DTYPE_UINT8: 1, L.DTYPE_FLOAT32: 4, L.DTYPE_FLOAT16: 2, L.DTYPE_INT8: 1,
             L.DTYPE_UINT16: 2, L.DTYPE_INT16: 2, L.DTYPE_INT32: 4, L.DTYPE_INT64: 8,
             L.DTYPE_FLOAT64: 8}
_OUT_DTYPE = {L.DTYPE_UINT8: torch.uint8, L.DTYPE_FLOAT32: torch.float32,
              L.DTYPE_FLOAT16: torch.float16}
# bfloat16 images: converted on the device like float16 (round to nearest even from float32).
_RAW_DTYPE[L.DTYPE_BFLOAT16] = torch.bfloat16
_ITEMSIZE[L.DTYPE_BFLOAT16] = 2
_OUT_DTYPE[L.DTYPE_BFLOAT16] = torch.bfloat16


def parse_device(device):
    """Loader(device=...) as None (host batches) or torch.device("cuda", N).

    Raises ValueError, before anything is opened, for a device that is not a GPU torch can use.
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError("device must be None, 'cpu', 'cuda', 'cuda:N' or a torch.device, "
                         "got %r (%s)" % (device, e)) from None
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError("device must be None, 'cpu', 'cuda', 'cuda:N' or a torch.device, "
                         "got %r" % (device,))
    if not torch.cuda.is_available():
        if getattr(torch.version, "cuda", None) is None:
            why = "this torch (%s) is built without CUDA" % torch.__version__
        else:
            why = ("torch %s (CUDA %s) finds no usable GPU or driver"
                   % (torch.__version__, torch.version.cuda))
        raise ValueError("device=%r: batches on a GPU need torch.cuda.is_available(), which "
                         "is False: %s. Use device='cpu' (or None) for host batches."
                         % (str(device) if isinstance(device, torch.device) else device, why))
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise ValueError("device=%r: torch sees %d CUDA device(s) (0..%d)"
                         % (str(dev), count, count - 1))
    return torch.device("cuda", index)


def parse_memory_format(memory_format):
    """True for channels_last, False for contiguous_format (or None)."""
    if memory_format is None:
        return False
    if isinstance(memory_format, str):
        key = memory_format.replace("torch.", "")
        if key in ("contiguous_format", "contiguous"):
            return False
        if key == "channels_last":
            return True
    elif memory_format == torch.contiguous_format:
        return False
    elif memory_format == torch.channels_last:
        return True
    raise ValueError("memory_format must be torch.contiguous_format or torch.channels_last, "
                     "got %r" % (memory_format,))


def probe(index):
    """None when the CUDA plugin can run on GPU @p index, else the reason it cannot."""
    if not lib.has("dlc_cuda_probe"):
        return ("this libdlcache (%s) has no device path (dlc_cuda_probe is not exported)"
                % lib.path)
    buf = ctypes.create_string_buffer(1024)
    rc = lib.dlc_cuda_probe(index, buf, len(buf))
    if rc == L.DLC_OK:
        return None
    why = buf.value.decode("utf-8", "replace")
    if not why:
        msg = lib.dlc_errmsg()
        why = msg.decode("utf-8", "replace") if msg else lib.dlc_strerror(rc).decode()
    return why or "dlc_cuda_probe(%d) failed (%d)" % (index, rc)


def choose_backend(index):
    """("plugin", None) or ("torch", why the plugin is not used), as $DLCACHE_DEVICE_BACKEND
    allows."""
    forced = os.environ.get(BACKEND_ENV, "").strip().lower()
    if forced not in ("", "torch", "plugin"):
        raise ValueError("$%s must be 'torch' or 'plugin' (or unset), got %r"
                         % (BACKEND_ENV, os.environ[BACKEND_ENV]))
    if forced == "torch":
        return "torch", "%s=torch" % BACKEND_ENV
    why = probe(index)
    if why is None:
        return "plugin", None
    if forced == "plugin":
        raise RuntimeError("%s=plugin, but the CUDA plugin cannot run on cuda:%d: %s"
                           % (BACKEND_ENV, index, why))
    return "torch", why


def warn_torch_backend(why, dev, stacklevel=3):
    """Say once per process why the plugin is not used."""
    global _warned
    if _warned or why == "%s=torch" % BACKEND_ENV:
        return
    _warned = True
    warnings.warn("dlcache: the CUDA plugin is not used (%s); batches go to %s through torch's "
                  "CUDA runtime instead (page-locked slots, copies on a side stream, conversion "
                  "with torch operations): the same outputs" % (why, dev),
                  RuntimeWarning, stacklevel=stacklevel)


def _host_view(ptr, code, shape, owner):
    """A CPU tensor over C memory, as raw bytes of the allocation dtype (uint16 as int16)."""
    numel = 1
    for s in shape:
        numel *= s
    buf = (ctypes.c_char * (numel * _ITEMSIZE[code])).from_address(ptr)
    buf._owner = owner
    return torch.frombuffer(buf, dtype=_RAW_DTYPE[code], count=numel).view(shape)


def _finish_raw(t, code):
    """A device tensor of raw bytes as the dtype the host path gives."""
    if code == L.DTYPE_UINT16:
        if hasattr(torch, "uint16"):
            return t.view(torch.uint16)
        return t.to(torch.int32) & 0xFFFF
    return t


def _perm(ndim):
    """From NHWC memory order to the logical NCHW order: [N, H, W, C] or [N, K, H, W, C]."""
    return (0, 3, 1, 2) if ndim == 4 else (0, 1, 4, 2, 3)


def _items(outputs, indices):
    """[(name, tensor)] of a device batch, as the host path names them: each output, then its
    NAME_lengths and NAME_offsets where it has them, then the record numbers."""
    items = []
    for name, t, lengths, offsets in outputs:
        items.append((name, t))
        if lengths is not None:
            items.append((name + "_lengths", lengths))
        if offsets is not None:
            items.append((name + "_offsets", offsets))
    if indices is not None:
        items.append(("indices", indices))
    return items


class _Pins:
    """The torch backend's hold on the C loader's slots: those page-locked with
    cudaHostRegister and the event of the copy that may still read one. release() runs before
    dlc_loader_close() (close(), garbage collection, interpreter exit): memory freed while
    registered breaks later copies from the same addresses."""

    __slots__ = ("regs", "event", "device")

    def __init__(self, device):
        self.regs = []
        self.event = None
        self.device = device

    def sync(self):
        ev, self.event = self.event, None
        if ev is not None:
            ev.synchronize()

    def release(self):
        try:
            self.sync()
        except Exception:  # a failed device: unregister anyway
            pass
        if self.regs:
            cudart = torch.cuda.cudart()
            with torch.cuda.device(self.device):
                while self.regs:
                    cudart.cudaHostUnregister(self.regs.pop())


class _Feed:
    """What both backends share: the outputs' roles, the dtypes and the layout."""

    backend: "Optional[str]" = None

    def __init__(self, dev, dtype, channels_last, schema, cfg, return_indices):
        self.dev = dev
        self.dtype = dtype                      # the requested image dtype (dlc_dtype)
        self.float_out = dtype != L.DTYPE_UINT8
        self.channels_last = bool(channels_last) and self.float_out
        self.images = {i for i, f in enumerate(schema["fields"])
                       if f["kind"] == "image" and not f["mask"]}
        self.mean = [float(cfg.mean[c]) for c in range(4)]
        self.std = [float(cfg.std[c]) for c in range(4)]
        self.return_indices = return_indices
        self.pins = None
        # The torch backend's MixUp / CutMix (Loader sets it): (options, classes, the label
        # field's index, a function giving (seed, rank, world size)), or None.
        self.mix = None

    def sync(self):
        """Wait for what may still read a slot (before the C loader refills or frees it)."""

    def layout(self):
        """cfg.device_layout for the plugin."""
        if not self.float_out:
            return L.LAYOUT_NONE
        return L.LAYOUT_NHWC if self.channels_last else L.LAYOUT_NCHW


class PluginFeed(_Feed):
    """dlc_loader_next_device() + dlc_loader_device_emit() into torch's tensors."""

    backend = "plugin"

    def __init__(self, *args):
        _Feed.__init__(self, *args)
        self._db = L.DeviceBatch()

    def next(self, ptr, batch, owner, ctx, take=None):
        """The next batch's outputs as torch tensors; @p take(ptr, device_batch) waits for it
        (the Loader's wait in slices), dlc_loader_next_device() without it."""
        db = self._db
        if take is not None:
            rc = take(ptr, db)
        else:
            rc = lib.dlc_loader_next_device(ptr, ctypes.byref(db))  # GIL released
        if rc != L.DLC_OK:
            return rc, None
        n = db.count
        dev = self.dev
        with torch.cuda.device(dev):
            stream = torch.cuda.current_stream(dev)
            nf = db.num_fields
            dst = (L.DeviceDst * max(nf, 1))()
            outs = []
            for i in range(nf):
                f = db.fields[i]
                shape = tuple(int(s) for s in f.shape[:f.ndim])
                t = torch.empty(shape, dtype=_RAW_DTYPE[f.dtype], device=dev)
                if t.numel() * t.element_size() != f.bytes:
                    # Released by the next dlc_loader_next_device() or close.
                    raise RuntimeError("%s: output %r of shape %s in %s has %d bytes, the "
                                       "library writes %d (a binding out of step with "
                                       "libdlcache)" % (ctx, f.name.decode(), list(shape),
                                                        lib.dlc_dtype_name(f.dtype).decode(),
                                                        t.numel() * t.element_size(), f.bytes))
                dst[i].data = t.data_ptr() if t.numel() else None
                lengths = offsets = None
                if f.lengths:
                    lengths = torch.empty(n, dtype=torch.int64, device=dev)
                    dst[i].lengths = lengths.data_ptr()
                if f.offsets:
                    offsets = torch.empty(n + 1, dtype=torch.int64, device=dev)
                    dst[i].offsets = offsets.data_ptr()
                outs.append((f.name.decode(), f.dtype, f.layout, t, lengths, offsets))
            idx = None
            if self.return_indices:
                # Record numbers are < 2**63: int64 is the same bytes as the C uint64.
                idx = torch.empty(n, dtype=torch.int64, device=dev)
            rc = lib.dlc_loader_device_emit(ptr, ctypes.byref(db), stream.cuda_stream or None,
                                            dst, idx.data_ptr() if idx is not None else None)
            if rc != L.DLC_OK:
                raise error_for(rc, ctx)
            done = []
            for name, code, layout, t, lengths, offsets in outs:
                t = _finish_raw(t, code)
                if layout == L.LAYOUT_NHWC and code in (L.DTYPE_FLOAT32, L.DTYPE_FLOAT16,
                                                         L.DTYPE_BFLOAT16):
                    # channels_last: the logical [N, C, H, W] ([N, K, C, H, W]) over NHWC memory.
                    t = t.permute(_perm(t.dim()))
                done.append((name, t, lengths, offsets))
        return L.DLC_OK, _items(done, idx)


class TorchFeed(_Feed):
    """Host batches in page-locked slots, copied and converted with torch's CUDA runtime."""

    backend = "torch"

    def __init__(self, *args):
        _Feed.__init__(self, *args)
        dev = self.dev
        self.pins = _Pins(dev)
        self.bytes = 0
        with torch.cuda.device(dev):
            self.side = torch.cuda.Stream(device=dev)
            # Tensors, never Python numbers: torch turns a division by a scalar into a product
            # by its reciprocal, which changes bits; tensor / tensor is IEEE division, as in C.
            self.c255 = torch.full((1,), 255.0, dtype=torch.float32, device=dev)
        self._norm = {}

    def register(self, ptr):
        """Page-lock the C loader's slots with torch's runtime, once. Without the means (an old
        torch, or a refusal) the copies still work, from pageable memory, slower."""
        if not lib.has("dlc_loader_host_slots"):
            return
        n = lib.dlc_loader_host_slots(ptr, None, None, 0)
        bases = (ctypes.c_void_p * max(n, 1))()
        sizes = (ctypes.c_size_t * max(n, 1))()
        n = lib.dlc_loader_host_slots(ptr, bases, sizes, n)
        try:
            cudart = torch.cuda.cudart()
            register, _ = cudart.cudaHostRegister, cudart.cudaHostUnregister
        except (AttributeError, RuntimeError) as e:
            warnings.warn("dlcache: torch.cuda.cudart() cannot page-lock memory here (%s); "
                          "the copies to %s come from pageable memory, slower" % (e, self.dev),
                          RuntimeWarning, stacklevel=4)
            return
        with torch.cuda.device(self.dev):
            for k in range(n):
                base, size = bases[k], sizes[k]
                if not base or not size:
                    continue
                rc = register(base, size, 0)
                code = int(rc)
                if code != 0:
                    try:
                        text = cudart.cudaGetErrorString(rc)
                    except Exception:
                        text = "error %d" % code
                    warnings.warn("dlcache: cudaHostRegister of a batch slot (%d bytes) failed: "
                                  "%s; its copies to %s come from pageable memory, slower"
                                  % (size, text, self.dev), RuntimeWarning, stacklevel=4)
                    continue
                self.pins.regs.append(base)

    def sync(self):
        self.pins.sync()

    def _mean_std(self, channels, ndim):
        key = (channels, ndim)
        if key not in self._norm:
            shape = [1] * ndim
            shape[1 if ndim == 4 else 2] = channels
            mk = lambda v: torch.tensor(v[:channels], dtype=torch.float32,  # noqa: E731
                                        device=self.dev).view(shape)
            self._norm[key] = (mk(self.mean), mk(self.std))
        return self._norm[key]

    def _upload(self, ptr, code, shape, owner, cur):
        """A device tensor (allocated on the side stream, the current one now) filled by one
        asynchronous copy from the slot; marked as used by @p cur for the allocator."""
        t = torch.empty(shape, dtype=_RAW_DTYPE[code], device=self.dev)
        if t.numel() and ptr:
            t.copy_(_host_view(ptr, code, shape, owner), non_blocking=True)
            self.bytes += t.numel() * t.element_size()
        t.record_stream(cur)
        return t

    def _convert(self, u):
        """uint8 NHWC [N, H, W, C] ([N, K, H, W, C]) to the float images of the host path:
        ((x / 255) - mean) / std per channel in float32, each step rounded (then .half()), as
        logical [N, C, H, W] in the chosen memory format. On the current stream."""
        nd = u.dim()
        perm = _perm(nd)
        src = u.permute(perm)
        out_dtype = _OUT_DTYPE[self.dtype]
        if self.channels_last:
            out = torch.empty(u.shape, dtype=out_dtype, device=self.dev).permute(perm)
        else:
            out = torch.empty(src.shape, dtype=out_dtype, device=self.dev)
        tmp = out if out_dtype == torch.float32 else torch.empty_like(out, dtype=torch.float32)
        mean, std = self._mean_std(u.shape[-1], nd)
        torch.div(src, self.c255, out=tmp)
        torch.sub(tmp, mean, out=tmp)
        torch.div(tmp, std, out=tmp)
        if tmp is not out:
            out.copy_(tmp)  # round to nearest even, as the C loader's float16
        return out

    def next(self, ptr, batch, owner, ctx, take=None):
        """The next batch on the device; @p take(ptr, batch) waits for the host batch (the
        Loader's wait in slices), dlc_loader_next() without it."""
        self.sync()  # the slot of the last copy goes back to the workers now
        if take is not None:
            rc = take(ptr, batch)
        else:
            rc = lib.dlc_loader_next(ptr, ctypes.byref(batch))  # GIL released
        if rc != L.DLC_OK:
            return rc, None
        n = batch.count
        dev = self.dev
        with torch.cuda.device(dev):
            cur = torch.cuda.current_stream(dev)
            raw = []
            with torch.cuda.stream(self.side):
                for i in range(batch.num_fields):
                    bf = batch.fields[i]
                    shape = tuple(int(s) for s in bf.shape[:bf.ndim])
                    t = self._upload(bf.data, bf.dtype, shape, owner, cur)
                    lengths = offsets = None
                    if bf.lengths:
                        lengths = self._upload(bf.lengths, L.DTYPE_INT64, (n,), owner, cur)
                    if bf.offsets:
                        offsets = self._upload(bf.offsets, L.DTYPE_INT64, (n + 1,), owner, cur)
                    image = bf.field in self.images and bf.dtype == L.DTYPE_UINT8
                    raw.append((bf.name.decode(), bf.dtype, image, t, lengths, offsets))
                idx = None
                if self.return_indices:
                    # Record numbers are < 2**63: int64 is the same bytes as the C uint64.
                    idx = self._upload(batch.indices, L.DTYPE_INT64, (n,), owner, cur)
                ev = torch.cuda.Event()
                ev.record(self.side)
            self.pins.event = ev
            cur.wait_event(ev)
            done = [(name, self._convert(t) if image and self.float_out else _finish_raw(t, code),
                     lengths, offsets) for name, code, image, t, lengths, offsets in raw]
            if self.mix is not None:
                done = self._mix_batch(batch, raw, done)
        return L.DLC_OK, _items(done, idx)

    def _mix_batch(self, batch, raw, done):
        """MixUp / CutMix of the converted images and soft targets, on the current stream, with
        the C loader's draw and its arithmetic (_batchaug.torch_mix(): the bits of the host path
        and of the plugin's kernel)."""
        opts, classes, label_field, keys = self.mix
        seed, rank, world = keys()
        images = [done[k][1] for k in range(len(done)) if raw[k][2]]
        if not images:
            return done
        h, w = images[0].shape[-2:]
        p = _batchaug.draw(opts, seed, batch.epoch, rank, world, batch.batch_index, int(h),
                           int(w))
        out = list(done)
        for k in range(len(done)):
            if batch.fields[k].field == label_field:
                name, labels, lengths, offsets = done[k]
                targets = _batchaug.torch_mix(images, labels, p, classes, opts["smoothing"])
                out[k] = (name, targets, lengths, offsets)
        return out


def make_feed(backend, *args):
    return (PluginFeed if backend == "plugin" else TorchFeed)(*args)

"""dlcache.Loader: shuffled, augmented batches from a store as torch tensors."""

import collections
import ctypes
import inspect
import logging
import math
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from typing import (  # noqa: F401
    Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast)
from urllib.parse import urlsplit, urlunsplit

import torch

from . import _augment
from . import _device
from . import _report
from . import _stream
from . import _batchaug
from . import _lib as L
from ._lib import lib
from .errors import check, error_for, redact
from .store import _flag, _fspath, _mix_weights, _read_schema, _uint, info as _store_info, \
    public_path

__all__ = ["Loader"]

_log = logging.getLogger("dlcache")

_DTYPES = {
    "uint8": L.DTYPE_UINT8, "float32": L.DTYPE_FLOAT32, "float16": L.DTYPE_FLOAT16,
    torch.uint8: L.DTYPE_UINT8, torch.float32: L.DTYPE_FLOAT32, torch.float16: L.DTYPE_FLOAT16,
}
# The torch type of each dlc_dtype, and the one a view is made with when torch has no such type
# (torch before 2.3 has no uint16): then the view is converted to the wider type, a copy.
_TORCH_DTYPE = {L.DTYPE_UINT8: torch.uint8, L.DTYPE_FLOAT32: torch.float32,
                L.DTYPE_FLOAT16: torch.float16, L.DTYPE_INT8: torch.int8,
                L.DTYPE_INT16: torch.int16, L.DTYPE_INT32: torch.int32,
                L.DTYPE_INT64: torch.int64, L.DTYPE_FLOAT64: torch.float64,
                L.DTYPE_UINT16: getattr(torch, "uint16", torch.int16)}
_WIDEN = {} if hasattr(torch, "uint16") else {L.DTYPE_UINT16: torch.int32}
_ITEMSIZE = {L.DTYPE_UINT8: 1, L.DTYPE_FLOAT32: 4, L.DTYPE_FLOAT16: 2, L.DTYPE_INT8: 1,
             L.DTYPE_UINT16: 2, L.DTYPE_INT16: 2, L.DTYPE_INT32: 4, L.DTYPE_INT64: 8,
             L.DTYPE_FLOAT64: 8}
_AUGMENTS = {"center_crop": L.AUGMENT_CENTER_CROP, "random_crop": L.AUGMENT_RANDOM_CROP,
             "random_resized_crop": L.AUGMENT_RANDOM_RESIZED_CROP}
# bfloat16 (torch.bfloat16 tensors; numpy has none, so there is no numpy view of such a batch).
_DTYPES.update({"bfloat16": L.DTYPE_BFLOAT16, torch.bfloat16: L.DTYPE_BFLOAT16})
_TORCH_DTYPE[L.DTYPE_BFLOAT16] = torch.bfloat16
_ITEMSIZE[L.DTYPE_BFLOAT16] = 2
_VARIABLE = {"pad": L.VARIABLE_PAD, "offsets": L.VARIABLE_OFFSETS, "pad_to": L.VARIABLE_PAD_TO}
_VERIFY = {"off": L.VERIFY_OFF, "first": L.VERIFY_FIRST, "always": L.VERIFY_ALWAYS,
           False: L.VERIFY_OFF, True: L.VERIFY_FIRST}
_CORRUPT = {"replace": L.CORRUPT_REPLACE, "fail": L.CORRUPT_FAIL, "raise": L.CORRUPT_FAIL}
_SAMPLERS = {"shuffle": L.SAMPLER_SHUFFLE, "sequential": L.SAMPLER_SEQUENTIAL,
             "windows": L.SAMPLER_SHARD_WINDOWS}
# Loader.stream_stats() keys: dlc_loader_stream_stats fields.
_STREAM_STATS = (("stall_s", "stall_seconds"), ("hits", "hits"), ("misses", "misses"),
                 ("bytes_fetched", "bytes_fetched"), ("requests", "requests"),
                 ("peak_cache_bytes", "peak_cache_bytes"), ("evictions", "evictions"),
                 ("downloads", "downloads"))

# Where the stream stands, as far as iter() is concerned.
_FRESH = 0    # The C loader sits at the start of self._epoch; nothing was taken from it.
_RESUMED = 1  # load_state_dict() put it in the middle of self._epoch.
_RUNNING = 2  # An iterator took batches of self._epoch and did not reach its end.
_DONE = 3     # self._epoch was iterated to its end.
_RESUMED_END = 4  # load_state_dict() put it at the end of self._epoch: set_epoch() of that
                  # epoch keeps it there (an empty pass), not a replay of the epoch.

# 2: the state names its source (its content digest, its path with secrets redacted); 1 is still
# read, with a warning (it is matched to the store by its record count only).
_STATE_VERSION = 2

# next() waits for a batch in slices this long (dlc_loader_next_wait()), coming back to the
# interpreter between them: a signal handler (Ctrl-C's, the program's own, asyncio's) runs within
# a slice, whatever thread waits and whoever owns SIGINT, and close() from another thread ends
# the wait. Short enough to feel immediate, long enough that a waiting loop costs nothing.
_SLICE_MS = 100


def _cancelled_task():
    """Between two slices of a wait: raise CancelledError where the wait runs in an asyncio task
    that was asked to stop (asyncio.run()'s Ctrl-C handler cancels the main task, which learns
    of it only at its next await: the batch may be a whole download away)."""
    aio = sys.modules.get("asyncio")
    if aio is None:
        return
    try:
        task = aio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        return
    cancelling = getattr(task, "cancelling", None)  # Python 3.11
    if cancelling is not None and cancelling():
        raise aio.CancelledError()


def _log_cb(_user, level, msg):
    lvl = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING}.get(level, logging.INFO)
    text = msg.decode("utf-8", "replace") if msg else ""
    if lvl >= logging.WARNING:
        # What a user must not miss (damaged records replaced, a slower I/O path, a retry)
        # reaches Python's warnings, shown without any logging set up; the "dlcache" logger gets
        # it too only where logging has a handler, since logging's last-resort handler would
        # print the same line a second time.
        warnings.warn("dlcache: " + text, RuntimeWarning, stacklevel=2)
        if not _log.hasHandlers():
            return
    _log.log(lvl, "%s", text)


# One callback object for every loader: ctypes keeps it alive with the module.
_LOG_CB = L.LOG_FN(_log_cb)

FORKED = ("this dlcache loader was opened in process %d, and this process is a fork of it: its "
          "worker threads did not come along. Open a Loader in the child, or hand it over "
          "pickled (multiprocessing's 'spawn' and 'forkserver' do; pickle.dumps(loader) "
          "carries its arguments and position)")

# The C loaders of this process, let go of in a fork() child.
_LIVE = weakref.WeakSet()  # type: weakref.WeakSet[_Handle]


def _forget_in_child():
    """After fork(): the child has the parent's loaders' memory but none of their threads. Each
    is let go without a close (which would wait for threads that are not there), and any use
    says why (FORKED)."""
    parent = os.getppid()
    for h in list(_LIVE):
        h._fin.detach()
        h.ptr = None
        h.forked = parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _close_loader(ptr, pins):
    if pins is not None:
        pins.release()  # wait for the last copy, unregister the slots: before they are freed
    lib.dlc_loader_close(ptr)


class _Handle:
    """Owns the dlc_loader pointer. Tensors lent from a batch hold a reference
    to it, so the slot memory they view is not freed under them by garbage
    collection of the Loader (an explicit close() still frees it). The
    finalizer also runs at interpreter exit, before the modules are torn
    down, so worker threads never call the log callback into a dying
    interpreter. @p pins: the torch device backend's registered slots, let go
    of before the close."""

    __slots__ = ("ptr", "_fin", "forked", "__weakref__")

    def __init__(self, ptr, pins=None):
        self.ptr = ptr
        self.forked = 0  # after fork(): the pid of the process that opened it
        self._fin = weakref.finalize(self, _close_loader, ptr, pins)
        _LIVE.add(self)

    def close(self) -> None:
        if self.ptr is not None:
            self.ptr = None
            self._fin()


class _Lease:
    """The owner of the slot memory that one lent host batch's views share: each view's buffer
    holds it (torch.frombuffer keeps the buffer as long as a tensor uses the memory, also a
    row or slice cut from it), so it lives exactly as long as some tensor views that memory.
    While the batch is lent it holds the loader's handle (a collected Loader's slots live on);
    a batch given back while its lease lives is given back with dlc_loader_keep(): the slot
    gets new memory, and the lease owns the old, freed when the last view dies."""

    __slots__ = ("handle", "__weakref__")

    def __init__(self, handle):
        self.handle = handle

    def own(self, memory):
        """Take @p memory (from dlc_loader_keep()), freed when this lease dies."""
        self.handle = None
        # Not at exit: tensors may outlive the finalizers that run then.
        weakref.finalize(self, lib.dlc_loader_kept_free, memory).atexit = False


def _view(ptr, dtype_code, shape, owner):
    """A torch tensor over C memory at @p ptr, without a copy; it keeps @p owner alive."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0 or not ptr:
        # torch.frombuffer refuses an empty buffer; an empty tensor views nothing anyway.
        return torch.empty(shape, dtype=_WIDEN.get(dtype_code, _TORCH_DTYPE[dtype_code]))
    buf = (ctypes.c_char * (numel * _ITEMSIZE[dtype_code])).from_address(ptr)
    buf._owner = owner
    t = torch.frombuffer(buf, dtype=_TORCH_DTYPE[dtype_code], count=numel).view(shape)
    if dtype_code in _WIDEN:
        # Reinterpret the int16 view as the unsigned values it holds, in a wider type.
        t = t.to(_WIDEN[dtype_code]) & 0xFFFF
    return t


def _own(ptr, dtype_code, shape):
    """A tensor of its own holding a copy of the C memory at @p ptr (the small per-sample
    arrays: a few KB a batch, so that keeping them is always safe)."""
    return _view(ptr, dtype_code, shape, None).clone()


def _default_threads():
    # One process per GPU is the usual layout; giving each of them every core
    # would oversubscribe the node, so share the cores among local ranks.
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    local = _stream.default_cache_ranks()
    return max(1, cores // max(1, local))


def _channels(value, name):
    """mean or std: one number for every channel, or one per channel (1 to 4)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (str, bytes)):
        # "123" iterated as 1.0, 2.0, 3.0.
        raise ValueError("%s must be a number or 1 to 4 numbers (one per channel), got %r"
                         % (name, value))
    try:
        vals = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ValueError("%s must be a number or 1 to 4 numbers (one per channel), got %r"
                         % (name, value)) from None
    if not 1 <= len(vals) <= 4:
        raise ValueError("%s must have 1 to 4 values (one per channel), got %d"
                         % (name, len(vals)))
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        raise ValueError("%s must be finite, got %r" % (name, value))
    return vals


def _crop_hw(crop, name):
    if isinstance(crop, numbers.Integral) and not isinstance(crop, bool):
        h = w = crop
    else:
        try:
            h, w = crop
        except (TypeError, ValueError):
            raise ValueError("%s must be an int or (height, width), got %r"
                             % (name, crop)) from None
    return _uint(h, name + " height", 1, 65535), _uint(w, name + " width", 1, 65535)


def _variable_options(variable):
    """Loader(variable=...) as [(name, dlc_variable_mode, max_len)]."""
    if variable is None:
        return []
    if not isinstance(variable, dict):
        raise ValueError("variable must be a dict {field: 'pad' | 'offsets' | ('pad_to', n)}, "
                         "got %r" % (variable,))
    out = []
    for name, mode in variable.items():
        if not isinstance(name, str):
            raise ValueError("variable: field names are str, got %r" % (name,))
        max_len = 0
        if isinstance(mode, (tuple, list)) and len(mode) == 2 and mode[0] == "pad_to":
            max_len = _uint(mode[1], "variable[%r] pad_to length" % name, 1, 1 << 24)
            mode = "pad_to"
        elif isinstance(mode, dict):
            # C's dlc_field_option as a dict (mode, max_len): checked as ('pad_to', n) is
            # (max_len 2**32 + 3 was 3 to C, True was 1).
            extra = set(mode) - {"mode", "max_len"}
            if extra:
                raise ValueError("variable[%r] reads 'mode' and 'max_len', not %s"
                                 % (name, ", ".join(sorted(map(repr, extra)))))
            if mode.get("mode") == "pad_to":
                max_len = _uint(mode.get("max_len"), "variable[%r] max_len" % name, 1, 1 << 24)
            elif mode.get("max_len", 0) not in (0, None):
                raise ValueError("variable[%r]: max_len is for mode 'pad_to', not %r"
                                 % (name, mode.get("mode")))
            mode = mode.get("mode")
        if not isinstance(mode, str) or mode not in _VARIABLE or \
                (mode == "pad_to" and not max_len):
            raise ValueError("variable[%r] must be 'pad', 'offsets' or ('pad_to', n), got %r"
                             % (name, variable[name]))
        out.append((name, _VARIABLE[mode], max_len))
    return out


def _pair(value, name):
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a pair (lo, hi), got %r" % (name, value)) from None
    # The C loader's bound on hi (its float math): said here rather than hidden behind its
    # "must satisfy 0 < lo <= hi" for (1e30, 1e30).
    if not (0 < a <= b <= 1e6):
        raise ValueError("%s must satisfy 0 < lo <= hi <= 1e6, got %r" % (name, value))
    return a, b


class Loader:
    """Batches of a dlcache store as torch tensors, like a torch DataLoader.

    ``for images, labels in Loader(path, batch_size=256): ...``

    Each epoch visits every record once in an order that is a pure function
    of (seed, epoch, rank, world_size); with several ranks the epoch is split
    like torch's DistributedSampler (padded by repeating the first samples,
    or cut with drop_last). Augmentation (crop, flip) is decided by the same
    function, so the number of threads never changes an output byte.

    Args:
        path: a store file, or a store set's directory, made by ``dlcache.build``,
            ``dlcache.write`` or ``cachebuild``; or the URL (``s3://``, ``gs://``,
            ``http(s)://``) of a store set that ``cachewarm push`` uploaded, streamed
            through a local cache of its shards (see cache_dir).
        batch_size: samples per batch.
        shuffle: a new permutation per epoch (False: records in order).
        sampler: the epoch's order: "shuffle" (the default), "sequential" (the
            default with shuffle=False), or "windows": shards permuted per epoch
            and read in windows of ``window_shards`` shards whose records are
            fully permuted, ``streams`` streams interleaved (the order a URL is
            streamed in, and its default; the only one a URL takes).
        aug_repeats: repeated augmentation (torchvision's ``--ra-sampler --ra-reps
            N``, timm's ``--aug-repeats N``, DeiT's repeated_aug): 2..256 gives each
            record of the order to N consecutive positions, dealt to N ranks (or
            N samples of a batch with one rank), each drawing its own crop and ops.
            An epoch keeps its length, so it reads len / N distinct records, a new
            subset each epoch. None or 1: off. Not for a mixture or a URL.
        window_shards: with "windows": shards whose records are shuffled
            together (1..4095).
        streams: with "windows": streams interleaved; None = world_size. The
            order depends on it: keep it when resuming under another world size
            (state_dict() records it).
        cache_dir: for a URL, required: the local folder that holds shards
            while they are read, shared by the ranks and jobs of a node.
            Ignored for a local path, like the other streaming arguments.
        cache_limit: the most bytes cache_dir may hold, an int or a size
            such as "50GB", "500MiB", "10G" (kB, MB, GB: powers of 1000; KiB,
            MiB, GiB and K, M, G: powers of 1024, as every tool's sizes);
            None = no limit. Checked at open: too small for
            the windows raises InvalidArgumentError naming the bytes needed
            (``dlcache.plan()`` says them beforehand).
        cache_ranks: processes of this node sharing cache_dir, each needing its
            windows; None = $LOCAL_WORLD_SIZE (torchrun sets it), else 1.
        downloads: shards this process downloads at once.
        endpoint, region: of S3 or GCS ("http://127.0.0.1:9000"); None = from
            the environment (AWS_ENDPOINT_URL_S3, AWS_REGION...).
        trace: a file to write the loader's timeline to at close (Chrome
            trace-event JSON for Perfetto or chrome://tracing: one track per
            thread, one span per batch stage); None = $DLCACHE_TRACE, or none.
            Each wait in the loop is also a torch.profiler range "dlcache.next".
        trace_batches: spans the trace keeps per thread, the last ones (256).
        timeout: seconds a request may move less than 1 KiB/s (or take to
            connect) before it is cut and tried again, 0.1 to 86400; None = 30
            (10 to connect).
        retries: attempts of a request after its first, 0..1000 (0 fails
            fast at the first error); None = 8. Each retry is a notice on the
            "dlcache" logger (logging), not a warning.
            With both small, a dead endpoint fails the loader within about
            timeout * (retries + 1) seconds; close() and Ctrl-C stop the
            downloads at once whatever they are.
        seed: seed of the order and of the augmentation.
        drop_last: drop the last short batch (and cut the epoch to a multiple
            of world_size instead of padding it).
        crop: output size, an int or (height, width); None = the store's size.
        random_resized_crop: None/False for a plain crop, True for torchvision's
            RandomResizedCrop(scale=(0.08, 1), ratio=(3/4, 4/3)) resized to
            ``crop``, or a pair (scale, ratio) of pairs.
        random_crop: without random_resized_crop, True places the crop window
            uniformly at random (training), False takes the center (evaluation).
        flip: probability of a horizontal flip (0 for evaluation).
        dtype: "uint8" (pixels as stored, NHWC), "float32" or "float16"
            (``(x / 255 - mean) / std``, NCHW).
            "bfloat16" gives torch.bfloat16 images: the float32 values rounded
            to nearest even (numpy has no bfloat16: torch tensors only).
        mean, std: per channel on the 0..1 scale, float dtypes only; None =
            ImageNet's (0.485, 0.456, 0.406), (0.229, 0.224, 0.225).
        device: None or "cpu" for host tensors (views of the C loader's
            slots, see "Lifetime of a batch"). "cuda", "cuda:N" or a
            torch.device: every output arrives as a CUDA tensor on that GPU,
            with the same names, shapes, dtypes and bytes as on the host
            (float32 to the last bit, float16 and uint8 identical): images
            are copied as uint8 and converted to ``dtype`` on the GPU;
            labels, masks, boxes, arrays, scalars, NAME_lengths,
            NAME_offsets and indices are copied as they are. The tensors are
            allocated by torch (its caching allocator) and are the caller's:
            they stay valid as long as they are referenced, across later
            batches and after close(). They are filled on torch's *current*
            stream of that device at the time the batch is requested
            (``torch.cuda.current_stream(device)``, also a non-default one
            set with ``torch.cuda.stream(s)``): work queued on that stream
            afterwards sees them complete, and nothing waits on the host.
            Using them on another stream needs the usual
            ``other.wait_stream(current)``. Two backends do this
            (``Loader.device_backend``): "plugin", the C library's own CUDA
            path (libdlcache_cuda.so: page-locked slots, a copy thread,
            conversion kernels), when dlc_cuda_probe() says it can run; else
            "torch", the same through torch's CUDA runtime (slots
            page-locked with cudaHostRegister, copies on a side stream,
            conversion with torch operations), with a warning that says why
            once. $DLCACHE_DEVICE_BACKEND=torch|plugin forces one. Without
            CUDA in torch, a CUDA device is a ValueError here.
        memory_format: the memory of float images on a CUDA device:
            torch.contiguous_format (default: [N, C, H, W] contiguous) or
            torch.channels_last (the same logical [N, C, H, W], NHWC memory:
            ``x.is_contiguous(memory_format=torch.channels_last)``; view
            groups [N, K, C, H, W] over [N, K, H, W, C] memory). It never
            changes shapes, and does not apply to uint8 images, which are
            [N, H, W, C] as on the host (already channels-last memory:
            ``x.permute(0, 3, 1, 2)`` is the channels_last NCHW tensor,
            free), nor to masks (uint8 NHWC). Host float batches are NCHW
            only: channels_last with a float dtype needs a CUDA device.
        rank, world_size: this process's shard; default to torch.distributed's
            when it is initialized, else to $RANK and $WORLD_SIZE, else 0 and 1.
        threads: worker threads of the C loader; None = the cores available
            divided by $LOCAL_WORLD_SIZE; "auto": start with 2 and, while the
            loop waits a share w of its step and the workers wait for no read,
            go to about n / (1 - w) workers, at most doubling (up to that
            many); give one back at a time when they idle (stats()["threads"]
            says how many work now; docs/WAITING.md). "auto" in any case.
        prefetch: batches prepared ahead (slots of the ring), 1..1024; None = the C
            default (4).
        verify: "off", "first" (check each record's checksum the first time
            it is read) or "always".
        on_corrupt: "replace" (a record that fails its check is replaced by a
            deterministically chosen good one and counted in stats()) or
            "fail" (iteration raises CorruptError naming the record).
        return_indices: also yield the store record number of each sample.
        fields: names of the store's fields to load (None: every field).
        variable: how fields of varying length go into a batch, by name:
            "pad" (zero-padded to the longest of the batch, the default),
            ("pad_to", n) (padded or cut to n), or "offsets" (end to end);
            {"mode": "pad_to", "max_len": n} is ("pad_to", n) as C's
            dlc_field_option says it. Bytes fields always come as "offsets". The classes of boxes
            follow their boxes' mode unless given their own.
        views: view groups, a list of dicts (name, count, crop, augment,
            scale, ratio, flip): ``count`` differently augmented crops of
            every image, output ``IMAGE_NAME`` of shape [N, count, ...].
        color_jitter: with grayscale, blur, solarize, auto_augment,
            auto_augment_options and random_erasing, the per-sample ops,
            drawn per view after its crop and flip as a pure function of
            (seed, epoch, rank, world size, position, view), applied to the
            uint8 view before the conversion (so also on a CUDA device), in
            this order: the policy, color jitter, grayscale, blur, solarize;
            then RandomErasing on the normalized output (with device=, on
            the GPU after the conversion: the CUDA plugin's; the torch
            backend refuses it for float dtypes).
            ``color_jitter=(b, c, s, h)`` as torchvision's ColorJitter (a
            number x is (1 - x, 1 + x), hue (-x, x); a pair is a range), or
            a dict with those names and ``p`` (RandomApply); ``grayscale=p``;
            ``blur=dict(p=1.0, sigma=(0.1, 2.0), kernel_size=k)``;
            ``solarize=p`` or ``dict(p=0.5, threshold=128)``;
            ``auto_augment="trivial_augment_wide" | "rand_augment" |
            "auto_augment_imagenet"`` with ``auto_augment_options={"num_ops":
            2, "magnitude": 9, "num_magnitude_bins": 31, "mstd": 0.5,
            "fill": 0}`` (mstd: timm's magnitude noise), or timm's own
            RandAugment as its config string, ``auto_augment="rand-m9-mstd0.5-inc1"``
            (m, n, p, mstd, mmax, inc; options: fill); ``random_erasing=p``
            or ``dict(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0 |
            "random" | v | (v1, v2, v3))``. The same keys in a ``views``
            entry replace the Loader's for that group (None turns one off).
        return_params: each batch (a dict) also holds what each view drew:
            ``params_box`` (int32 [N, 4] top, left, height, width of the crop
            in the stored image), ``params_flip`` (uint8 [N]),
            ``params_ops`` (int32 [N, 16, 2]: op id, -1 after the last, and
            flags), ``params_args`` (float32 [N, 16, 8]), ``params_magnitude``
            (float32 [N, 16]) and ``params_erase`` (int32 [N, 4], zeros when
            not erased); ``_NAME`` after each and a view dimension for view
            groups. ``Loader.params_ops(batch, i)`` turns a sample's ops
            into ``(name, kwargs)`` for ``dlcache.ops.apply``.
        as_dict: yield dicts of tensors keyed by output name. None (default):
            dicts unless the batch holds exactly one image and the label
            (then ``(images, labels)`` as before); False insists on the pair.
        debug_poison: fill the private copies of batches given back with 0xFF
            (see "Lifetime of a batch"); None = $DLCACHE_DEBUG_POISON.
        weights, samples_per_epoch, label_offsets, return_source: a mixture,
            when ``path`` is a list of stores and sets (docs/MIXTURES.md): each
            source walks its own shuffled passes, interleaved by ``weights``
            (default equal, not by size) so that every batch holds each source's share
            within 1 or 2 samples; an epoch is ``samples_per_epoch`` samples
            (default: the sources' records summed); source i's labels are moved
            by ``label_offsets[i]``. Batches as dicts gain "source" (int64
            [N], the index of each sample's source) and "indices" is the
            record number within the source; tuples gain the source as a last
            element with return_source=True, and without it leave the source
            out (the Loader warns once). A list of one path read whole
            (no samples_per_epoch) is the plain loader of it, byte for byte.
            state_dict() holds every source's
            pass, and load_state_dict() continues them under other weights or
            sources.
        transform: a callable applied to each batch (the tuple or dict) last,
            after the device copy when device is set, in the loop's thread;
            what it returns is what the loop gets.
        preset: "train" (crop=224, random_resized_crop=True, flip=0.5, dtype
            float32 on the host and float16 on a CUDA device: normalized NCHW)
            or "eval" (crop=224, random_crop=False, flip=0: the center, same
            dtype, shuffle=False: records in order); the arguments given win
            over it. On a store built at 256
            "eval" is torchvision's resize 256 + center crop 224.
        seq_len: on a token store (``cachebuild --tokens``, ``write_tokens``),
            packed sequences of seq_len tokens: Loader() then returns a
            ``dlcache.tokens.TokenLoader`` yielding dicts of input_ids, labels
            and position_ids (docs/TOKENS.md); dtype= is "int64" (default) or
            "int32" there.
        packing: with seq_len, "concat" (one concatenation of the documents
            cut into windows) or "best_fit" (whole documents placed by best-fit
            decreasing, padded with pad_id).
        document_mask: with seq_len, add cu_seqlens and max_seqlen, and label
            -100 where the target lies in the next document.
        pad_id: with seq_len and "best_fit", the token id of the padding.
        mixup, cutmix, mix_prob, switch_prob, label_smoothing, num_classes:
            MixUp / CutMix per batch as timm's Mixup (Beta alphas; 0 = off),
            the probability of mixing a batch and of CutMix among them, and
            soft targets: the label becomes float32 [N, num_classes]
            (default: the store's labels), label-smoothed. Float dtypes only;
            on a GPU the images are mixed there. ``mixup_params(epoch, i)``
            tells how batch i was mixed. See docs/RECIPES.md.
        resolution, max_resolution: progressive resizing: the output size per
            epoch, an int or (height, width), a list per epoch, or a function
            of the epoch (which needs max_resolution, the largest size: the
            slots are sized for it at open). ``set_resolution(h, w)`` sets a
            size from the next epoch on; state_dict() keeps it.

    Every argument after batch_size is keyword-only. A Loader pickles (and
    copy.deepcopy()s) as its arguments and state_dict(): the copy opens at its
    first use and yields the batches this one yields next. It has the
    attributes frameworks read of a DataLoader (dataset, sampler, drop_last,
    num_workers=0 with the threads in ``threads``, pin_memory, collate_fn,
    prefetch_factor, persistent_workers) and ``as_iterable_dataset()``.

    Iterating yields ``(images, labels)`` or ``(images, labels, indices)``:
    images uint8 [N, H, W, C] or float [N, C, H, W], labels and indices int64 [N].
    With other fields, a dict ``{name: tensor}`` in the field's own dtype, with
    ``NAME_lengths`` (int64 [N]) beside a padded field and ``NAME_offsets``
    (int64 [N + 1]) beside an "offsets" field and a bytes field, and
    ``indices`` with return_indices.

    **Lifetime of a batch.** On the host, images, masks, arrays and bytes are
    views of the C loader's batch slot, made without copying (torch.frombuffer
    over the slot); labels, scalar fields, NAME_lengths, NAME_offsets and
    indices are tensors of their own (a few KB a batch). A batch you still
    hold when its slot is about to be refilled (``batches = list(loader)``,
    an evaluation loop that appends each batch, a batch kept across epochs or
    ``close()``, or a view cut from it: ``first = images[0]``) is detected:
    its batch is given back with its memory, which the slot no longer uses
    and which is freed when the last tensor viewing it dies (so a row kept
    alone holds a whole batch's memory: ``images[0].clone()`` holds only the
    row). Your tensors are not touched (autograd graphs that saved them stay
    valid). The usual loop, which keeps nothing, allocates nothing.
    ``debug_poison=True`` (or $DLCACHE_DEBUG_POISON=1) shows views that
    outlive their batch: batches then come in private copies that are filled
    with 0xFF bytes (NaN for float outputs) when the batch is given back, and
    never reused (a copy per batch: for debugging only). The batch held over
    takes one slot beyond ``prefetch``; with prefetch=1 there is none, and a
    batch still named by the loop's variables when the next one is asked for
    is given back with its memory. CUDA tensors (``device="cuda"``) are not lent: they are the
    caller's.

    Resuming: ``state_dict()`` at any point (also mid-epoch) and
    ``load_state_dict()`` into a fresh Loader continue the stream exactly,
    also under another world size (the remaining samples of the epoch are then
    split among the new ranks). ``set_epoch(e)`` starts epoch e at the next
    ``iter()``; without it each new ``iter()`` after a finished or abandoned
    epoch starts the following epoch.

    The GIL is released while the C library works; the Python side does a
    constant amount of work per batch, none per sample.
    """

    def __init__(self, path: "Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]",
                 batch_size: int, *,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 crop: "Union[None, int, Tuple[int, int]]" = None,
                 random_resized_crop: "Union[None, bool, tuple]" = None, flip: float = 0.5,
                 dtype: str = "uint8", mean: "Optional[Sequence[float]]" = None,
                 std: "Optional[Sequence[float]]" = None,
                 device: "Union[None, str, torch.device]" = None, rank: "Optional[int]" = None,
                 world_size: "Optional[int]" = None,
                 threads: "Union[None, int, str]" = None,
                 prefetch: "Optional[int]" = None, verify: str = "off",
                 on_corrupt: str = "replace", return_indices: bool = False,
                 random_crop: bool = True, fields: "Optional[Sequence[str]]" = None,
                 variable: "Optional[Dict[str, Any]]" = None,
                 views: "Optional[List[Dict[str, Any]]]" = None,
                 as_dict: "Optional[bool]" = None,
                 memory_format: "Optional[torch.memory_format]" = None,
                 debug_poison: "Optional[bool]" = None, sampler: "Optional[str]" = None,
                 aug_repeats: "Optional[int]" = None, window_shards: int = 4, streams: "Optional[int]" = None,
                 cache_dir: "Union[None, str, os.PathLike]" = None,
                 cache_limit: "Union[None, int, str]" = None,
                 cache_ranks: "Optional[int]" = None, downloads: int = 2,
                 endpoint: "Optional[str]" = None, region: "Optional[str]" = None,
                 trace: "Union[None, str, os.PathLike]" = None,
                 trace_batches: "Optional[int]" = None,
                 weights: "Optional[Sequence[float]]" = None,
                 samples_per_epoch: "Optional[int]" = None,
                 label_offsets: "Optional[Sequence[int]]" = None,
                 return_source: bool = False,
                 timeout: "Optional[float]" = None, retries: "Optional[int]" = None,
                 color_jitter: "Union[None, Sequence[Any], Dict[str, Any]]" = None,
                 grayscale: "Optional[float]" = None,
                 blur: "Optional[Dict[str, Any]]" = None,
                 solarize: "Union[None, float, Dict[str, Any]]" = None,
                 auto_augment: "Optional[str]" = None,
                 auto_augment_options: "Optional[Dict[str, Any]]" = None,
                 random_erasing: "Union[None, float, Dict[str, Any]]" = None,
                 return_params: bool = False,
                 mixup: float = 0.0, cutmix: float = 0.0, mix_prob: float = 1.0,
                 switch_prob: float = 0.5, label_smoothing: float = 0.0,
                 num_classes: "Optional[int]" = None,
                 resolution: "Union[None, int, Tuple[int, int], Sequence[Any], Any]" = None,
                 max_resolution: "Union[None, int, Tuple[int, int]]" = None,
                 transform: "Optional[Callable[[Any], Any]]" = None,
                 preset: "Optional[str]" = None,
                 seq_len: "Optional[int]" = None, packing: str = "concat",
                 document_mask: bool = False, pad_id: int = 0,
                 rows_per_epoch: "Optional[int]" = None) -> None:
        if packing != "concat" or document_mask or pad_id != 0 or rows_per_epoch is not None:
            # seq_len= makes Loader() a TokenLoader in __new__; here it was not given.
            raise ValueError("packing=, document_mask=, pad_id= and rows_per_epoch= are for a "
                             "token store's packed sequences: give seq_len= too "
                             "(docs/TOKENS.md)")
        # The arguments as the caller gave them (Loader.__new__ bound them): what the Loader
        # pickles as, with its state; a preset fills in only the arguments not given.
        given = self.__dict__.pop("_given", None)
        self._args = _without_secrets(given if given is not None
                                      else {"path": path, "batch_size": batch_size})
        if sampler is not None and not isinstance(sampler, str):
            raise TypeError("dlcache.Loader() takes no torch Sampler: sampler= is 'shuffle', "
                            "'sequential' or 'windows' here. dlcache orders and shards the "
                            "samples itself (seed=, rank=/world_size= like DistributedSampler; "
                            "loader.set_epoch(e) or loader.sampler.set_epoch(e) each epoch; "
                            "weights= for a mixture of stores)")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be a callable taking a batch and returning one, "
                            "got %r" % (transform,))
        self._transform = transform
        preset_shuffle = False  # shuffle= is the preset's, not the caller's
        if preset is not None:
            chosen = _preset(preset, device)
            have = set(given) if given is not None else set()
            crop = chosen["crop"] if "crop" not in have else crop
            random_resized_crop = chosen["random_resized_crop"] \
                if "random_resized_crop" not in have else random_resized_crop
            random_crop = chosen["random_crop"] if "random_crop" not in have else random_crop
            flip = chosen["flip"] if "flip" not in have else flip
            dtype = chosen["dtype"] if "dtype" not in have else dtype
            if "shuffle" not in have and "sampler" not in have:
                shuffle = chosen["shuffle"]
                preset_shuffle = True
        # Flags are bools: shuffle="False" shuffled, as any non-empty string is true.
        shuffle, drop_last = _flag(shuffle, "shuffle"), _flag(drop_last, "drop_last")
        random_crop = _flag(random_crop, "random_crop")
        as_dict = None if as_dict is None else _flag(as_dict, "as_dict")  # None: decided later
        return_indices = _flag(return_indices, "return_indices")
        self._preset = preset
        self._handle = None  # type: Any
        self._feed = None  # type: Any
        # Held while a next() is in C or lends a batch (_take()): close() from another thread
        # (or a signal handler) waits for it, at most a slice. Reentrant for the handler's sake.
        self._next_lock = threading.RLock()
        self._closed = False
        self._info = None
        # A list of paths is a mixture: its first source gives the schema the others must have.
        self._mix = _Mix.make(path, weights, samples_per_epoch, label_offsets, return_source)
        if self._mix is not None:
            path = self._mix.paths[0]
        self._path = _fspath(path, "path")
        self._url = _stream.is_url(self._path)
        # A mixture streams its URL sources: the streaming options are theirs, and next() waits
        # for their shards as a streamed Loader's does.
        stream_path = self._path
        if self._mix is not None:
            urls = [p for p in self._mix.paths if _stream.is_url(p)]
            stream_path = urls[0] if urls else self._path
        first_url = self._url
        self._url = _stream.is_url(stream_path)
        ctx = "dlcache.Loader(%s)" % redact(self._mix.name if self._mix is not None
                                            else os.fsdecode(self._path))
        # Before anything is opened: a CUDA device that torch cannot use is an error now.
        self._device = _device.parse_device(device)
        channels_last = _device.parse_memory_format(memory_format)
        cfg = L.LoaderConfig()
        lib.dlc_loader_config_init(ctypes.byref(cfg))
        cfg.batch_size = _uint(batch_size, "batch_size", 1)
        cfg.drop_last = 1 if drop_last else 0
        if preset_shuffle and not shuffle and self._url and self._mix is None:
            raise ValueError("%s: preset=%r reads in record order (shuffle=False), which a URL "
                             "cannot give: it is streamed in shard windows, which shuffle. Pass "
                             "shuffle=True to evaluate every sample in the windows' order "
                             "(return_indices=True gives their indices), or "
                             "`cachewarm` the set to a local file for record order"
                             % (ctx, preset))
        cfg.sampler = self._sampler(sampler, shuffle, self._url and self._mix is None, ctx)
        cfg.seed = _uint(seed, "seed", 0, 2**64 - 1)
        self._seed = seed
        if aug_repeats is not None:
            # A mixture or shard windows are refused by the C loader's open, naming why.
            cfg.aug_repeats = _uint(aug_repeats, "aug_repeats", 1, 256)
        # Kept alive until dlc_loader_open() returns: the C loader copies what it needs.
        keep = []  # type: List[Any]
        _stream.apply(cfg, stream_path, keep, ctx, window_shards=window_shards, streams=streams,
                      cache_dir=cache_dir, cache_limit=cache_limit, cache_ranks=cache_ranks,
                      downloads=downloads, endpoint=endpoint, region=region, log=_LOG_CB,
                      timeout=timeout, retries=retries)
        if trace is not None:
            keep.append(_fspath(trace, "trace"))
            cfg.trace = keep[-1]
        if trace_batches is not None:
            cfg.trace_batches = _uint(trace_batches, "trace_batches", 1, 1 << 20)
        self._first_info = None
        if first_url:
            # The schema and labels of a streamed set come from its index (fetched into
            # cache_dir; no shard is downloaded), as the C loader will open it.
            self._first_info = _stream.read_info(self._path, cfg, ctx)
            if self._mix is None:
                self._info = self._first_info
            schema = {"fields": self._first_info["fields"]}
        else:
            schema = _read_schema(self._path)

        if crop is None:
            cfg.crop_h = cfg.crop_w = 0
        elif isinstance(crop, numbers.Integral) and not isinstance(crop, bool):
            cfg.crop_h = cfg.crop_w = _uint(crop, "crop", 1, 65535)
        else:
            try:
                h, w = cast(Tuple[int, int], crop)
            except (TypeError, ValueError):
                raise ValueError("crop must be an int, (height, width) or None, got %r"
                                 % (crop,)) from None
            cfg.crop_h = _uint(h, "crop height", 1, 65535)
            cfg.crop_w = _uint(w, "crop width", 1, 65535)

        if random_resized_crop is None or random_resized_crop is False:
            cfg.augment = L.AUGMENT_RANDOM_CROP if random_crop else L.AUGMENT_CENTER_CROP
        else:
            cfg.augment = L.AUGMENT_RANDOM_RESIZED_CROP
            if random_resized_crop is not True:
                if isinstance(random_resized_crop, dict):
                    scale = random_resized_crop.get("scale", (cfg.rrc_scale[0], cfg.rrc_scale[1]))
                    ratio = random_resized_crop.get("ratio", (cfg.rrc_ratio[0], cfg.rrc_ratio[1]))
                else:
                    try:
                        scale, ratio = random_resized_crop
                    except (TypeError, ValueError):
                        raise ValueError("random_resized_crop must be None, True or "
                                         "(scale, ratio), got %r" % (random_resized_crop,)) from None
                scale = _pair(scale, "random_resized_crop scale")
                if scale[1] > 1:
                    raise ValueError("random_resized_crop scale must lie in (0, 1], got %r"
                                     % (scale,))
                cfg.rrc_scale[0], cfg.rrc_scale[1] = scale
                cfg.rrc_ratio[0], cfg.rrc_ratio[1] = _pair(ratio, "random_resized_crop ratio")

        if isinstance(flip, bool):
            flip = 0.5 if flip else 0.0
        try:
            flip = float(flip)
        except (TypeError, ValueError):
            raise ValueError("flip must be a probability in [0, 1], got %r" % (flip,)) from None
        if not 0.0 <= flip <= 1.0:
            raise ValueError("flip must be a probability in [0, 1], got %r" % (flip,))
        cfg.flip_prob = flip

        key = dtype
        if isinstance(dtype, str):
            key = dtype.lower()
        if key not in _DTYPES:
            raise ValueError("dtype must be 'uint8', 'float32', 'float16' or 'bfloat16', got %r"
                             % (dtype,))
        cfg.dtype = _DTYPES[key]
        if cfg.dtype == L.DTYPE_UINT8 and (mean is not None or std is not None):
            raise ValueError("mean and std apply to the float dtypes only, "
                             "not to 'uint8' (pixels are delivered as stored)")
        # MixUp / CutMix, soft targets, progressive resizing (_batchaug.py).
        self._resolution = _batchaug.apply(
            cfg, mixup=mixup, cutmix=cutmix, mix_prob=mix_prob, switch_prob=switch_prob,
            label_smoothing=label_smoothing, num_classes=num_classes, resolution=resolution,
            max_resolution=max_resolution)
        self._soft = _batchaug.soft(cfg)
        self._res_now = (cfg.crop_h, cfg.crop_w) if self._resolution is not None else None
        self._res_next: "Optional[Tuple[int, int]]" = None
        if channels_last and cfg.dtype != L.DTYPE_UINT8 and self._device is None:
            raise ValueError("memory_format=torch.channels_last needs a CUDA device: host float "
                             "batches are NCHW (use x.contiguous(memory_format=...) yourself)")
        selected = self._select(schema, fields)
        # Values for channels that were not given would silently keep the defaults; one
        # value for every channel, or one per channel of every normalized image.
        channels = max([f["shape"][2] for f in selected
                        if f["kind"] == "image" and not f["mask"]] or [0])
        for arg, name in ((mean, "mean"), (std, "std")):
            if arg is None:
                continue
            vals = _channels(arg, name)
            if 1 < len(vals) != channels and channels:
                # Fewer would keep the defaults for the rest, more would be dropped; torch's
                # Normalize refuses both.
                raise ValueError("%s has %d values, but the store's images have %d channel%s: "
                                 "give one value, or one per channel"
                                 % (name, len(vals), channels, "s" if channels > 1 else ""))
            if len(vals) == 1:
                vals = vals * 4
            if name == "mean" and any(abs(v) > 1.0 for v in vals):
                raise ValueError("mean is on the 0..1 scale (ImageNet's is 0.485, 0.456, "
                                 "0.406), got %r" % (mean,))
            if name == "std" and any(v <= 0 for v in vals):
                raise ValueError("std must be positive, got %r" % (std,))
            dst = cfg.mean if name == "mean" else cfg.std
            for i, v in enumerate(vals):
                dst[i] = v

        if fields is not None:
            names = [f["name"].encode() for f in selected]
            keep.append((ctypes.c_char_p * len(names))(*names))
            cfg.fields, cfg.num_fields = keep[-1], len(names)
        opts = _variable_options(variable)
        # The classes of boxes follow their boxes' mode unless given their own: the two are
        # indexed together.
        named = {o[0] for o in opts}
        chosen = {f["name"] for f in selected}
        for f in selected:
            if f["boxes"] and f["name"] in named and f["classes"] in chosen - named:
                opts += [(f["classes"],) + o[1:] for o in opts if o[0] == f["name"]]
        if opts:
            arr = (L.FieldOption * len(opts))()
            for i, (name, mode, max_len) in enumerate(opts):
                arr[i].name, arr[i].variable, arr[i].max_len = name.encode(), mode, max_len
            keep.append(arr)
            cfg.field_options, cfg.num_field_options = arr, len(opts)
        if views is not None:
            arr = self._views(views, cfg)
            keep.append(arr)
            cfg.views, cfg.num_views = arr, len(arr)
        aug = _augment.specs(
            {"color_jitter": color_jitter, "grayscale": grayscale, "blur": blur,
             "solarize": solarize, "auto_augment": auto_augment,
             "auto_augment_options": auto_augment_options, "random_erasing": random_erasing},
            views, self._device is not None, cfg.dtype != L.DTYPE_UINT8,
            tuple(cfg.mean[i] for i in range(3)), channels)
        if aug is not None:
            keep.append(aug)
            cfg.augment_specs, cfg.num_augment_specs = aug, len(aug)
        if not isinstance(return_params, bool):
            raise ValueError("return_params must be True or False, got %r" % (return_params,))
        cfg.return_params = 1 if return_params else 0
        pair = self._is_pair(selected, schema, views) and not return_params
        if as_dict is None:
            as_dict = not pair
        elif not as_dict and not pair:
            raise ValueError("as_dict=False: the batches hold %s, not exactly one image and the "
                             "label" % ", ".join(f["name"] for f in selected))
        self._as_dict = bool(as_dict)
        self._checked_names = False
        if self._mix is not None and len(self._mix.paths) > 1 and not self._as_dict \
                and not self._mix.return_source:  # one source: its index is always 0
            warnings.warn("dlcache.Loader: this mixture yields (images, labels) tuples, which "
                          "leave out each sample's source: pass as_dict=True (batches gain "
                          "\"source\") or return_source=True (tuples gain it last)",
                          UserWarning, stacklevel=3)

        r, w = _stream.default_rank_world(rank, world_size)
        cfg.world_size = _uint(w, "world_size", 1)
        cfg.rank = _uint(r, "rank", 0, cfg.world_size - 1)
        if isinstance(threads, str) and threads.strip().lower() == "auto":
            # The C loader tunes the count, up to the cores divided by LOCAL_WORLD_SIZE.
            cfg.auto_threads = 1
            cfg.threads = 0
        elif isinstance(threads, str) or isinstance(threads, bool):
            raise ValueError("threads must be an integer or 'auto', got %r" % (threads,))
        else:
            cfg.threads = _uint(_default_threads() if threads is None else threads, "threads", 1,
                                4096)
        if prefetch is not None:
            cfg.prefetch = _uint(prefetch, "prefetch", 1, L.MAX_PREFETCH)
        if verify not in _VERIFY:
            raise ValueError("verify must be 'off', 'first' or 'always', got %r" % (verify,))
        cfg.verify = _VERIFY[verify]
        if on_corrupt not in _CORRUPT:
            raise ValueError("on_corrupt must be 'replace' or 'fail', got %r" % (on_corrupt,))
        cfg.on_corrupt = _CORRUPT[on_corrupt]

        cfg.log = _LOG_CB
        if debug_poison is None:
            env = os.environ.get("DLCACHE_DEBUG_POISON", "").strip().lower()
            if env not in ("", "0", "1", "false", "true", "no", "yes", "off", "on"):
                raise ValueError("$DLCACHE_DEBUG_POISON is %r: 1 (on) or 0 (off)"
                                 % os.environ["DLCACHE_DEBUG_POISON"])
            debug_poison = env in ("1", "true", "yes", "on")  # "no" was on
        self._poison = _flag(debug_poison, "debug_poison")
        self._return_indices = bool(return_indices)
        self._config = cfg
        self._pair_names = None
        if pair:
            self._pair_names = (
                next(f["name"] for f in selected if f["kind"] == "image"),
                next(f["name"] for f in selected if f["label"]))

        cfg.device = -1
        # Host batches: the caller may hold two at once, so that the batch still bound to the
        # loop's variables when the next one is asked for is not given back until the call
        # after, when it is known whether the caller kept it (see _settle()).
        self._held = collections.deque()  # type: Deque[Any]
        # Loader.report(): the copies of batches the loop kept past their turn (only Python sees
        # them), cumulative, and their total when each batch was yielded.
        self._kept_s = 0.0
        self._kept_n = 0
        self._kept_marks = collections.deque(maxlen=1024)  # type: Deque[Tuple[float, int]]
        self._batches = [L.Batch(), L.Batch()]
        self._prefetch = int(cfg.prefetch)  # as given: .prefetch leaves out the slot below
        if self._device is None and cfg.prefetch >= 2:
            # One slot more than prefetch: the batch held over does not eat into the batches
            # being prepared.
            cfg.max_lent = 2
            cfg.prefetch = min(cfg.prefetch + 1, L.MAX_PREFETCH)  # at the most, it shares one
        if self._device is None:
            self._open(cfg)
        else:
            self._open_device(cfg, schema, channels_last)
        try:
            self._check_resolutions()
        except BaseException:
            self._handle.close()
            raise
        h = self._handle.ptr
        self._len = int(lib.dlc_loader_batches_per_epoch(h))
        self._count = int(lib.dlc_loader_store_count(h))
        self._epoch = cfg.epoch
        self._pos = _FRESH
        self._pending_epoch = None  # type: Optional[int]
        self._yielded = 0  # type: Optional[int]
        self._gen = 0
        self._batch = L.Batch()  # the device feeds' own

    # torch DataLoader arguments that mean something else here, and what to use instead.
    _TORCH_ARGS = {
        "num_workers": "dlcache uses threads= (worker threads of the C loader; default: the "
                       "cores divided by $LOCAL_WORLD_SIZE), not worker processes",
        "pin_memory": "pinned memory is automatic with device= (device='cuda' page-locks the "
                      "slots and copies them asynchronously)",
        "prefetch_factor": "dlcache uses prefetch= (batches prepared ahead, not per worker)",
        "persistent_workers": "dlcache's threads live as long as the Loader",
        "collate_fn": "dlcache collates in C: batches come as (images, labels) or a dict of "
                      "tensors (as_dict=True); use transform= for your own step on each batch",
        "worker_init_fn": "there are no worker processes to set up (threads= sets the C "
                          "loader's threads; seed= sets the order and every augmentation)",
        "batch_sampler": "dlcache makes the batches itself: use batch_size=, drop_last=, "
                         "shuffle= or sampler='shuffle'|'sequential'|'windows', seed=, and "
                         "rank=/world_size= to shard",
        "generator": "dlcache's order and augmentations are a function of seed= (an int) and "
                     "the epoch, never of a torch.Generator's state",
        "multiprocessing_context": "there are no worker processes (threads= sets the C "
                                   "loader's threads)",
        "pin_memory_device": "pinned memory is automatic with device= (device='cuda:1' copies "
                             "to that GPU)",
        "dataset": "dlcache.Loader reads a store: give its path first (Loader(path, "
                   "batch_size, ...)); make one from a torch Dataset with "
                   "dlcache.write(dataset, path), or from an image folder with cachebuild",
    }

    def __new__(cls, *args, **kwargs):
        # Before __init__, whose bare "unexpected keyword argument" TypeError would not say
        # what to use instead.
        for name, why in cls._TORCH_ARGS.items():
            if name in kwargs:
                raise TypeError("dlcache.Loader() takes no %s=: %s" % (name, why))
        if kwargs.get("seq_len") is not None:
            # A token store's packed sequences (docs/TOKENS.md): another loader, same call.
            from .tokens import TokenLoader
            if isinstance(kwargs.get("dtype"), str):
                import torch
                names = {"int64": torch.int64, "int32": torch.int32}
                if kwargs["dtype"] not in names:
                    raise ValueError("dtype of packed sequences is 'int64' or 'int32', not %r"
                                     % kwargs["dtype"])
                kwargs = dict(kwargs, dtype=names[kwargs["dtype"]])
            return TokenLoader(*args, **kwargs)
        self = super().__new__(cls)
        try:
            # The arguments given, by name: what pickling keeps, and what a preset yields to.
            self._given = dict(_SIGNATURE.bind(*args, **kwargs).arguments)
        except TypeError:
            pass  # __init__ raises Python's own message
        return self

    # ------------------------------------------------------------ pickling
    def __reduce__(self):
        """A Loader pickles (and copy.deepcopy()s) as its arguments and its state_dict(), never
        its threads or memory: the copy opens at its first use and continues where this one
        is. Secrets in a URL (user:password, a signed query) are cut; credentials come from
        the environment again."""
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            return (_restore, lazy)
        if self._closed or self._handle is None or self._handle.ptr is None:
            raise ValueError("a closed dlcache.Loader cannot be pickled: its position went "
                             "with it (pickle it before close())")
        state = self.state_dict()
        if "mixture" in state:  # its sources' paths, as given: secrets cut here too
            state["mixture"] = dict(state["mixture"],
                                    paths=_no_secret(list(state["mixture"]["paths"])))
        return (_restore, (self._args, state, {"pending_epoch": self._pending_epoch},
                           type(self)))

    def __getattr__(self, name):
        # Only for what normal lookup did not find: an unpickled Loader opens at its first use.
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name.startswith("__"):
            raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))
        self._materialize()
        return getattr(self, name)

    def _materialize(self):
        args, state, extra, _ = self.__dict__.pop("_lazy")
        kw = dict(args)
        self._given = dict(args)
        self.__init__(kw.pop("path"), kw.pop("batch_size"), **kw)
        if state is not None:
            self.load_state_dict(state)
        if extra.get("pending_epoch") is not None:
            self.set_epoch(extra["pending_epoch"])

    def _open(self, cfg, pins=None):
        h = ctypes.c_void_p()
        # Ctrl-C stops the downloads of the open (a streamed set's index) at once.
        with _stream.interruptible():
            if self._mix is not None:
                rc = self._mix.open_rc(cfg, h)
            else:
                rc = lib.dlc_loader_open(self._path, ctypes.byref(cfg), ctypes.byref(h))
            if rc == L.DLC_OK:
                self._handle = _Handle(h.value, pins)  # owned before any KeyboardInterrupt
        check(rc, "dlcache.Loader(%s)" % redact(self._mix.name if self._mix is not None
                                                  else os.fsdecode(self._path)))
        if self._mix is not None:
            self._mix.opened(h.value)

    def _open_device(self, cfg, schema, channels_last):
        """Open the C loader for CUDA batches: the plugin's device path when it can run, else
        uint8 host batches that the torch backend page-locks, copies and converts."""
        dev = self._device
        backend, why = _device.choose_backend(dev.index)
        dtype = cfg.dtype
        args = (dev, dtype, channels_last, schema, cfg,
                self._return_indices or self._mix is not None)
        if backend == "plugin":
            feed = _device.make_feed("plugin", *args)
            cfg.device = dev.index
            cfg.device_layout = feed.layout()
            self._open(cfg)
            reason = ctypes.c_char_p()
            on = lib.dlc_loader_device(self._handle.ptr, ctypes.byref(reason))
            if on == dev.index:
                self._feed = feed
                return
            # Probed fine, yet off at open: the C loader said why; go on with torch's runtime.
            why = (reason.value or b"the device path is off").decode("utf-8", "replace")
            self._handle.close()
            self._handle = None
            if os.environ.get(_device.BACKEND_ENV, "").strip().lower() == "plugin":
                raise RuntimeError("%s=plugin, but the CUDA plugin is off for %s: %s"
                                   % (_device.BACKEND_ENV, dev, why))
        if dtype != L.DTYPE_UINT8 and cfg.num_augment_specs and any(
                cfg.augment_specs[i].erase_prob > 0 for i in range(cfg.num_augment_specs)):
            # The plugin erases the converted images on the GPU with the host's noise; the torch
            # backend converts with torch and has no such kernel.
            raise ValueError("random_erasing with device=%s and a float dtype runs in the CUDA "
                             "plugin (libdlcache_cuda.so), which is off here: %s" % (dev, why))
        _device.warn_torch_backend(why, dev, stacklevel=4)
        feed = _device.make_feed("torch", *args)
        cfg.device = -1
        cfg.dtype = L.DTYPE_UINT8  # converted on the GPU
        # ... and mixed there: the C loader makes uint8 batches with int64 labels.
        mix = _batchaug.take_mix(cfg)
        try:
            self._open(cfg, feed.pins)
            feed.register(self._handle.ptr)
        except BaseException:
            if self._handle is not None:
                self._handle.close()  # unregisters what was registered, then closes
            raise
        finally:
            cfg.dtype = dtype
            _batchaug.put_mix(cfg, mix)
        if mix is not None:
            label = next((i for i, f in enumerate(schema["fields"]) if f.get("label")), None)
            classes = mix["classes"] or int(lib.dlc_store_get_info(
                lib.dlc_loader_store(self._handle.ptr)).contents.num_labels)
            if label is None or not 2 <= classes <= 65536:
                self._handle.close()
                raise ValueError("mixup=, cutmix= and label_smoothing= need a label field and "
                                 "num_classes in 2..65536 (the store has %s)"
                                 % ("no label field" if label is None else "%d labels" % classes))
            feed.mix = (mix, classes, label,
                        lambda: (int(self._seed), int(cfg.rank), int(cfg.world_size)))
        self._feed = feed

    @staticmethod
    def _sampler(sampler, shuffle, url, ctx):
        """The dlc_sampler of Loader(sampler=..., shuffle=...); @p url: the path is streamed."""
        if sampler is None:
            if url:
                if not shuffle:
                    raise ValueError("%s: a URL is streamed in shard windows, which shuffle: "
                                     "shuffle=False is not available for it" % ctx)
                return L.SAMPLER_SHARD_WINDOWS
            return L.SAMPLER_SHUFFLE if shuffle else L.SAMPLER_SEQUENTIAL
        if sampler not in _SAMPLERS:
            raise ValueError("sampler must be one of %s, got %r"
                             % (", ".join(repr(k) for k in _SAMPLERS), sampler))
        if not shuffle and sampler != "sequential":
            raise ValueError("shuffle=False contradicts sampler=%r (sampler='sequential' reads "
                             "in order)" % (sampler,))
        if url and sampler != "windows":
            raise ValueError("%s: a URL is streamed in shard windows: sampler must be "
                             "'windows' (its default), got %r" % (ctx, sampler))
        return _SAMPLERS[sampler]

    @staticmethod
    def _select(schema, fields):
        """The schema entries of the fields to load, in schema order."""
        if fields is None:
            return list(schema["fields"])
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ValueError("fields must be a list of field names, got %r" % (fields,))
        have = [f["name"] for f in schema["fields"]]
        for name in fields:
            if name not in have:
                raise ValueError("fields: the store has no field %r (it has: %s)"
                                 % (name, ", ".join(have)))
        if len(set(fields)) != len(fields) or not fields:
            raise ValueError("fields must name each field once, got %r" % (fields,))
        return [f for f in schema["fields"] if f["name"] in fields]

    @staticmethod
    def _is_pair(selected, schema, views):
        """True when a batch holds exactly one image (one view) and the label."""
        if views is not None or len(selected) != 2:
            return False
        kinds = sorted((f["kind"], f["mask"], f["label"]) for f in selected)
        return kinds == [("image", False, False), ("int", False, True)]

    def _views(self, views, cfg):
        """Loader(views=[...]) as a dlc_view_spec array; defaults are the Loader's own crop,
        flip and random_resized_crop options."""
        if isinstance(views, dict) or not views:
            raise ValueError("views must be a non-empty list of dicts, got %r" % (views,))
        arr = (L.ViewSpec * len(views))()
        keys = {"name", "count", "crop", "augment", "scale", "ratio", "flip"} | set(_augment.KEYS)
        for i, v in enumerate(views):
            if not isinstance(v, dict) or "name" not in v:
                raise ValueError("views[%d] must be a dict with a 'name', got %r" % (i, v))
            unknown = set(v) - keys
            if unknown:
                raise ValueError("views[%d]: unknown keys %s (known: %s)"
                                 % (i, sorted(unknown), ", ".join(sorted(keys))))
            name = v["name"]
            if not isinstance(name, str) or not name or len(name) > 31 or \
                    not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
                raise ValueError("views[%d]: name must be 1 to 31 of [A-Za-z0-9_], got %r"
                                 % (i, name))
            sp = arr[i]
            sp.name = name.encode()
            sp.count = _uint(v.get("count", 1), "views[%d] count" % i, 1, 64)
            if "crop" in v:
                sp.crop_h, sp.crop_w = _crop_hw(v["crop"], "views[%d] crop" % i)
            elif cfg.crop_h and cfg.crop_w:
                sp.crop_h, sp.crop_w = cfg.crop_h, cfg.crop_w
            else:
                raise ValueError("views[%d] needs a crop (the Loader's crop is None)" % i)
            aug = v.get("augment")
            if aug is None:
                aug = ("random_resized_crop" if "scale" in v or "ratio" in v
                       else {a: n for n, a in _AUGMENTS.items()}[cfg.augment])
            if aug not in _AUGMENTS:
                raise ValueError("views[%d] augment must be one of %s, got %r"
                                 % (i, ", ".join(_AUGMENTS), aug))
            sp.augment = _AUGMENTS[aug]
            scale = _pair(v.get("scale", (cfg.rrc_scale[0], cfg.rrc_scale[1])),
                          "views[%d] scale" % i)
            if scale[1] > 1:
                raise ValueError("views[%d] scale must lie in (0, 1], got %r" % (i, scale))
            sp.rrc_scale[0], sp.rrc_scale[1] = scale
            sp.rrc_ratio[0], sp.rrc_ratio[1] = _pair(
                v.get("ratio", (cfg.rrc_ratio[0], cfg.rrc_ratio[1])), "views[%d] ratio" % i)
            flip = v.get("flip", cfg.flip_prob)
            if isinstance(flip, bool):
                flip = 0.5 if flip else 0.0
            if not isinstance(flip, numbers.Real) or not 0.0 <= flip <= 1.0:
                raise ValueError("views[%d] flip must be a probability in [0, 1], got %r"
                                 % (i, flip))
            sp.flip_prob = float(flip)
        return arr

    @staticmethod
    def params_ops(batch: "Dict[str, Any]", index: int, view: "Optional[int]" = None,
                   group: str = "", fill: "Union[int, Sequence[int]]" = 0, channels: int = 3
                   ) -> "List[Tuple[str, Dict[str, Any]]]":
        """The uint8 ops sample ``index`` of a batch made with return_params=True went through
        (view ``view`` of view group ``group``), in order, as ``(name, kwargs)`` for
        ``dlcache.ops.apply``: applied one at a time to the sample's crop and flip (its
        ``params_box`` and ``params_flip``), then normalized, they give the loader's bytes.
        ``fill``: the policy's fill (auto_augment_options["fill"]), which the batch does not
        repeat; ``channels``: the image's, 1 or 3."""
        fills = tuple(fill) if isinstance(fill, (list, tuple)) else (fill,) * 3
        return _augment.ops_of(batch, index, view, group, fills, channels)

    # ------------------------------------------------------------ properties
    @property
    def batch_size(self) -> "int":
        return self._config.batch_size

    # What frameworks read of a torch DataLoader (Lightning, Accelerate, training loops), with
    # torch's meaning where dlcache has the same concept.
    @property
    def drop_last(self) -> bool:
        return bool(self._config.drop_last)

    @property
    def dataset(self) -> "_Dataset":
        """The records this Loader reads: ``len()`` is the samples of an epoch over all ranks
        (as ``len(DataLoader.dataset)``); a local store's records can be read by index."""
        return _Dataset(self)

    @property
    def sampler(self) -> "_Sampler":
        """The epoch's order, as frameworks drive it: ``set_epoch(e)`` is the Loader's own, and
        ``len()`` is this rank's samples per epoch (as DistributedSampler's)."""
        return _Sampler(self)

    batch_sampler = None  # the batches are made by the C loader (batch_size, drop_last)
    num_workers = 0  # no processes are forked: the worker threads are in ``threads``
    collate_fn = None  # collated in C; ``transform=`` for a step of your own
    worker_init_fn = None
    persistent_workers = False  # torch's meaning: worker processes kept between epochs
    # torch's default for num_workers=0 (2 before torch 2.0, None since): what a DataLoader
    # made from these attributes accepts. dlcache's own depth is ``prefetch``.
    prefetch_factor = inspect.signature(torch.utils.data.DataLoader).parameters[
        "prefetch_factor"].default

    @property
    def pin_memory(self) -> bool:
        """True when batches go to a CUDA device: the slots are page-locked then."""
        return self._device is not None

    @property
    def threads(self) -> int:
        """Worker threads of the C loader (with threads="auto", those working now)."""
        if self._config.auto_threads:
            return int(self.stats()["threads"])
        return int(self._config.threads)

    @property
    def prefetch(self) -> int:
        """Batches prepared ahead: the argument (4 when None), not the slot added for the
        batch held over, so that Loader(..., prefetch=ld.prefetch) makes the same Loader."""
        return self._prefetch

    def as_iterable_dataset(self) -> "_BatchDataset":
        """An IterableDataset of this Loader's batches, for code that insists on a DataLoader:
        ``torch.utils.data.DataLoader(loader.as_iterable_dataset(), batch_size=None)`` yields
        the same batches (keep num_workers=0: the Loader has its own threads)."""
        return _BatchDataset(self)

    @property
    def rank(self) -> "int":
        return self._config.rank

    @property
    def world_size(self) -> "int":
        return self._config.world_size

    @property
    def epoch(self) -> "int":
        """The epoch the last iter() started (or will resume)."""
        return self._epoch

    @property
    def store_info(self) -> "Dict[str, Any]":
        """dlcache.info() of the store (classes, count, size...), read once. For a mixture,
        the first source's, with count, num_labels and classes of the mixture (see
        ``sources``)."""
        if self._info is None and self._mix is not None:
            self._info = self._mix.store_info(self._first_info or _store_info(self._path),
                                              self._ptr())
        if self._info is None:
            self._info = _store_info(self._path)
        return self._info

    @property
    def num_classes(self) -> "int":
        return self.store_info["num_labels"]

    @property
    def classes(self) -> "List[str]":
        return list(self.store_info["classes"])

    @property
    def sources(self) -> "Optional[List[Dict[str, Any]]]":
        """A mixture's sources (path, weight, first, count, quota, period, epoch_samples: its
        draws in the current epoch over all ranks, drawn: before it, content_digest,
        label_offset, cache_needed_bytes: what a streamed source needs of cache_dir, 0 for a
        local one), or None for one source."""
        return self._mix.info(self._ptr()) if self._mix is not None else None

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return self._len

    @property
    def num_samples(self) -> "int":
        """Samples in the store (not in this rank's share of the epoch)."""
        return self._count

    def _ptr(self):
        if self._handle is not None and self._handle.forked:
            raise RuntimeError(FORKED % self._handle.forked)
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("this dlcache.Loader is closed")
        return self._handle.ptr

    # ------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        """Make the next iter() start epoch ``epoch`` from its beginning.

        Like DistributedSampler.set_epoch(). After load_state_dict() of a
        mid-epoch state, set_epoch() with that same epoch keeps the restored
        position (the usual resume loop calls set_epoch(e) for every e).
        """
        e = _uint(epoch, "epoch", 0, 2**63 - 1)
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            # Not opened yet (unpickled or copied): the open would reset _pending_epoch, so the
            # epoch waits with the state that the open applies (_materialize()).
            lazy[2]["pending_epoch"] = e
            return
        self._pending_epoch = e

    def _start(self):
        ptr = self._ptr()
        e = self._pending_epoch
        self._pending_epoch = None
        if e is None:
            if self._pos in (_FRESH, _RESUMED):
                return
            e = self._epoch + 1
            if e > 2**63 - 1:
                # A state saved there would be refused (epochs are below 2^63).
                raise ValueError("dlcache.Loader: epoch %d was the last (epochs are 0..2^63-1): "
                                 "set_epoch() a smaller one" % self._epoch)
        elif e == self._epoch and self._pos in (_FRESH, _RESUMED, _RESUMED_END):
            return
        self._sync()
        self._resize_for(ptr, e)
        # Held batches stay lent across the new plan (the C loader keeps them): the loop's
        # variables still name the last one, and it is given back, uncopied, two batches on.
        check(lib.dlc_loader_set_epoch(ptr, e), "dlcache.Loader.set_epoch(%d)" % e)
        self._epoch = e
        self._pos = _FRESH
        self._yielded = 0

    def __iter__(self) -> "Iterator[Any]":
        self._start()
        self._gen += 1
        return self._iterate(self._gen)

    def _iterate(self, gen):
        return self._batches_of(gen, self._feed)

    def _gone(self, gen):
        """The error of an iterator whose Loader was closed, or that iter(), load_state_dict()
        or close() made stale."""
        if self._handle is not None and self._handle.forked:
            return RuntimeError(FORKED % self._handle.forked)
        if self._closed or self._handle is None or self._handle.ptr is None:
            return ValueError("this dlcache.Loader is closed")
        return RuntimeError("this dlcache.Loader iterator is stale: iter(), load_state_dict() "
                            "or close() was called on the Loader since")

    def _take(self, gen, batch, take):
        """@p take, dlc_loader_next_wait() (or dlc_loader_next_device_wait()), into @p batch,
        in slices of _SLICE_MS until it gives something else than DLC_AGAIN: between two, the
        interpreter runs the signal handlers (Ctrl-C's KeyboardInterrupt, the program's own
        handlers, asyncio's) and a close() from another thread gets the Loader. Called with
        _next_lock held; gives it up between the slices only. A cancelled asyncio task that
        waits here (next() in the event loop's thread) ends with CancelledError."""
        ref = ctypes.byref(batch)
        lock = self._next_lock
        while True:
            # Checked with nothing between it and the call that could run a handler.
            ptr = self._handle.ptr
            if ptr is None or gen != self._gen:
                raise self._gone(gen)
            rc = take(ptr, ref, _SLICE_MS)  # GIL released while workers work
            if rc != L.DLC_AGAIN:
                return rc
            lock.release()
            try:
                _cancelled_task()
            finally:
                lock.acquire()

    def _batches_of(self, gen, feed):
        record = torch.profiler.record_function
        owner = self._handle
        ctx = "dlcache.Loader(%s)" % redact(os.fsdecode(self._path))
        max_lent = self._config.max_lent
        out = []  # what is yielded, popped as it is: no local holds a batch across the yield
        if feed is not None:
            take = lib.dlc_loader_next_device_wait if feed.backend == "plugin" \
                else lib.dlc_loader_next_wait

            def wait(_ptr, b):
                return self._take(gen, b, take)
        while True:
            with self._next_lock:
                if gen != self._gen or self._handle.ptr is None:
                    raise self._gone(gen)
                ptr = self._handle.ptr
                if feed is not None:
                    batch = self._batch
                    # The profiler range covers the whole wait, every slice of it.
                    with record("dlcache.next"):
                        rc, items = feed.next(ptr, batch, owner, ctx, wait)
                else:
                    # Give back what the caller can no longer hold: with two lent, the batch
                    # before the one the loop's variables still name; with one, that one.
                    while len(self._held) >= max_lent:
                        self._settle_one(ptr)
                    # Each lent batch keeps its own dlc_batch: the one not held (at most one
                    # is, also when a new iterator starts with the last epoch's batch held
                    # over).
                    batch = self._batches[0]
                    if self._held and self._held[-1][0] is batch:
                        batch = self._batches[1]
                    # count != 0 from here on means C lent this batch (it zeroes the struct
                    # whenever it lends nothing): see the except below.
                    batch.count = 0
                try:
                    if feed is None:
                        # The wait shows in a torch profile beside the model's kernels.
                        with record("dlcache.next"):
                            rc = self._take(gen, batch, lib.dlc_loader_next_wait)
                    if rc == L.DLC_END:
                        self._pos = _DONE
                        return
                    if rc < 0:
                        raise error_for(rc, ctx)
                    if self._pos != _RUNNING:
                        # After a restore this rank's count of the epoch is unknown
                        # (the world size may have changed): then it stays None.
                        self._pos = _RUNNING
                    self._kept_marks.append((self._kept_s, self._kept_n))
                    # Made under the lock: a close() waiting for it then finds the batch in
                    # _held and detaches it.
                    if feed is not None:
                        out.append(self._device_batch(items))
                    elif self._as_dict:
                        out.append(self._dict(batch, owner))
                    else:
                        out.append(self._pair(batch, owner))
                except BaseException:
                    # A Ctrl-C's KeyboardInterrupt runs at any bytecode after the C call: one
                    # between the lend and the batch's entry in _held would leave C with a
                    # batch lent that Python does not know of, and C's next() would give back
                    # the oldest one Python holds, under the caller's tensors. A batch not yet
                    # in _held has no view the caller can reach: it goes back now.
                    # It is put back as not taken (dlc_loader_put_back()): the next next() lends
                    # it again and a state saved meanwhile does not count it, where a release
                    # counted as consumed a batch the caller never saw (a resume skipped it).
                    if feed is None and batch.count:
                        if self._held and self._held[-1][0] is batch:
                            self._held.pop()  # made, not yielded: no view is the caller's
                        if not any(h[0] is batch for h in self._held):
                            if lib.dlc_loader_put_back(ptr, ctypes.byref(batch)) < 0:
                                lib.dlc_loader_release(ptr, ctypes.byref(batch))
                            batch.count = 0
                    raise
            if self._yielded is not None:
                self._yielded += 1
            # No local of this frame may hold the batch's lease across the yield: its life is
            # the views' (see _settle_one()).
            if self._transform is None:
                yield out.pop()
            else:
                yield self._transform(out.pop())

    def _pair(self, batch, owner):
        """The lent batch as (images, labels[, indices]): images a view of the slot."""
        n = batch.count
        lease = _Lease(owner)
        images, ref = self._lend(batch.data, batch.dtype, tuple(batch.shape), lease)
        self._held.append((batch, [ref], weakref.ref(lease)))
        labels = _own(batch.labels, L.DTYPE_INT64, (n,))
        if self._soft:
            labels = _batchaug.soft_labels(batch, _own)
        if self._mix is not None:
            return self._mix.pair(images, labels, _own(batch.indices, L.DTYPE_INT64, (n,)),
                                  self._return_indices)
        if self._return_indices:
            # Record numbers are < 2**63: int64 is the same bytes as the C uint64.
            return images, labels, _own(batch.indices, L.DTYPE_INT64, (n,))
        return images, labels

    def _lend(self, ptr, code, shape, lease):
        """A large output of a host batch, and what _settle_one() needs to know of it: a weak
        reference, and with debug_poison the private copy it views. @p lease: the batch's
        owner of its views (_Lease)."""
        if not self._poison:
            t = _view(ptr, code, shape, lease)
            return t, (weakref.ref(t), None)
        # Debug: a private copy that is poisoned, never reused, once the batch is given back, so
        # that a view kept past that point reads 0xFF (NaN) for as long as it lives.
        t = _view(ptr, code, shape, None)
        if t.numel() == 0:
            return t, (weakref.ref(t), None)
        buf = bytearray(t.numel() * t.element_size())
        c = torch.frombuffer(buf, dtype=t.dtype).view(t.shape)
        c.copy_(t)
        return c, (weakref.ref(c), buf)

    def _settle_one(self, ptr):
        """Give the oldest lent host batch back to the C loader. If a tensor the caller holds
        still views the slot (the batch kept, or a row or slice cut from it), the batch is given
        back with its memory (dlc_loader_keep()): the slot is refilled in new memory and the old
        one is freed when the last view dies, so nothing the caller holds ever changes or
        dangles. The tensors themselves are left as they are: moving one onto a copy
        (Tensor.set_) bumped its version, which autograd refuses in a graph that saved it
        (gradient accumulation keeping its losses) and torch refuses on a leaf that requires
        grad."""
        batch, refs, lease_ref = self._held[0]
        for r, buf in refs:
            if buf is not None and r() is None:
                ctypes.memset((ctypes.c_char * len(buf)).from_buffer(buf), 0xFF, len(buf))
        lease = lease_ref()
        if lease is None:
            self._held.popleft()
            lib.dlc_loader_release(ptr, ctypes.byref(batch))
            return
        t0 = time.perf_counter()
        memory = ctypes.c_void_p()
        rc = -1
        try:
            rc = lib.dlc_loader_keep(ptr, ctypes.byref(batch), ctypes.byref(memory))
        finally:
            # A Ctrl-C's KeyboardInterrupt can land right after the call returns, before rc is
            # even stored: whether the batch was kept is told by the memory it handed over, and
            # the books follow it in any case (else _held would name a batch C no longer lent,
            # and every later next() and close() would fail).
            if memory.value:
                self._held.popleft()
                lease.own(memory.value)
        if rc < 0:
            raise error_for(rc, "dlcache.Loader(%s): giving back a batch that a tensor still "
                            "views" % os.fsdecode(self._path))  # the batch stays lent
        self._kept_s += time.perf_counter() - t0
        self._kept_n += 1

    def _settle(self):
        """Give back every lent host batch (before anything that refills or frees the slots)."""
        if self._handle is None or self._handle.ptr is None:
            self._held.clear()
            return
        while self._held:
            self._settle_one(self._handle.ptr)

    def _device_batch(self, items):
        """The CUDA outputs [(name, tensor)] as the host path shapes them: a dict, or
        (images, labels[, indices])."""
        out = dict(items)
        self._check_names(len(out), len(items))
        if self._mix is not None:
            self._mix.split_into(out, out.pop("indices"), self._return_indices)
        if self._as_dict:
            return out
        images, labels = self._pair_names
        if self._mix is not None:
            extra = ((out["indices"],) if self._return_indices else ()) + \
                ((out["source"],) if self._mix.return_source else ())
            return (out[images], out[labels]) + extra
        if self._return_indices:
            return out[images], out[labels], out["indices"]
        return out[images], out[labels]

    def _check_names(self, got, want):
        if self._checked_names:
            return
        # NAME_lengths, NAME_offsets and indices share one namespace with the fields.
        if got != want:
            raise ValueError("two outputs of this store have the same name (a field named "
                             "like another's NAME_lengths, NAME_offsets, or 'indices' with "
                             "return_indices): leave one out with fields=")
        self._checked_names = True

    def _dict(self, batch, owner):
        """The lent batch as {output name: tensor}: the large outputs views of the slot, the
        small ones (scalars, lengths, offsets, indices) tensors of their own."""
        out = {}
        refs = []
        lease = _Lease(owner)
        n = batch.count
        for i in range(batch.num_fields):
            bf = batch.fields[i]
            name = bf.name.decode()
            shape = tuple(bf.shape[:bf.ndim])
            if bf.kind in (L.FIELD_INT, L.FIELD_FLOAT):
                out[name] = _own(bf.data, bf.dtype, shape)
            else:
                out[name], ref = self._lend(bf.data, bf.dtype, shape, lease)
                refs.append(ref)
            if bf.lengths:
                out[name + "_lengths"] = _own(bf.lengths, L.DTYPE_INT64, (n,))
            if bf.offsets:
                out[name + "_offsets"] = _own(bf.offsets, L.DTYPE_INT64, (n + 1,))
        self._held.append((batch, refs, weakref.ref(lease)))
        if self._mix is not None:
            self._mix.split_into(out, _own(batch.indices, L.DTYPE_INT64, (n,)),
                                 self._return_indices)
        elif self._return_indices:
            # Record numbers are < 2**63: int64 is the same bytes as the C uint64.
            out["indices"] = _own(batch.indices, L.DTYPE_INT64, (n,))
        if not self._checked_names:
            want = sum(1 + (1 if batch.fields[i].lengths else 0) +
                       (1 if batch.fields[i].offsets else 0)
                       for i in range(batch.num_fields)) + (1 if self._return_indices else 0)
            want += 1 if self._mix is not None else 0  # "source"
            self._check_names(len(out), want)
        return out

    def _sync(self):
        """Wait for a copy that may still read a slot (torch backend) before the C loader
        refills the slots."""
        if self._feed is not None:
            self._feed.sync()

    # ------------------------------------------------------------ state
    def _state_at_end(self, raw):
        """The C state says its epoch is over: what _finished() cannot count after a restore,
        whose rank's share is unknown (the world size may have changed)."""
        if self._pos != _RUNNING:
            return False
        if self._mix is not None:
            return _mix_state_at_end(raw)
        return _plain_state_at_end(raw)

    def _finished(self):
        if self._pos in (_DONE, _RESUMED_END):
            return True
        return self._pos == _RUNNING and self._yielded is not None and self._yielded >= self._len

    def state_dict(self) -> Dict[str, Any]:
        """The stream's position, to save with a checkpoint (torch.save-able).

        Taken mid-epoch, it counts every batch already yielded (including the
        one in use) as consumed; a fresh Loader given it by load_state_dict()
        yields exactly the batches that this one would yield next.
        """
        if self._mix is not None:
            raw = self._mix.state(self._ptr())
        else:
            buf = ctypes.create_string_buffer(L.LOADER_STATE_SIZE)
            check(lib.dlc_loader_state_save(self._ptr(), buf), "dlcache.Loader.state_dict")
            raw = buf.raw
        out = {
            "dlcache_loader_state": _STATE_VERSION,
            "state": raw,
            "epoch": int(self._epoch),
            "epoch_finished": bool(self._finished() or self._state_at_end(raw)),
            "seed": self._seed,
            "num_samples": self._count,
            "world_size": int(self.world_size),
            "batch_size": int(self.batch_size),
        }
        e = self._pending_epoch
        if e is not None and not (e == self._epoch and
                                  self._pos in (_FRESH, _RESUMED, _RESUMED_END)):
            # set_epoch(e) and no iter() since: the next batches are epoch e's first (the
            # C state is the position before it; load_state_dict() goes on to e).
            out["next_epoch"] = int(e)
        c = self._config
        if self._mix is not None:
            out["mixture"] = self._mix.describe(self._ptr())
        else:
            # What the state came from (the C state checks the digest too): a state resumes only
            # the store it was saved from.
            out["source"] = public_path(self._path)
            out["content_digest"] = int.from_bytes(raw[8:16], "little")
        if self._res_now is not None:
            # The size is not in the C state: the epoch in progress's, and one set for the next.
            out["resolution"] = tuple(self._res_now)
            if self._res_next is not None:
                out["next_resolution"] = tuple(self._res_next)
        if c.aug_repeats > 1:
            out["aug_repeats"] = int(c.aug_repeats)  # As streams below: the C state checks it.
        if c.sampler == L.SAMPLER_SHARD_WINDOWS:
            # The order depends on them: a Loader resuming this state needs the same ones (the
            # C state checks it), so they are here to be read back.
            out["streams"] = int(c.streams or c.world_size)
            out["window_shards"] = int(c.window_shards)
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Continue from a state_dict() (also one saved under another world size).

        Every field read is checked (type and range) before anything changes; the epoch and
        the seed are the checksummed state's (the dict's copies must agree with it). A state
        names the store it came from by its content digest: one of another store is refused,
        naming both. A state of version 1 (saved before states named their store) is still
        taken, with a RuntimeWarning: it is matched by the store's record count only.
        """
        sd = state_dict
        if not isinstance(sd, dict) or "dlcache_loader_state" not in sd:
            raise ValueError("state_dict is not a dlcache.Loader state_dict")
        version = sd["dlcache_loader_state"]
        if type(version) is not int or version not in (1, _STATE_VERSION):
            raise ValueError("state_dict version %r is not supported (expected 1 or %d)"
                             % (version, _STATE_VERSION))
        raw = sd.get("state")
        if isinstance(raw, torch.Tensor):
            raw = bytes(raw.to(torch.uint8).tolist())
        if (self._mix is None) != ("mixture" not in sd):
            raise ValueError("state_dict is a %s's state and this Loader reads %s"
                             % ("mixture" if "mixture" in sd else "single source",
                                "a mixture" if self._mix is not None else "one source"))
        if self._mix is not None:
            if not isinstance(raw, (bytes, bytearray)) or not 32 <= len(raw) \
                    <= L.LOADER_MIX_STATE_MAX:
                raise ValueError("state_dict['state'] must be 32 to %d bytes"
                                 % L.LOADER_MIX_STATE_MAX)
        elif not isinstance(raw, (bytes, bytearray)) or len(raw) != L.LOADER_STATE_SIZE:
            raise ValueError("state_dict['state'] must be %d bytes" % L.LOADER_STATE_SIZE)
        raw = bytes(raw)
        # A state of neither kind is the C library's to refuse, with its own words.
        if raw[:4] != b"LCS2" and raw[:8] not in (b"DLCDST1\0", b"DLCMIX1\0"):
            restore = (lib.dlc_loader_mix_state_restore if self._mix is not None
                       else lib.dlc_loader_state_restore)
            check(restore(self._ptr(), raw, len(raw)), "dlcache.Loader.load_state_dict")
            raise ValueError("state_dict['state'] is not a dlcache loader state")
        # Both kinds of state hold the seed at bytes 16..23 and the epoch at 24..31.
        seed = int.from_bytes(raw[16:24], "little")
        epoch = int.from_bytes(raw[24:32], "little")
        if epoch > 2**63 - 1:
            raise ValueError("state_dict['state'] holds epoch %d, beyond 2^63: not a state" % epoch)
        for key, lo, hi in (("epoch", 0, 2**63 - 1), ("seed", 0, 2**64 - 1),
                            ("batch_size", 1, 2**32 - 1), ("world_size", 1, 2**32 - 1),
                            ("num_samples", 0, 2**64 - 1), ("streams", 0, 2**32 - 1),
                            ("window_shards", 0, 2**32 - 1), ("content_digest", 0, 2**64 - 1),
                            ("aug_repeats", 0, 256)):
            if sd.get(key) is not None:
                _uint(sd[key], "state_dict[%r]" % key, lo, hi)
        for key, want in (("epoch", epoch), ("seed", seed)):
            if sd.get(key) is not None and sd[key] != want:
                raise ValueError("state_dict[%r] is %d and the state it holds says %d: the dict "
                                 "was edited or put together from two states" % (key, sd[key], want))
        next_epoch = sd.get("next_epoch")
        if next_epoch is not None:
            _uint(next_epoch, "state_dict['next_epoch']", 0, 2**63 - 1)
        finished = sd.get("epoch_finished", False)
        if not isinstance(finished, (bool, int)) or finished not in (0, 1):
            raise ValueError("state_dict['epoch_finished'] must be a bool, not %r" % (finished,))
        if version < _STATE_VERSION and self._mix is not None:
            pass  # A mixture's C state always named its sources by digest.
        elif version < _STATE_VERSION:
            warnings.warn("dlcache.Loader.load_state_dict: a state of version %d names no store: "
                          "it is taken for this one by its record count only (states saved now "
                          "name their store by its content digest)" % version,
                          RuntimeWarning, stacklevel=2)
        elif self._mix is not None:
            mix = sd["mixture"]
            digests = mix.get("content_digests") if isinstance(mix, dict) else None
            if not isinstance(digests, list) or \
                    len(digests) != int.from_bytes(raw[12:16], "little"):
                raise ValueError("state_dict['mixture'] must hold the content_digests of the "
                                 "state's sources")
            for i, d in enumerate(digests):
                _uint(d, "state_dict['mixture']['content_digests'][%d]" % i, 0, 2**64 - 1)
        else:
            if raw[:4] != b"LCS2" or sd.get("content_digest") is None or \
                    sd["content_digest"] != int.from_bytes(raw[8:16], "little"):
                raise ValueError("state_dict['content_digest'] must be the digest of the store "
                                 "the state holds (%r)" % (sd.get("content_digest"),))
            if not isinstance(sd.get("source", ""), str):
                raise ValueError("state_dict['source'] must be a str")
        saved_bs = sd.get("batch_size")
        if saved_bs is not None and saved_bs != int(self.batch_size):
            warnings.warn("dlcache.Loader.load_state_dict: the state was saved with batch_size "
                          "%d and this Loader has %d: the stream continues at the same sample "
                          "(no sample skipped or repeated), in batches of %d, so batch numbers "
                          "and the number of batches left differ from the saved run's"
                          % (saved_bs, int(self.batch_size), int(self.batch_size)),
                          RuntimeWarning, stacklevel=2)
        # Checked before anything changes, as every field read here: (2**32 + 16, 16) was
        # 16 x 16 to C and 4294967312 x 16 to .resolution and the next state.
        res = state_dict.get("resolution")
        if res is not None:
            res = _batchaug._hw(res, "state_dict['resolution']")
        nxt = state_dict.get("next_resolution")
        if nxt is not None:
            nxt = _batchaug._hw(nxt, "state_dict['next_resolution']")
        self._sync()
        if res is not None:
            if self._res_now is None:
                raise ValueError("state_dict was saved with progressive resizing (resolution "
                                 "%r): give this Loader resolution= or max_resolution= too"
                                 % (tuple(res),))
            # The restore starts a plan: the size set now is the resumed epoch's.
            _batchaug.set_resolution(self._ptr(), res[0], res[1],
                                     "dlcache.Loader.load_state_dict")
        restore = (lib.dlc_loader_mix_state_restore if self._mix is not None
                   else lib.dlc_loader_state_restore)
        ctx = "dlcache.Loader.load_state_dict"
        if self._mix is None and isinstance(sd.get("source"), str):
            ctx += "(a state of %s)" % redact(sd["source"])
        check(restore(self._ptr(), raw, len(raw)), ctx)
        if res is not None:
            self._res_now = res
            self._res_next = None
            if nxt is not None:
                self.set_resolution(nxt[0], nxt[1])
        self._gen += 1  # iterators over the old position must not go on
        self._epoch = epoch
        self._seed = seed
        self._pending_epoch = None
        self._pos = _RESUMED_END if finished else _RESUMED
        self._yielded = None
        if next_epoch is not None:
            # Saved after set_epoch(next_epoch): its start comes next, not the position.
            self._pending_epoch = int(next_epoch)
            self._pos = _DONE

    # ------------------------------------------------------------ resizing, mixing
    def set_resolution(self, height: int, width: int) -> None:
        """Progressive resizing: images of height x width from the next epoch on (a fixed
        size, replacing a resolution= schedule). The Loader needs room for it: opened with
        max_resolution= (or a resolution= list whose largest entry holds it)."""
        h, w = _batchaug._hw((height, width), "set_resolution")
        if self._res_now is None:
            raise ValueError("set_resolution() needs the Loader opened with max_resolution= "
                             "(the largest size: the batch slots are sized for it)")
        _batchaug.set_resolution(self._ptr(), h, w, "dlcache.Loader.set_resolution")
        self._resolution = None
        self._res_next = (h, w)

    def _check_resolutions(self):
        """Each size of a resolution= list against the ops (a blur kernel too large for a smaller
        epoch's images), at open rather than at that epoch: the C check of set_resolution() on
        each, then epoch 0's size again (the last one set is the one an epoch takes)."""
        table = self._resolution.table if self._resolution is not None else None
        if not table:
            return
        ptr = self._handle.ptr
        for hw in sorted(set(table)) + [self._resolution.at(0)]:
            _batchaug.set_resolution(ptr, hw[0], hw[1], "dlcache.Loader(resolution=...)")

    def _resize_for(self, ptr, epoch):
        """Before the plan of @p epoch starts: its size (schedule, or set_resolution())."""
        if self._res_next is not None:
            self._res_now, self._res_next = self._res_next, None
        elif self._resolution is not None:
            hw = self._resolution.at(epoch)
            _batchaug.set_resolution(ptr, hw[0], hw[1], "dlcache.Loader(resolution=...)")
            self._res_now = hw

    @property
    def resolution(self):
        """(height, width) of the epoch in progress with progressive resizing, else None."""
        return self._res_now

    def mixup_params(self, epoch: int, batch_index: int) -> Dict[str, Any]:
        """How batch @p batch_index of @p epoch (this rank's) is mixed: {"mode": "none",
        "mixup" or "cutmix", "lam": float, "box": (yl, yh, xl, xh) or None}, a pure function
        of the seed, epoch, rank, world size and batch index (timm's draw, see _batchaug)."""
        # Checked: C's uint64 took 2**64 as epoch 0 and -1 as 2**64 - 1.
        epoch = _uint(epoch, "epoch", 0, 2**63 - 1)
        batch_index = _uint(batch_index, "batch_index", 0, 2**63 - 1)
        h, w = self._res_now or (self._config.crop_h, self._config.crop_w)
        if not h or not w:
            raise ValueError("mixup_params() needs the output size: open with crop=")
        mix = getattr(self._feed, "mix", None)
        if mix is not None:  # the torch device backend mixes, not the C loader
            seed, rank, world = mix[3]()
            return _batchaug.draw(mix[0], seed, epoch, rank, world, batch_index, h, w)
        return _batchaug.mixup_params(self._ptr(), epoch, batch_index, h, w)

    # ------------------------------------------------------------ misc
    @property
    def device(self) -> "torch.device":
        """The torch.device of the batches: cuda:N, or cpu."""
        return self._device if self._device is not None else torch.device("cpu")

    @property
    def device_backend(self) -> "Optional[str]":
        """How batches reach the GPU: "plugin" (the C library's CUDA path), "torch" (torch's
        CUDA runtime), or None (host batches)."""
        return self._feed.backend if self._feed is not None else None

    def stats(self) -> Dict[str, Any]:
        """Counters since open: batches, samples, wait_seconds (time this
        process waited for data), io_wait_seconds, corrupt_replaced,
        bytes_read, io_mode, threads; device (the GPU index of CUDA batches,
        else -1), device_bytes (bytes copied from the slots to the GPU),
        device_copy_seconds (the plugin's copy time as its copy thread saw
        it; 0 with the torch backend, whose copies are not timed),
        device_copy_event_seconds (the same copies' own time on the GPU, between
        CUDA events around them on the loader's stream; 0 with the torch
        backend) and device_backend (as the property)."""
        s = L.LoaderStats()
        lib.dlc_loader_get_stats(self._ptr(), ctypes.byref(s))
        out = {name: getattr(s, name) for name, _ in L.LoaderStats._fields_}
        out["device_copy_event_seconds"] = (
            lib.dlc_loader_device_copy_event_seconds(self._ptr())
            if lib.has("dlc_loader_device_copy_event_seconds") else 0.0)
        out["device_backend"] = self.device_backend
        if self.device_backend == "torch":
            out["device"] = self._device.index
            out["device_bytes"] = self._feed.bytes
        return out

    def report(self, last: int = 0) -> "_report.Report":
        """Where the time went over the last ``last`` batches (at most 1023; 0: since open),
        and what bounds the training step: ``.bound`` is "model" (batches were ready),
        "cpu", "storage", "network", "copy" or "consumer", with ``.reason`` and ``.advice``;
        ``str()`` is a short table, ``.as_dict()`` a flat dict for TensorBoard or W&B. See
        docs/WAITING.md. Call it from the loop's thread."""
        # Checked: C's uint32 took -1 as "since open" and 2**32 + 1 as the last batch.
        last = _uint(last, "last", 0, 2**32 - 1)
        marks = self._kept_marks
        kept_s, kept_n = self._kept_s, self._kept_n
        if last and last < len(marks):
            s0, n0 = marks[-last - 1]
            kept_s, kept_n = kept_s - s0, kept_n - n0
        return _report.get(self._ptr(), last, kept_s, kept_n, "dlcache.Loader.report")

    def stream_stats(self) -> Dict[str, Any]:
        """What streaming did since open (zeros for a local path): stall_s (seconds the
        loader waited for a shard to arrive), hits and misses (shards a batch found in the
        cache, or had to wait for), bytes_fetched (downloaded, the index and retries
        counted), requests (HTTP), peak_cache_bytes (the most the cache folder held, as this
        process saw it), evictions (shards this process removed to make room) and downloads
        (shards this process downloaded)."""
        st = L.LoaderStreamStats()
        st.struct_size = ctypes.sizeof(st)
        check(lib.dlc_loader_get_stream_stats(self._ptr(), ctypes.byref(st)),
              "dlcache.Loader.stream_stats")
        return {key: getattr(st, field) for key, field in _STREAM_STATS}

    def close(self) -> None:
        """Stop the workers and free the slots. Batches still held are
        detached first (see "Lifetime of a batch"); CUDA tensors stay valid
        (they are the caller's). Idempotent."""
        if self.__dict__.pop("_lazy", None) is not None:
            self._handle, self._gen = None, 0  # never opened: nothing to stop
        # First the mark, then the lock: an iterator waiting on another thread sees the mark
        # between two slices of its wait (_take()) and ends, and the lock is free then.
        self._gen += 1
        self._closed = True
        if self._handle is not None:
            with self._next_lock:
                try:
                    self._settle()
                finally:
                    # The workers stop even when a batch could not be given back.
                    self._handle.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self):
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            return ("dlcache.Loader(%r, batch_size=%d, opens at first use)"
                    % (redact(os.fsdecode(_fspath(lazy[0]["path"], "path")))
                       if not isinstance(lazy[0]["path"], (list, tuple)) else "[...]",
                       lazy[0]["batch_size"]))
        c = self._config
        dev = ""
        if self._feed is not None:
            dev = ", device=%s (%s)" % (self._device, self._feed.backend)
        closed = self._handle is None or self._handle.ptr is None
        return ("dlcache.Loader(%r, batch_size=%d, rank=%d/%d, epoch=%d, %d batches/epoch%s%s)"
                % (redact(os.fsdecode(self._path)), c.batch_size, c.rank, c.world_size, self._epoch,
                   self._len, dev, ", closed" if closed else ""))


_SIGNATURE = inspect.signature(Loader.__init__, eval_str=True)
_SIGNATURE = _SIGNATURE.replace(parameters=list(_SIGNATURE.parameters.values())[1:])
# inspect.signature(dlcache.Loader) and IDEs show the arguments, not __new__'s (*args, **kwargs).
Loader.__signature__ = _SIGNATURE  # type: ignore[attr-defined]

# preset=: the arguments it fills in (those given win). Stores are built at a size (cachebuild
# --size 256 resizes the short side to 256 and center-crops), so "eval" is torchvision's eval
# recipe (resize 256, center crop 224) on a 256 store.
_PRESETS = {
    "train": {"crop": 224, "random_resized_crop": True, "random_crop": True, "flip": 0.5,
              "shuffle": True},
    # In record order, as torch's evaluation loaders (shuffle=False) read.
    "eval": {"crop": 224, "random_resized_crop": None, "random_crop": False, "flip": 0.0,
             "shuffle": False},
}


def _preset(name, device):
    if not isinstance(name, str) or name.lower() not in _PRESETS:
        raise ValueError("preset must be 'train' or 'eval', got %r" % (name,))
    out = dict(_PRESETS[name.lower()])
    # Normalized NCHW: float32 on the host; float16 on a CUDA device (converted there).
    host = device is None or str(device) == "cpu"
    out["dtype"] = "float32" if host else "float16"
    return out


def _no_secret(value):
    """A path or URL without what the library's redaction would hide: a URL that holds a
    secret loses its user:password, query and fragment (a signed URL is not kept; the
    credentials come from the environment again)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_no_secret(v) for v in value)
    if not isinstance(value, (str, bytes)):
        return value
    text = os.fsdecode(value)
    if "://" not in text or redact(text) == text:
        return value
    u = urlsplit(text)
    host = u.hostname or ""
    if ":" in host:
        host = "[%s]" % host
    netloc = host + (":%d" % u.port if u.port else "")
    out = urlunsplit((u.scheme, netloc, u.path, "", ""))
    out = redact(out)  # a secret in the path itself stays hidden, too
    return os.fsencode(out) if isinstance(value, bytes) else out


def _without_secrets(args):
    out = dict(args)
    for key in ("path", "endpoint"):
        if key in out:
            out[key] = _no_secret(out[key])
    return out


def _restore(args, state, extra, cls=None):
    """Unpickling: a Loader (of class @p cls) that opens at its first use (_materialize())."""
    cls = Loader if cls is None else cls
    ld = object.__new__(cls)
    ld.__dict__["_lazy"] = (args, state, extra, cls)
    return ld


class _Sampler:
    """loader.sampler: the order as frameworks drive a DataLoader's sampler (Lightning calls
    ``set_epoch(e)`` on it each epoch). Not a torch Sampler: the order is drawn in C."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        """The Loader's set_epoch()."""
        self._loader.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    @property
    def shuffle(self) -> bool:
        return self._loader._config.sampler != L.SAMPLER_SEQUENTIAL

    @property
    def num_replicas(self) -> int:
        return self._loader.world_size

    @property
    def rank(self) -> int:
        return self._loader.rank

    def __len__(self) -> int:
        """This rank's samples per epoch (DistributedSampler's num_samples)."""
        ld = self._loader
        total = len(ld.dataset)
        # Padded to a multiple of world_size, or cut with drop_last (docs/PYTHON.md).
        return total // ld.world_size if ld.drop_last else -(-total // ld.world_size)

    def __repr__(self):
        return "dlcache.Loader.sampler(epoch=%d, rank=%d/%d)" % (
            self.epoch, self.rank, self.num_replicas)


class _Dataset(torch.utils.data.Dataset):
    """loader.dataset: ``len()`` is the samples of an epoch over all ranks (the store's
    records, or a mixture's samples_per_epoch); ``dataset[i]`` is record i of a local store
    as stored (dlcache.Store), for a look at the data."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self) -> int:
        ld = self._loader
        if ld._mix is not None and ld._mix.samples_per_epoch:
            return int(ld._mix.samples_per_epoch)
        return int(ld.num_samples)

    def __getitem__(self, index):
        ld = self._loader
        if ld._mix is not None or ld._url:
            raise TypeError("records are read by index from one local store only; this Loader "
                            "reads %s" % ("a mixture" if ld._mix is not None else "a URL"))
        from .store import Store
        with Store(ld._path) as st:
            return st[index]

    def __repr__(self):
        return "dlcache.Loader.dataset(%d samples)" % len(self)


class _BatchDataset(torch.utils.data.IterableDataset):
    """loader.as_iterable_dataset(): the Loader's batches; ``len()`` is the Loader's."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            # Each worker process would get a copy of the Loader and yield the whole epoch.
            raise RuntimeError("loader.as_iterable_dataset() goes in a DataLoader with "
                               "num_workers=0: the Loader has its own threads (threads=), and "
                               "each worker process would yield every batch again")
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


# ------------------------------------------------------------ mixtures
def _ld(raw, at, size=8):
    return int.from_bytes(raw[at:at + size], "little")


def _plain_state_at_end(raw):
    """A single store's state (dlc_loader_state_save()) is at its epoch's end when its position
    reaches the epoch's samples (a complete epoch saves at least that, also under drop_last)."""
    return _ld(raw, 32) >= _ld(raw, 48)


def _mix_state_at_end(raw):
    """A mixture's state (dlc_loader_mix_state_save(), loader/mix.c) is at its epoch's end when
    its position reaches the end of the epoch's draws: from where the epoch's schedule began,
    what is left of its length rounded up to a multiple of the world size, or down to a multiple
    of world x batch under drop_last (dlc__mix_epoch_span()). A plain one-source mixture holds a
    single store's state after its 80 + 40 bytes."""
    flags = _ld(raw, 68, 4)
    if flags & 4:
        return _plain_state_at_end(raw[120:120 + L.LOADER_STATE_SIZE])
    epoch, pos, seg_epoch, seg_pos, length = (_ld(raw, a) for a in (24, 32, 40, 48, 56))
    world, batch = _ld(raw, 64, 4), _ld(raw, 72, 4)
    start = seg_pos if epoch == seg_epoch else 0
    left = max(length - start, 0)
    if flags & 1:
        unit = world * max(batch, 1)
        span = left // unit * unit
    else:
        span = -(-left // world) * world
    return pos >= start + span


class _Mix:
    """What a Loader over several sources adds (include/dlcache/loader.h, "Mixtures"): the
    sources and their options, the C call that opens them, each sample's source and its record
    number within it, and the mixture's state."""

    @staticmethod
    def make(path, weights, samples_per_epoch, label_offsets, return_source):
        """A _Mix for a list of paths, else None (and the mixture's arguments must be unset)."""
        if isinstance(path, (list, tuple)):
            return _Mix(path, weights, samples_per_epoch, label_offsets, return_source)
        if weights is not None or samples_per_epoch is not None or label_offsets is not None \
                or return_source:
            raise ValueError("weights, samples_per_epoch, label_offsets and return_source apply "
                             "to a mixture: give a list of paths")
        return None

    def __init__(self, paths, weights, samples_per_epoch, label_offsets, return_source):
        n = len(paths)
        if not 1 <= n <= 64:
            raise ValueError("a mixture has 1 to 64 sources, got %d" % n)
        self.paths = [_fspath(p, "path[%d]" % i) for i, p in enumerate(paths)]
        self.name = "[%s]" % ", ".join(os.fsdecode(p) for p in self.paths)
        self.weights = [1.0] * n if weights is None else list(weights)
        self.offsets = [0] * n if label_offsets is None else list(label_offsets)
        for arg, vals in (("weights", self.weights), ("label_offsets", self.offsets)):
            if len(vals) != n:
                raise ValueError("%s has %d entries for %d sources" % (arg, len(vals), n))
        self.weights = _mix_weights(self.weights, n, "sources")
        self.offsets = [_uint(o, "label_offsets[%d]" % i, 0, 2**62)
                        for i, o in enumerate(self.offsets)]
        self.samples_per_epoch = 0 if samples_per_epoch is None else \
            _uint(samples_per_epoch, "samples_per_epoch", 1)
        self.return_source = _flag(return_source, "return_source")
        self.firsts = None

    def open_rc(self, cfg, h):
        """dlc_loader_open_mix()'s status (the caller checks it)."""
        n = len(self.paths)
        arr = (L.MixSource * n)()
        for i in range(n):
            lib.dlc_mix_source_init(ctypes.byref(arr[i]))
            arr[i].path = self.paths[i] if isinstance(self.paths[i], bytes) else \
                os.fsencode(self.paths[i])
            arr[i].weight = self.weights[i]
            arr[i].label_offset = self.offsets[i]
        o = L.MixOptions()
        lib.dlc_mix_options_init(ctypes.byref(o))
        o.samples_per_epoch = self.samples_per_epoch
        return lib.dlc_loader_open_mix(arr, n, ctypes.byref(o), ctypes.byref(cfg),
                                       ctypes.byref(h))

    def info(self, ptr):
        """Each source as the C loader has it (dlc_mix_source_info)."""
        out = []
        for i, p in enumerate(self.paths):
            s = L.MixSourceInfo()
            s.struct_size = ctypes.sizeof(s)
            check(lib.dlc_loader_source_info(ptr, i, ctypes.byref(s)), "dlcache.Loader.sources")
            d = {name: getattr(s, name) for name, _ in L.MixSourceInfo._fields_
                 if name != "struct_size"}
            d.update(path=public_path(p), weight=self.weights[i])
            out.append(d)
        return out

    def opened(self, ptr):
        self.firsts = torch.tensor([s["first"] for s in self.info(ptr)], dtype=torch.int64)

    def split(self, idx):
        """The source of each global record number, and the number within the source."""
        firsts = self.firsts.to(idx.device)
        src = torch.searchsorted(firsts, idx, right=True) - 1
        return src, idx - firsts[src]

    def split_into(self, out, idx, want_indices):
        src, local = self.split(idx)
        out["source"] = src
        if want_indices:
            out["indices"] = local

    def pair(self, images, labels, idx, want_indices):
        src, local = self.split(idx)
        return (images, labels) + ((local,) if want_indices else ()) + \
            ((src,) if self.return_source else ())

    def state(self, ptr):
        buf = ctypes.create_string_buffer(L.LOADER_MIX_STATE_MAX)
        n = ctypes.c_size_t()
        check(lib.dlc_loader_mix_state_save(ptr, buf, len(buf), ctypes.byref(n)),
              "dlcache.Loader.state_dict")
        return buf.raw[:n.value]

    def describe(self, ptr):
        """What the state dict says of the sources: what identifies them (the paths with
        secrets redacted, the content digests), never a password or a URL's signature. A
        resumed mixture is given its URLs again by the caller."""
        return {"paths": [public_path(p) for p in self.paths], "weights": list(self.weights),
                "content_digests": [int(s["content_digest"]) for s in self.info(ptr)],
                "label_offsets": list(self.offsets),
                "samples_per_epoch": self.samples_per_epoch}

    def store_info(self, first, ptr):
        """The first source's dlcache.info() with the mixture's count and label names."""
        info = dict(first)
        st = lib.dlc_loader_store(ptr)
        si = lib.dlc_store_get_info(st).contents
        info["count"] = si.count
        info["num_labels"] = si.num_labels
        info["classes"] = [lib.dlc_store_label_name(st, i).decode("utf-8", "replace")
                           for i in range(si.num_labels)]
        return info

"""Streaming a store set from object storage: the options Loader and plan() share.

A path that starts with s3://, gs://, http:// or https:// names a store set that `cachewarm
push` uploaded; the C loader reads it through a bounded local cache of shards (cache_dir,
cache_limit) in shard windows (DLC_SAMPLER_SHARD_WINDOWS). This module turns the Python
arguments into the dlc_loader_config fields, opens such a set's store for its schema and labels
(dlc_loader_open_store: only the index is fetched), and plans a run (dlc_loader_plan). It needs
no torch, so that dlcache.plan() works where the Loader cannot be imported.
"""

import contextlib
import ctypes
import logging
import numbers
import os
import re
import signal
import sys
import threading

from . import _lib as L
from ._lib import lib
from .errors import check, redact
from .store import _fspath, _uint

__all__ = ["plan", "is_url", "parse_size"]

URL_SCHEMES = (b"s3://", b"gs://", b"http://", b"https://")


def is_url(path):
    """True when @p path (as _fspath() made it: bytes) is streamed rather than opened."""
    return path.startswith(URL_SCHEMES)


_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
SIZE_RULE = ("kB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB and K, M, G, T: powers of "
             "1024")


def parse_size(value, name="cache_limit"):
    """Bytes from an int or a string such as "50GB", "500MiB", "10G", "4096".

    The usual rule, the same in every tool (cachebench --cache-limit, cacheinfo --plan): kB,
    MB, GB, TB, PB are powers of 1000 ("6MB" is 6,000,000 bytes); KiB, MiB, GiB... and the bare
    K, M, G... are powers of 1024 ("6MiB" and "6M" are 6,291,456 bytes).
    """
    if isinstance(value, bool):
        raise ValueError("%s must be bytes (an int) or a size such as '50GB', got %r"
                         % (name, value))
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m or (m.group(3) and not m.group(2)):
            raise ValueError("%s must be bytes or a size such as '50GB', '500MiB' or '10G' "
                             "(%s), got %r" % (name, SIZE_RULE, value))
        unit = m.group(2).lower()
        base = 1000 if unit and m.group(4) and not m.group(3) else 1024
        n = int(float(m.group(1)) * base ** _POWERS[unit])
    else:
        raise ValueError("%s must be bytes (an int) or a size such as '50GB', got %r"
                         % (name, value))
    if not 0 < n < 2**64:
        raise ValueError("%s must be at least 1 byte (None for no limit), got %r"
                         % (name, value))
    return n


# Ctrl-C while the main thread waits in a C call that downloads (opening a streamed set fetches
# its index there; a server that accepts and never answers holds that call for every attempt's
# timeout). The library asks the progress callback of its network options about ten times a
# second, on the thread that downloads; on the main thread that runs Python's signal handlers, so
# the handler interruptible() installs sets the flag, the callback answers stop, the call returns
# DLC_ECANCELED at once and interruptible() raises KeyboardInterrupt. One callback object for
# every loader: ctypes keeps it alive with the module, as long as any loader may call it.
_INTERRUPTED = [False]


def _net_progress(_user, _p):
    return 1 if _INTERRUPTED[0] else 0


PROGRESS_CB = L.WARM_PROGRESS_FN(_net_progress)

# dlc_warm_flags: DLC_WARM_NO_RETRY (include/dlcache/warm.h).
WARM_NO_RETRY = 1 << 3

_log = logging.getLogger("dlcache")


def _net_log(_user, level, msg):
    lvl = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING}.get(level, logging.INFO)
    _log.log(lvl, "%s", msg.decode("utf-8", "replace") if msg else "")


# The network's notices (retries, waits for another rank's download) for every loader: logging.
NET_LOG_CB = L.LOG_FN(_net_log)


@contextlib.contextmanager
def interruptible():
    """Around a C call on the main thread that may download: Ctrl-C stops its downloads within
    a tenth of a second and raises KeyboardInterrupt when it returns. Does nothing on another
    thread or where the program has its own SIGINT handler."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_sigint(_signum, _frame):
        _INTERRUPTED[0] = True

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        hit, _INTERRUPTED[0] = _INTERRUPTED[0], False
    if hit:
        raise KeyboardInterrupt


def _env_int(name, default):
    v = os.environ.get(name, "")
    if v.strip() == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError("$%s is %r, not an integer" % (name, v)) from None


def default_rank_world(rank, world_size):
    """rank and world_size as every loader (images and tokens) defaults them:
    torch.distributed's when it is initialized (then it is imported already), else $RANK and
    $WORLD_SIZE, else 0 and 1."""
    r = w = None
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            r, w = dist.get_rank(), dist.get_world_size()
    except Exception:  # a torch without distributed support: fall through to the env
        pass
    if r is None:
        r = _env_int("RANK", 0) if rank is None else rank
        w = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
    return (r if rank is None else rank), (w if world_size is None else world_size)


def default_cache_ranks():
    """The processes of this node that share cache_dir: torchrun's $LOCAL_WORLD_SIZE, else 1."""
    return max(1, _env_int("LOCAL_WORLD_SIZE", 1))


def apply(cfg, path, keep, ctx, *, window_shards=4, streams=None, cache_dir=None,
          cache_limit=None, cache_ranks=None, downloads=2, endpoint=None, region=None,
          log=None, timeout=None, retries=None):
    """Set the shard-window and streaming fields of the LoaderConfig @p cfg for @p path.

    The window fields are set for any path (they matter with the windows sampler only); the
    cache and network fields only for a URL, where cache_dir is required. What cfg points to
    is appended to @p keep, which must live until the C call that takes cfg has returned.
    @p ctx names the call in errors ("dlcache.Loader(s3://...)").
    """
    cfg.window_shards = _uint(window_shards, "window_shards", 1, 4095)
    cfg.streams = 0 if streams is None else _uint(streams, "streams", 1, 4095)
    if not is_url(path):
        return
    if cache_dir is None:
        raise ValueError(
            "%s: a URL is streamed through a local cache of its shards: pass cache_dir= (a "
            "folder on this node's local disk, shared by its ranks and jobs) and cache_limit= "
            "(its size, such as '50GB'; None = no limit)" % ctx)
    cfg.cache_dir = _fspath(cache_dir, "cache_dir")
    keep.append(cfg.cache_dir)
    cfg.cache_limit = 0 if cache_limit is None else parse_size(cache_limit)
    cfg.cache_ranks = _uint(default_cache_ranks() if cache_ranks is None else cache_ranks,
                            "cache_ranks", 1, 1 << 16)
    cfg.downloads = _uint(downloads, "downloads", 1, 64)
    cfg.net = net_options(keep, endpoint=endpoint, region=region, log=log, timeout=timeout,
                          retries=retries)


def net_options(keep, *, endpoint=None, region=None, log=None, timeout=None, retries=None):
    """A pointer to the dlc_warm_options of a streamed path's downloads (endpoint, region,
    timeout, retries, Ctrl-C, the log), kept alive in @p keep."""
    net = L.WarmOptions()
    lib.dlc_warm_options_init(ctypes.byref(net))
    for name, value in (("endpoint", endpoint), ("region", region)):
        if value is not None:
            if not isinstance(value, str) or not value:
                raise ValueError("%s must be a non-empty str, got %r" % (name, value))
            b = value.encode()
            keep.append(b)
            setattr(net, name, b)
    if timeout is not None:
        # The rule is the library's (dlc_warm_options, checked in C for every caller): said
        # here first only for a ValueError instead of a DlcacheError.
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) \
                or not 0.1 <= timeout <= 86400:
            raise ValueError("timeout must be seconds in [0.1, 86400] (a request that moves "
                             "less than 1 KiB/s this long is retried; a shorter timeout would "
                             "turn libcurl's checks off), got %r" % (timeout,))
        net.timeout_s = float(timeout)
        # A connection that is not made within the timeout is a timeout too.
        net.connect_timeout_s = min(float(timeout), net.connect_timeout_s or 10.0)
    if retries is not None:
        net.max_retries = _uint(retries, "retries", 0, 1000)
        if net.max_retries == 0:
            net.flags |= WARM_NO_RETRY  # fail fast: 0 in max_retries means the default
    net.progress = PROGRESS_CB  # Ctrl-C (interruptible()); close() stops downloads by itself
    if log is not None:
        # Retries and waits for another rank's download: notices, for the "dlcache" logger
        # (logging's last resort shows them without any set-up), never warnings: nothing for the
        # user to change.
        net.log = NET_LOG_CB
    keep.append(net)
    return ctypes.pointer(net)


class _OpenedStore:
    """A store from dlc_loader_open_store(), as store._read_info() reads one (.h, .path)."""

    def __init__(self, path, cfg, ctx):
        self.h = None
        self.path = path
        h = ctypes.c_void_p()
        with interruptible():
            rc = lib.dlc_loader_open_store(path, ctypes.byref(cfg), ctypes.byref(h))
        check(rc, ctx)
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


def read_info(path, cfg, ctx):
    """dlcache.info() of what a loader of @p path with @p cfg reads: for a URL, the set
    opened from its index (fetched into memory; nothing is written in cfg.cache_dir)."""
    from .store import _read_info
    with _OpenedStore(path, cfg, ctx) as st:
        return _read_info(st)


_PLAN_KEYS = ("shards", "streams", "nodes", "set_bytes", "largest_shard_bytes", "epoch_samples",
              "samples_per_rank", "batches_per_rank", "cache_needed_bytes", "egress_bytes",
              "batch_same_shard", "neighbour_same_shard")


def plan(path, batch_size=256, *, window_shards=4, streams=None, world_size=None,
         cache_ranks=None, downloads=2, drop_last=False, seed=0, cache_dir=None,
         endpoint=None, region=None, timeout=None, retries=None, prefetch=None, device=None,
         rank=None, shuffle=True, sampler=None, cache_limit=None, **loader_args):
    """What a Loader(path, sampler="windows", ...) run would need and do, without reading a
    record (for a URL only the set's index is fetched, into memory: nothing is written in
    cache_dir).

    Takes every argument of the Loader, with the same defaults (world_size from
    torch.distributed or $WORLD_SIZE, cache_ranks from $LOCAL_WORLD_SIZE), so that the same
    keyword arguments give the plan of exactly that Loader: prefetch and device set how many
    batches are in flight (a host Loader keeps one slot beyond prefetch for the batch the loop
    still holds), and so how much of the cache they pin. Arguments that change nothing here
    (crop, dtype, threads...) are accepted and checked by name only.

    Returns a dict about epoch 0: shards, streams (in effect), nodes (world_size /
    cache_ranks), set_bytes, largest_shard_bytes, epoch_samples, samples_per_rank,
    batches_per_rank, cache_needed_bytes (the smallest cache_limit that Loader opens with),
    egress_bytes (downloaded by all nodes together), batch_same_shard and neighbour_same_shard
    (the chance that two samples of a batch, or two neighbours, come from the same shard: the
    shuffle's quality).
    """
    if loader_args:
        try:  # the Loader's own names (it needs torch; without torch, any name is taken)
            import inspect
            from .loader import Loader
            names = set(inspect.signature(Loader).parameters)
        except ImportError:
            names = set(loader_args)
        unknown = sorted(set(loader_args) - names)
        if unknown:
            raise TypeError("dlcache.plan() got arguments that dlcache.Loader does not take: %s"
                            % ", ".join(unknown))
    if isinstance(path, (list, tuple)):
        raise ValueError("dlcache.plan() plans one store set: a mixture's sources are in "
                         "Loader(...).sources (cache_needed_bytes of each)")
    if sampler not in (None, "windows") or not shuffle:
        raise ValueError("dlcache.plan() describes a run in shard windows (sampler='windows', "
                         "shuffled): got sampler=%r, shuffle=%r" % (sampler, shuffle))
    p = _fspath(path, "path")
    ctx = "dlcache.plan(%s)" % redact(os.fsdecode(p))
    cfg = L.LoaderConfig()
    lib.dlc_loader_config_init(ctypes.byref(cfg))
    cfg.sampler = L.SAMPLER_SHARD_WINDOWS
    cfg.batch_size = _uint(batch_size, "batch_size", 1, 1 << 24)
    cfg.drop_last = 1 if drop_last else 0
    cfg.seed = _uint(seed, "seed", 0, 2**64 - 1)
    r, w = default_rank_world(rank, world_size)
    cfg.world_size = _uint(w, "world_size", 1)
    cfg.rank = _uint(r, "rank", 0, cfg.world_size - 1)
    if prefetch is not None:
        cfg.prefetch = _uint(prefetch, "prefetch", 1, L.MAX_PREFETCH)
    host = device is None or str(device) == "cpu"
    if host and cfg.prefetch >= 2:
        # As the Loader opens host batches: one slot beyond prefetch for the batch held over.
        cfg.prefetch = min(cfg.prefetch + 1, L.MAX_PREFETCH)
    keep = []
    apply(cfg, p, keep, ctx, window_shards=window_shards, streams=streams, cache_dir=cache_dir,
          cache_ranks=cache_ranks, downloads=downloads, endpoint=endpoint, region=region,
          timeout=timeout, retries=retries, cache_limit=cache_limit)
    if not is_url(p):
        # The cache check counts the processes sharing a cache: a local set has none, yet its
        # answer should be what the same run streamed would need.
        cfg.cache_ranks = _uint(default_cache_ranks() if cache_ranks is None else cache_ranks,
                                "cache_ranks", 1, 1 << 16)
        cfg.downloads = _uint(downloads, "downloads", 1, 64)
    out = L.LoaderPlanInfo()
    out.struct_size = ctypes.sizeof(out)
    with interruptible():
        rc = lib.dlc_loader_plan(p, ctypes.byref(cfg), ctypes.byref(out))
    check(rc, ctx)
    return {k: getattr(out, k) for k in _PLAN_KEYS}

"""dlcache: pre-decoded image caches that keep GPUs fed.

A thin ctypes binding over libdlcache (no compiled extension):

* ``dlcache.build(sources, out, ...)`` turns an ImageFolder tree (or
  manifests, or WebDataset shards) into a store once;
* ``dlcache.write(samples, path, ...)`` writes a store of records of many
  fields from Python samples (dicts of arrays, tensors, PIL images, numbers);
* ``dlcache.info(path, verify=False)`` describes (and checks) a store;
* ``dlcache.Loader(path, batch_size, ...)`` iterates shuffled, augmented,
  collated batches of a store as torch tensors, zero-copy, with
  ``state_dict()``/``load_state_dict()`` and DistributedSampler sharding;
  the path may be a store set's s3://, gs:// or https:// URL, streamed
  through a bounded local cache (``cache_dir``, ``cache_limit``);
* ``dlcache.plan(path_or_url, batch_size, ...)`` says what such a run
  needs (cache bytes, egress, shuffle quality) without downloading shards.

Errors of the C library arrive as ``dlcache.DlcacheError`` subclasses that
carry the status code and the library's message (file, record, reason).

The shared library is found at $DLCACHE_LIB, inside the package (``pip
install``), the prefix recorded by ``make install``, the source tree's
build/lib, or the system library path (see ``dlcache._lib.find_library``).
"""

import sys as _sys

from ._version import __version__  # noqa: F401
from ._lib import lib as _clib, lib_path as library_path
from .errors import (  # noqa: F401
    CanceledError, ChangedError, CorruptError, CudaError, DecodeError, DlcacheError,
    DlcacheFileNotFoundError, DlcacheOSError, DlcachePermissionError, ExistsError, HTTPError,
    InvalidArgumentError, NetworkError, NoImagesError, NotFoundError, StateError,
    UnsupportedError, VersionError,
    FileNotFound, PermissionDenied,  # the old names of the two above
)
from .store import BuildReport, Store, StoreInfo, build, info, join  # noqa: F401
from ._stream import plan  # noqa: F401
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what IDEs and mypy see of the names loaded on first use (below)
    from .loader import Loader  # noqa: F401
    from .writer import WriteReport, write  # noqa: F401

def __getattr__(name):
    # torch is imported only when the Loader is first used, so build() and
    # info() work (and load fast) in a Python without torch.
    if name == "Loader":
        try:
            from .loader import Loader
        except ModuleNotFoundError as e:
            if e.name not in ("torch", "numpy"):
                raise
            # The python3 first on PATH is often not the one with torch (a pyenv, a bare venv).
            raise ModuleNotFoundError(
                "dlcache.Loader needs %s, which this Python (%s) does not have: run it with the "
                "Python that has torch (Debian's /usr/bin/python3 with python3-torch), or a "
                "venv made with --system-site-packages" % (e.name, _sys.executable),
                name=e.name) from e
        return Loader
    # dlcache.ops (the augmentation ops one at a time) imports numpy when used.
    if name == "ops":
        import importlib
        return importlib.import_module(".ops", __name__)
    # Token stores (dlcache.tokens) import numpy too.
    if name in ("write_tokens", "TokenStore"):
        from . import tokens
        return getattr(tokens, name)
    # numpy is imported by write() only.
    if name in ("write", "WriteReport"):
        from . import writer
        return getattr(writer, name)
    raise AttributeError("module 'dlcache' has no attribute %r" % name)


def __dir__():
    # Loader, write and WriteReport are loaded on first use (above), yet belong in dir().
    return sorted(set(globals()) | set(__all__))


def version():
    """The version of the loaded libdlcache ("MAJOR.MINOR.PATCH")."""
    return _clib.dlc_version().decode()


__all__ = [
    "Loader", "plan", "build", "join", "write", "WriteReport", "info", "Store", "version", "library_path",
    "BuildReport", "StoreInfo",
    "DlcacheError", "InvalidArgumentError", "CorruptError", "VersionError", "NotFoundError",
    "DecodeError", "NoImagesError", "ExistsError", "HTTPError", "NetworkError", "ChangedError",
    "CanceledError", "StateError", "CudaError", "UnsupportedError",
    "DlcacheOSError", "DlcacheFileNotFoundError", "DlcachePermissionError",
    "FileNotFound", "PermissionDenied",
    "write_tokens", "TokenStore",
]

"""Exceptions raised for failed C calls.

Every C call returns a dlc_status; a failure becomes an exception of the
class below that matches its code, carrying the code (``status``), the short
text of dlc_strerror() (``strerror``) and the sentence of dlc_errmsg() that
names the file, the record and the reason (``detail``). Classes also derive
from the builtin exception a Python user would catch for that kind of error
(ValueError for a bad argument, FileNotFoundError for a missing file...).

Every class name ends in ``Error``. The two that did not, ``FileNotFound`` and
``PermissionDenied``, remain as aliases of ``DlcacheFileNotFoundError`` and
``DlcachePermissionError``. Those carry the ``Dlcache`` prefix so that a
``from dlcache import *`` cannot shadow the builtins they derive from.
"""

import ctypes
import errno as _errno

from ._lib import lib

__all__ = [
    "DlcacheError", "InvalidArgumentError", "CorruptError", "VersionError", "NotFoundError",
    "DecodeError", "NoImagesError", "ExistsError", "HTTPError", "NetworkError", "ChangedError",
    "CanceledError", "StateError", "CudaError", "UnsupportedError", "DlcacheOSError",
    "DlcacheFileNotFoundError", "DlcachePermissionError", "check", "error_for", "redact",
]


def redact(text):
    """@p text (a str) with every secret it shows replaced by "REDACTED": the library's own
    redaction (dlc_warm_redact_text(): a URL's user:password and query string, credentials after
    an authorization scheme or a key named like a secret, AWS key ids), the one every C message
    and log line already passed. For what Python itself puts in a message, a repr or a warning
    (a URL the caller gave). A library without the function (an older build) gives "" for any
    text holding "://", rather than risk showing it."""
    if not isinstance(text, str):
        text = str(text)
    if not lib.has("dlc_warm_redact_text"):
        return "" if "://" in text else text
    raw = text.encode("utf-8", "surrogateescape")
    buf = ctypes.create_string_buffer(2 * len(raw) + 64)
    lib.dlc_warm_redact_text(raw, buf, len(buf))
    return buf.value.decode("utf-8", "replace")


class DlcacheError(Exception):
    """A dlcache C call failed.

    Attributes: ``status`` (the negative dlc_status), ``strerror`` (its short
    description) and ``detail`` (the message the library recorded: file,
    record and reason; may be empty).
    """

    # Whether the text of dlc_strerror() goes before the detail. A class whose
    # details always say what went wrong (VersionError) leaves it out.
    _strerror_prefix = True

    def __init__(self, status, strerror, detail, context=None):
        self.status = status
        self.strerror = strerror
        self.detail = detail
        self.context = context
        text = detail or strerror
        if detail and strerror and self._strerror_prefix and \
                strerror.lower() not in detail.lower():
            text = "%s: %s" % (strerror, detail)
        # The C library's detail usually starts with the path; a context that
        # is that path (or is already in the detail) would say it twice.
        if context and not (detail and (detail.startswith(context)
                                        or context + ": " in detail)):
            text = "%s: %s" % (context, text)
        # The C detail passed the library's redaction; the context is Python's (a URL the caller
        # gave, with its password or signature), so the whole text passes it again.
        text = redact(text)
        self._text = text
        Exception.__init__(self, text)

    def __str__(self):
        return self._text

    def __reduce__(self):
        return (type(self), (self.status, self.strerror, self.detail, self.context))


class InvalidArgumentError(DlcacheError, ValueError):
    """DLC_EINVAL: a bad argument or option; the detail names it."""


class CorruptError(DlcacheError):
    """DLC_ECORRUPT: a record or structure of the store is damaged."""


class VersionError(DlcacheError):
    """DLC_EVERSION: not a dlcache store, or a newer format; the detail says which."""

    # Its details say "not a dlcache store (...)" or "store format version N,
    # this library reads ...": the generic text before them would only blur that.
    _strerror_prefix = False


class NotFoundError(DlcacheError, LookupError):
    """DLC_ENOTFOUND: no such record or metadata key."""


class DecodeError(DlcacheError):
    """DLC_EDECODE: an image that cannot be decoded."""


class NoImagesError(DlcacheError):
    """DLC_ENOIMAGES: the sources hold no valid image."""


class ExistsError(DlcacheError, FileExistsError):
    """DLC_EEXIST: the output exists and force was not given."""


class HTTPError(DlcacheError):
    """DLC_EHTTP."""


class NetworkError(DlcacheError):
    """DLC_ENETWORK."""


class ChangedError(DlcacheError):
    """DLC_ECHANGED: a source changed while it was read."""


class CanceledError(DlcacheError):
    """DLC_ECANCELED: a callback asked to stop."""


class StateError(DlcacheError, RuntimeError):
    """DLC_ESTATE: a call that is not valid in the current state."""


class CudaError(DlcacheError):
    """DLC_ECUDA."""


class UnsupportedError(DlcacheError, NotImplementedError):
    """DLC_ENOSYS: not supported on this system."""


class DlcacheOSError(DlcacheError, OSError):
    """The system refused (a negated errno value); ``errno`` is set."""

    def __init__(self, status, strerror, detail, context=None):
        DlcacheError.__init__(self, status, strerror, detail, context)
        self.errno = -status


class DlcacheFileNotFoundError(DlcacheOSError, FileNotFoundError):
    """-ENOENT."""


class DlcachePermissionError(DlcacheOSError, PermissionError):
    """-EACCES, -EPERM."""


# The names before they all ended in Error; kept so that code using them still works.
FileNotFound = DlcacheFileNotFoundError
PermissionDenied = DlcachePermissionError


# dlcache's own codes: the DLC_ERRORS list of include/dlcache/status.h, name
# (without DLC_) -> (value, class). tests/python/test_layout.py parses the
# header and checks that this table has every code with the same value and
# the intended class, and that dlc_strerror() gives the header's texts.
CODES = {
    "EINVAL": (-1000, InvalidArgumentError),
    "ECORRUPT": (-1001, CorruptError),
    "EVERSION": (-1002, VersionError),
    "ENOTFOUND": (-1003, NotFoundError),
    "EDECODE": (-1004, DecodeError),
    "ENOIMAGES": (-1005, NoImagesError),
    "EEXIST": (-1006, ExistsError),
    "EHTTP": (-1007, HTTPError),
    "ENETWORK": (-1008, NetworkError),
    "ECHANGED": (-1009, ChangedError),
    "ECANCELED": (-1010, CanceledError),
    "ESTATE": (-1011, StateError),
    "ECUDA": (-1012, CudaError),
    "ENOSYS": (-1013, UnsupportedError),
}
_BY_CODE = {value: cls for value, cls in CODES.values()}
_BY_ERRNO = {_errno.ENOENT: DlcacheFileNotFoundError, _errno.EACCES: DlcachePermissionError,
             _errno.EPERM: DlcachePermissionError}


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def error_for(status, context=None):
    """Build the exception for a failed call. Call it on the thread that made
    the call and before any other dlcache call: dlc_errmsg() is thread-local
    and overwritten by the next call."""
    detail = _text(lib.dlc_errmsg())
    strerror = _text(lib.dlc_strerror(status))
    if status <= -1000:
        cls = _BY_CODE.get(status, DlcacheError)
    else:
        cls = _BY_ERRNO.get(-status, DlcacheOSError)
    # The context is often a path the caller gave: a URL's password or signature must not ride
    # on the exception (its context, vars(), a pickle of it) past what str() shows.
    if isinstance(context, str) and "://" in context:
        context = redact(context)
    return cls(status, strerror, detail, context)


def check(status, context=None):
    """Raise the matching DlcacheError when @p status is negative; return it otherwise."""
    if status < 0:
        raise error_for(status, context)
    return status

"""Loader.report(): where the loader's and the training loop's time went, and what bounds the
step (docs/WAITING.md). A thin object over the C library's dlc_loader_report, plus what only
Python sees: the batches the loop kept past their turn."""

import ctypes
from typing import Any, Dict

from . import _lib as L
from ._lib import lib
from .errors import check

# Keeping batches took at least this share of the loop's step: the consumer bounds.
_KEPT_LARGE = 0.25

_ADVICE_KEPT = ("do not keep a batch's tensors past its step (each kept one takes a new slot's "
                "memory when the loader needs its slot back): keep a loss or a metric, or .clone() what you need "
                "once, deliberately")


class Report:
    """What bounds the training step, over a window of batches.

    Attributes:
        bound: "model", "cpu", "storage", "network", "copy", "consumer",
            "batch" (the workers idle while the loop waits: small batches, whose
            cost beyond their samples is the limit), or "unknown" before the first
            batch (no window to judge yet).
        reason: the verdict in a sentence, with the figures behind it.
        advice: what to change.
    ``str(report)`` is a short table and the sentence; ``as_dict()`` is a flat
    dict of numbers and strings (for TensorBoard or W&B)."""

    def __init__(self, raw: "L.LoaderReport", kept_seconds: float = 0.0, kept_batches: int = 0):
        self._raw = raw
        self._values = {name: getattr(raw, name) for name, _ in L.LoaderReport._fields_
                        if name not in ("struct_size", "reason", "advice")}
        self.bound = lib.dlc_bound_name(raw.bound).decode()
        self.reason = raw.reason.decode(errors="replace")
        self.advice = raw.advice.decode(errors="replace")
        step = raw.wait_seconds + raw.away_seconds
        self.kept_seconds = kept_seconds
        self.kept_batches = kept_batches
        self.kept_share = kept_seconds / step if step > 0 else 0.0
        # Handing kept batches' memory over is part of the loop's step (the C loader counts it
        # as time away): when it takes more of it than the wait for data, it is the thing to fix.
        if self.kept_share >= _KEPT_LARGE and self.kept_share >= raw.input_share:
            self.bound = "consumer"
            self.reason = ("the loop kept %d batches past their turn, and handing their "
                           "slots' memory over took %.0f%% of its step"
                           % (kept_batches, 100 * self.kept_share))
            self.advice = _ADVICE_KEPT

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def as_dict(self) -> Dict[str, Any]:
        """Every figure of the report, flat: shares in [0, 1], seconds, counts, and bound,
        reason, advice."""
        out = dict(self._values)
        out["bound"] = self.bound
        out["reason"] = self.reason
        out["advice"] = self.advice
        out["kept_seconds"] = self.kept_seconds
        out["kept_batches"] = self.kept_batches
        out["kept_share"] = self.kept_share
        return out

    def __str__(self):
        raw = L.LoaderReport.from_buffer_copy(self._raw)
        buf = ctypes.create_string_buffer(4096)
        lib.dlc_loader_report_text(ctypes.byref(raw), buf, len(buf))
        text = buf.value.decode(errors="replace")
        if self.bound == "consumer" and raw.bound != L.BOUND_CONSUMER:
            head = text.split("bound:")[0]
            text = (head + "  loop       keeping batches      %5.1f%% (%d batches)\n"
                    "bound: consumer: %s.\nwhat to do: %s.\n"
                    % (100 * self.kept_share, self.kept_batches, self.reason, self.advice))
        return text

    def __repr__(self):
        return "dlcache.Report(bound=%r, batches=%d, input_share=%.3f)" % (
            self.bound, self._raw.batches, self._raw.input_share)


def get(ptr, last, kept_seconds, kept_batches, ctx):
    """The C report of the loader at ptr over the last `last` batches (0: since open)."""
    raw = L.LoaderReport()
    raw.struct_size = ctypes.sizeof(raw)
    check(lib.dlc_loader_get_report(ptr, last, ctypes.byref(raw)), ctx)
    return Report(raw, kept_seconds, kept_batches)

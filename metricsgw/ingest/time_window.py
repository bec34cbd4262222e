"""Refuse samples outside the window the store can keep: too far ahead of the clock, or older
than retention.

A sample ten years ahead (or at int64 max) would open a partition that retention never reaches;
one older than --storage.retention.time would be deleted by the next retention pass after being
acknowledged. Prometheus's head and Mimir (creation_grace_period, 10 minutes) refuse both; so do
we, with a 400 naming the setting, keeping the rest of the request.

The common case costs one min and one max over the request's timestamps (numpy); the per-sample
masks are built only when a bound is crossed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from .. import npsort
from ..config import format_duration
from ..remote.decoded import DecodedWrite
from .validate import render

TOO_FAR_IN_FUTURE = "too_far_in_future"
TOO_OLD = "too_old"


@dataclass(frozen=True)
class Refused:
    reason: str
    message: str
    samples: int
    histograms: int = 0


@dataclass(frozen=True)
class SampleTimeWindow:
    grace_ms: int  # --ingest.creation-grace-period
    retention_ms: int  # --storage.retention.time
    clock: Callable[[], float] = time.time

    @classmethod
    def from_config(cls, cfg) -> "SampleTimeWindow":
        return cls(int(cfg.ingest_creation_grace_period * 1000), int(cfg.storage_retention_time * 1000))

    def apply(self, decoded: DecodedWrite) -> tuple[DecodedWrite, list[Refused]]:
        """(the request without refused samples, one Refused per reason that fired)."""
        now_ms = int(self.clock() * 1000)
        lo, hi = now_ms - self.retention_ms, now_ms + self.grace_ms
        refused = self._native(decoded, lo, hi)  # histograms and exemplars, first (they change decoded)
        t = decoded.t
        if len(t) == 0 or (t.min() >= lo and t.max() <= hi):
            return (decoded.subset(np.ones(len(t), bool)) if refused else decoded), refused
        future, old = t > hi, t < lo
        if future.any():
            refused.append(Refused(TOO_FAR_IN_FUTURE, _describe(
                decoded, future, f"more than {format_duration(self.grace_ms / 1000)} ahead of the server's clock "
                                 "(--ingest.creation-grace-period)"), int(future.sum())))
        if old.any():
            refused.append(Refused(TOO_OLD, _describe(
                decoded, old, f"older than the retention window of {format_duration(self.retention_ms / 1000)} "
                              "(--storage.retention.time)"), int(old.sum())))
        return decoded.subset(~(future | old)), refused

    def _native(self, decoded: DecodedWrite, lo: int, hi: int) -> list[Refused]:
        """Histograms outside the window are refused like samples; exemplars outside it are dropped
        quietly, as Prometheus drops exemplars it cannot store without failing the write."""
        nat = decoded.native
        if nat is None:
            return []
        hist_in = (nat.hist_t >= lo) & (nat.hist_t <= hi)
        ex_in = (nat.ex_t >= lo) & (nat.ex_t <= hi)
        if hist_in.all() and ex_in.all():
            return []
        decoded.native = nat.keep(hist_in, ex_in)
        refused = []
        for reason, mask, why in ((TOO_FAR_IN_FUTURE, nat.hist_t > hi, "ahead of the server's clock by more than "
                                   f"{format_duration(self.grace_ms / 1000)} (--ingest.creation-grace-period)"),
                                  (TOO_OLD, nat.hist_t < lo, "older than the retention window of "
                                   f"{format_duration(self.retention_ms / 1000)} (--storage.retention.time)")):
            if mask.any():
                refused.append(Refused(reason, f"{int(mask.sum())} native histograms {why}", 0, int(mask.sum())))
        return refused


def _describe(decoded: DecodedWrite, mask: np.ndarray, why: str) -> str:
    at = int(np.argmax(mask))
    series_of = np.repeat(np.arange(len(decoded.keys)), decoded.counts)
    hit = series_of[mask]
    first = int(series_of[at])
    try:
        shown = render(decoded.label_pairs(first))
    except Exception:  # labels that cannot be decoded are reported by validation, not here
        shown = f"#{first}"
    return (f"{int(mask.sum())} samples of {len(npsort.unique(hit))} series {why}, e.g. series {shown} "
            f"at {_when(int(decoded.t[at]))}")


def _when(t_ms: int) -> str:
    try:
        return datetime.fromtimestamp(t_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"
    except (OverflowError, ValueError, OSError):  # beyond what datetime can show (e.g. int64 max)
        return f"{t_ms} ms"

"""Ingest limits: label shape (always) and cardinality (new series only).

``IngestLimits.check(labels, is_new, storage)`` returns None to admit a series, or a
``Rejection(reason, message, samples)`` whose message names the limit, the flag that raises
it and the series. Existing series always keep ingesting: a cardinality limit only stops
series storage does not know yet.

Counting without overshoot: storage's active-series counts cost a scan, so they are read at
most every ``refresh_s`` and cached; series admitted here but not yet in storage (the rest of
this request, concurrent requests waiting on the WAL) are counted as "pending" on top, keyed
by series id so a series admitted twice counts once. When the cached count is refreshed,
pending series that storage now has are settled (they are in the new count); pending series
that never reached storage (a failed append) expire after ``pending_ttl_s``.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from ..model import METRIC_NAME, Labels, Rejection, series_id

REASONS = ("max_series", "max_series_per_metric", "max_label_names_per_series",
           "label_name_too_long", "label_value_too_long")


class SeriesCounts(Protocol):
    def has_series(self, sid: int) -> bool: ...
    def active_series(self) -> int: ...
    def active_series_for_metric(self, name: str) -> int: ...


def describe_series(labels: Labels, limit: int = 300) -> str:
    """name{a="b", ...} for messages, cut to ``limit`` characters."""
    name = ""
    parts = []
    for n, v in labels:
        if n == METRIC_NAME:
            name = v
        else:
            parts.append(f'{n}="{v if len(v) <= 80 else v[:77] + "..."}"')
    text = f"{name}{{{', '.join(parts)}}}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + "..."


def _byte_len_over(s: str, limit: int) -> int:
    """The UTF-8 length of s if it is over limit, else 0 (skips encoding when it cannot be over)."""
    n = len(s)
    if n > limit:
        return len(s.encode("utf-8", "surrogateescape"))
    if n * 4 <= limit or s.isascii():
        return 0
    b = len(s.encode("utf-8", "surrogateescape"))
    return b if b > limit else 0


class _PendingCount:
    """One cardinality counter: storage's count (cached) + series admitted since that read."""

    def __init__(self) -> None:
        self.stored = 0
        self.read_at = -1e18
        self.pending: dict[int, float] = {}  # sid -> admitted at (monotonic)

    def value(self, now: float, refresh_s: float, ttl_s: float, storage: SeriesCounts, read) -> int:
        if now - self.read_at >= refresh_s:
            self.stored = read()
            self.read_at = now
            # settle: what storage has is in the fresh count; what never arrived expires
            self.pending = {sid: t for sid, t in self.pending.items()
                            if now - t < ttl_s and not storage.has_series(sid)}
        return self.stored + len(self.pending)

    def admit(self, sid: int, now: float) -> None:
        self.pending[sid] = now


class IngestLimits:
    def __init__(self, cfg: Any, *, refresh_s: float = 1.0, pending_ttl_s: float = 120.0) -> None:
        self.max_series = int(cfg.ingest_max_series)
        self.max_series_per_metric = int(cfg.ingest_max_series_per_metric)
        self.max_label_names = int(cfg.ingest_max_label_names_per_series)
        self.max_name_len = int(cfg.ingest_max_label_name_length)
        self.max_value_len = int(cfg.ingest_max_label_value_length)
        self.refresh_s = refresh_s
        self.pending_ttl_s = pending_ttl_s
        self._total = _PendingCount()
        self._per_metric: dict[str, _PendingCount] = {}

    def check(self, labels: Labels, is_new: bool, storage: SeriesCounts, *,
              sid: int | None = None, samples: int = 0) -> Rejection | None:
        """None to admit; else a Rejection. An admitted NEW series is counted at once."""
        bad = self._check_shape(labels)
        if bad is not None:
            return Rejection(bad[0], bad[1], samples)
        if not is_new or (self.max_series == 0 and self.max_series_per_metric == 0):
            return None
        return self._admit_new(labels, storage, series_id(labels) if sid is None else sid, samples)

    def check_many(self, labels_list: list[Labels], is_new: list[bool], storage: SeriesCounts,
                   sids: list[int], samples: list[int]) -> list[Rejection | None]:
        """``check`` for many series in order (same answers, same counting): the label-shape
        limits are pre-screened with numpy, so only series that might break one pay per-label work."""
        suspect = self._shape_suspects(labels_list)
        cardinality = bool(self.max_series or self.max_series_per_metric)
        out: list[Rejection | None] = []
        for k, labels in enumerate(labels_list):
            if suspect[k]:
                bad = self._check_shape(labels)
                if bad is not None:
                    out.append(Rejection(bad[0], bad[1], samples[k]))
                    continue
            if cardinality and is_new[k]:
                out.append(self._admit_new(labels, storage, sids[k], samples[k]))
            else:
                out.append(None)
        return out

    def _shape_suspects(self, labels_list: list[Labels]) -> np.ndarray:
        """Per series: could it break a label-shape limit? (exact check follows for those)."""
        n = len(labels_list)
        counts = np.fromiter(map(len, labels_list), np.int64, n)
        suspect = counts > self.max_label_names if self.max_label_names else np.zeros(n, bool)
        if not (self.max_name_len or self.max_value_len):
            return suspect
        total = int(counts.sum())
        series_of = np.repeat(np.arange(n), counts)
        for limit, pos in ((self.max_name_len, 0), (self.max_value_len, 1)):
            if not limit:
                continue
            strings = [pair[pos] for labels in labels_list for pair in labels]
            # a str of L characters is at most 4L UTF-8 bytes: only longer ones can be over
            lens = np.fromiter(map(len, strings), np.int64, total)
            maybe = lens * 4 > limit
            if maybe.any():
                suspect[series_of[maybe]] = True
        return suspect

    def forget(self, storage: SeriesCounts, dropped: set[int] | None) -> None:
        """Storage dropped series (retention): settle what the counters hold (total and per metric)
        and drop the per-metric ones left with nothing pending, so there is not one per metric ever
        seen. A pending series settles if storage has it, was dropped, or is past its TTL; a settled
        counter re-reads storage's count at its next use, so this changes no answer."""
        now = time.monotonic()
        for c in [self._total, *self._per_metric.values()]:
            c.pending = {sid: t for sid, t in c.pending.items()
                         if now - t < self.pending_ttl_s and not storage.has_series(sid)
                         and (dropped is None or sid not in dropped)}
            c.read_at = -1e18
        self._per_metric = {name: c for name, c in self._per_metric.items() if c.pending}

    # -- label shape ------------------------------------------------------------------------------
    def _check_shape(self, labels: Labels) -> tuple[str, str] | None:
        if self.max_label_names and len(labels) > self.max_label_names:
            return ("max_label_names_per_series",
                    f"series has {len(labels)} labels, more than the limit "
                    f"--ingest.max-label-names-per-series={self.max_label_names} "
                    f"(raise the flag or drop labels with a rule): {describe_series(labels)}")
        for name, value in labels:
            if self.max_name_len:
                n = _byte_len_over(name, self.max_name_len)
                if n:
                    return ("label_name_too_long",
                            f"label name {_cut(name, 40)!r} is {n} bytes, longer than the limit "
                            f"--ingest.max-label-name-length={self.max_name_len}: {describe_series(labels)}")
            if self.max_value_len:
                n = _byte_len_over(value, self.max_value_len)
                if n:
                    return ("label_value_too_long",
                            f"value of label {_cut(name, 80)!r} is {n} bytes, longer than the limit "
                            f"--ingest.max-label-value-length={self.max_value_len}: {describe_series(labels)}")
        return None

    # -- cardinality ------------------------------------------------------------------------------
    def _admit_new(self, labels: Labels, storage: SeriesCounts, sid: int, samples: int) -> Rejection | None:
        now = time.monotonic()
        if self.max_series:
            if sid not in self._total.pending:
                total = self._total.value(now, self.refresh_s, self.pending_ttl_s, storage, storage.active_series)
                if total >= self.max_series:
                    return Rejection(
                        "max_series",
                        f"active series limit reached ({total} series, limit --ingest.max-series="
                        f"{self.max_series}); new series are dropped, existing ones keep ingesting "
                        f"(raise the flag or drop series with a rule): {describe_series(labels)}",
                        samples)
        per: _PendingCount | None = None
        if self.max_series_per_metric:
            name = ""
            for n, v in labels:
                if n == METRIC_NAME:
                    name = v
                    break
            per = self._per_metric.get(name)
            if per is None:
                per = self._per_metric[name] = _PendingCount()
            if sid not in per.pending:
                count = per.value(now, self.refresh_s, self.pending_ttl_s, storage,
                                  lambda: storage.active_series_for_metric(name))
                if count >= self.max_series_per_metric:
                    return Rejection(
                        "max_series_per_metric",
                        f"series limit per metric reached for {name!r} ({count} series, limit "
                        f"--ingest.max-series-per-metric={self.max_series_per_metric}); new series "
                        f"are dropped, existing ones keep ingesting (raise the flag or drop labels "
                        f"with a rule): {describe_series(labels)}",
                        samples)
        # admitted: count it now so the rest of this burst sees it
        if self.max_series:
            self._total.admit(sid, now)
        if per is not None:
            per.admit(sid, now)
        return None

"""DecodedWrite -> AppendBatch: validation, relabelling, ingest limits, series ids.

The expensive part of ingest is per-label work, so its result is cached by the series'
raw label key (the bytes the sender sent). A request whose series are all known does no
label work at all: one dict lookup per series, then numpy for the samples.

Cache values are one of
  int          the series id; storage has the series (confirmed)
  _Admit       labels validated and relabelled, but storage did not have the series when
               last seen (new in a batch that may not have been stored, or refused by a
               limit): the limit check and has_series are repeated until confirmed
  _Refuse      rejected for good under the current rules (bad labels, relabel drop)
Limit refusals are never cached as final: they depend on storage state that changes.
The cache is cleared when the rules change (their generation bumps) and when it grows
past ``max_cache_entries``. It assumes storage never forgets a series while we run; call
``clear_cache()`` if it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BadData
from ..model import Labels, series_id
from ..remote.codec import DecodedWrite
from ..remote.validate import LabelProblem, render, validate_labels
from ..storage.batch import AppendBatch

RELABEL_DROP = "relabel_drop"
RELABEL_INVALID = "relabel_invalid"
HISTOGRAMS_UNSUPPORTED = "native_histograms_unsupported"
EXEMPLARS_UNSUPPORTED = "exemplars_unsupported"
UNDECODABLE_LABELS = "invalid_labels"


@dataclass(frozen=True)
class Rejection:
    reason: str  # e.g. invalid_labels, duplicate_label_names, relabel_drop, a limit name
    message: str  # names the series and the problem (and the setting, for limits)
    samples: int  # samples of this request not stored because of it


@dataclass(frozen=True)
class _Admit:
    labels: Labels
    sid: int


@dataclass(frozen=True)
class _Refuse:
    reason: str
    message: str


class IngestPipeline:
    def __init__(self, storage: Any, telemetry: Any, rules_holder: Any = None, limits: Any = None,
                 max_cache_entries: int = 2_000_000) -> None:
        self.storage = storage
        self.telemetry = telemetry
        self.rules_holder = rules_holder
        self.limits = limits
        self.max_cache_entries = max_cache_entries
        self._cache: dict[Any, Any] = {}
        self._generation = rules_holder.generation if rules_holder is not None else None

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def process(self, decoded: DecodedWrite) -> tuple[AppendBatch, list[Rejection]]:
        self._maybe_reset()
        self._count_unsupported(decoded)
        keys = decoded.keys
        n = len(keys)
        if n == 0:
            return AppendBatch(metadata=list(decoded.metadata)), []
        found = list(map(self._cache.get, keys))
        try:
            # The hot path: every series known and confirmed -> ints only.
            sids = np.array(found, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return self._process_slow(decoded, found)
        return AppendBatch(sid=np.repeat(sids, decoded.counts), t=decoded.t, v=decoded.v,
                           metadata=list(decoded.metadata)), []

    # ------------------------------------------------------------------ internals

    def _maybe_reset(self) -> None:
        if self.rules_holder is not None and self.rules_holder.generation != self._generation:
            self._cache.clear()
            self._generation = self.rules_holder.generation
        if len(self._cache) > self.max_cache_entries:
            self._cache.clear()

    def _count_unsupported(self, decoded: DecodedWrite) -> None:
        if decoded.histograms:
            self.telemetry.histograms_discarded.labels(HISTOGRAMS_UNSUPPORTED).inc(decoded.histograms)
        if decoded.exemplars:
            self.telemetry.exemplars_discarded.labels(EXEMPLARS_UNSUPPORTED).inc(decoded.exemplars)

    def _process_slow(self, decoded: DecodedWrite, found: list) -> tuple[AppendBatch, list[Rejection]]:
        n = len(found)
        counts = decoded.counts
        sids = np.zeros(n, np.int64)
        keep = np.ones(n, bool)
        rejections: list[Rejection] = []
        new_series: list[tuple[int, Labels]] = []
        new_in_batch: set[int] = set()
        cache = self._cache
        for i, entry in enumerate(found):
            if type(entry) is int:
                sids[i] = entry
                continue
            if entry is None:
                entry = self._resolve(decoded, i)
                if decoded.keys[i] is not None:
                    cache[decoded.keys[i]] = entry
            if isinstance(entry, _Refuse):
                keep[i] = False
                rejections.append(Rejection(entry.reason, entry.message, int(counts[i])))
                continue
            # _Admit: a valid series storage may not have yet.
            sid = entry.sid
            is_new = sid not in new_in_batch and not self.storage.has_series(sid)
            refusal = self.limits.check(entry.labels, is_new, self.storage) if self.limits is not None else None
            if refusal is not None:
                keep[i] = False
                rejections.append(Rejection(refusal.reason, refusal.message, int(counts[i])))
                continue
            sids[i] = sid
            if is_new:
                new_in_batch.add(sid)
                new_series.append((sid, entry.labels))
            elif sid not in new_in_batch:
                cache[decoded.keys[i]] = sid  # storage has it: confirmed, skip all checks from now on
        for rej in rejections:
            if rej.samples:
                self.telemetry.samples_discarded.labels(rej.reason).inc(rej.samples)
        if keep.all():
            sid_col, t, v = np.repeat(sids, counts), decoded.t, decoded.v
        else:
            mask = np.repeat(keep, counts)
            sid_col, t, v = np.repeat(sids[keep], counts[keep]), decoded.t[mask], decoded.v[mask]
        batch = AppendBatch(new_series=new_series, sid=sid_col, t=t, v=v, metadata=list(decoded.metadata))
        return batch, rejections

    def _resolve(self, decoded: DecodedWrite, i: int) -> _Admit | _Refuse:
        """Full label work for one unseen series: decode, validate, relabel, hash."""
        problem = decoded.problems.get(i)
        if problem is not None:
            return _Refuse(UNDECODABLE_LABELS, f"series #{i}: {problem}")
        try:
            labels = validate_labels(decoded.label_pairs(i))
        except LabelProblem as err:
            return _Refuse(err.reason, err.message)
        except BadData as err:  # corrupt bytes inside this series' labels
            return _Refuse(UNDECODABLE_LABELS, f"series #{i}: {err}")
        if self.rules_holder is not None:
            relabelled = self.rules_holder.current.apply(labels)
            if relabelled is None:
                return _Refuse(RELABEL_DROP, f"series {render(labels)}: dropped by relabel rules")
            if relabelled != labels:
                try:
                    relabelled = validate_labels(relabelled)
                except LabelProblem as err:
                    return _Refuse(RELABEL_INVALID, f"after relabelling: {err.message}")
            labels = relabelled
        return _Admit(labels, series_id(labels))

"""DecodedWrite -> AppendBatch: validation, relabelling, ingest limits, series ids.

The expensive part of ingest is per-label work, so its result is cached by the series'
raw label key (the bytes the sender sent). A request whose series are all known does no
label work at all: one compiled lookup for all its series, then numpy for the samples. The codec asks
``known_sids`` while decoding such a request (series stored, or dropped by the rules), which
spares it the walk over the labels too (codec._decode_v1_known); what it found travels in
``DecodedWrite.sids`` and ``.dropped``.

What the cache holds, and where: series_cache.py.
New series are resolved in bulk (``_resolve_many``): one parse for all their labels,
vectorised validation (bulk.py), one pass of hashing; odd series fall back to the exact
per-series validation, so messages and results do not depend on which path ran.
Limit refusals are never cached as final: they depend on storage state that changes.
The cache is cleared when the rules change (their generation bumps) and when it holds more
than ``max_cache_entries`` beyond the series storage holds (``storage.series_count``). When
retention drops series from storage (``storage.series_epoch`` moves), their entries leave the
cache, so it follows the series storage holds, not history; a
write that raced with the drop is refused by storage (503) and its retry resolves the series again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import RELABEL_DROP, Labels, Rejection, series_keys_and_ids
from ..remote.decoded import DecodedWrite
from ..remote.series_keys import cache_keys
from ..storage.batch import AppendBatch, NativeSamples
from .bulk import validate_many, validate_records
from .series_cache import DROPPED, Admit, Refuse, SeriesCache
from .time_window import SampleTimeWindow
from .one_series import one_by_one
from .validate import INVALID_HISTOGRAM


def _drop_rejection(series: int, samples: int) -> Rejection:
    """All of a request's configured drops as one record: nobody reads them one by one (the
    write is a success) and one record per series cost more than the rest of the request."""
    return Rejection(RELABEL_DROP, f"{series} series dropped by relabel rules", samples)


class IngestPipeline:
    def __init__(self, storage: Any, telemetry: Any, rules_holder: Any = None, limits: Any = None,
                 max_cache_entries: int = 2_000_000, time_window: SampleTimeWindow | None = None) -> None:
        self.storage = storage
        self.time_window = time_window
        self.telemetry = telemetry
        self.rules_holder = rules_holder
        self.limits = limits
        self.max_cache_entries = max_cache_entries
        self._cache = SeriesCache()
        self._fresh_keys: dict[int, bytes] = {}
        self._unconfirmed: dict[int, Any] = {}  # sid -> cache key, of new series in batches not yet appended
        self._pair_pool: dict[tuple[str, str], tuple[str, str]] = {}  # shared label pairs (bulk.py)
        self._generation = rules_holder.generation if rules_holder is not None else None
        self._series_epoch = getattr(storage, "series_epoch", 0)

    def clear_cache(self) -> None:
        self._cache.clear()
        self._unconfirmed.clear()

    def confirm(self, batch: AppendBatch) -> None:
        """Call once ``storage.append(batch)`` returned: the batch's new series are stored now, so their
        cache entries become confirmed ids and the series' next write takes the vectorised path at once
        (otherwise it re-checked limits and storage once more, series by series). A batch whose append
        failed is never confirmed: its series are checked again when they come back."""
        if not batch.new_series:
            return
        pop, admitted, has_series = self._unconfirmed.pop, self._cache.admitted, self.storage.has_series
        confirmed: list[tuple[Any, int]] = []
        for sid, _ in batch.new_series:
            key = pop(sid, None)
            if key is None or not has_series(sid):
                continue
            entry = admitted(key)
            if entry is not None and entry.sid == sid:  # not replaced meanwhile (rules reloaded, cache reset)
                confirmed.append((key, sid))
        self._cache.remember_ids(confirmed)

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def cache_bytes(self) -> int:
        """About the bytes the series cache holds (/metrics)."""
        return self._cache.nbytes()

    def process(self, decoded: DecodedWrite) -> tuple[AppendBatch, list[Rejection]]:
        if self.time_window is None:
            return self._process(decoded)
        # Samples outside the storable window go first: a series left without samples is then
        # not created at all (as in Prometheus's head, which checks bounds before the series).
        decoded, refused = self.time_window.apply(decoded)
        batch, rejections = self._process(decoded)
        for r in refused:
            if r.samples:
                self.telemetry.samples_discarded.labels(r.reason).inc(r.samples)
            if r.histograms:
                self.telemetry.histograms_discarded.labels(r.reason).inc(r.histograms)
        return batch, [Rejection(r.reason, r.message, r.samples) for r in refused] + rejections

    def known_sids(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
        """What the cache says of these v1 series keys (the halves of ``series_keys.cache_keys``) if every one
        is a confirmed id or dropped by the rules: (ids, which are dropped or None); else None. The codec's
        ``known`` (codec.KnownSids), so that a request of known series is decoded without walking their
        labels. The cache is brought up to date first (rules reloaded, series dropped by retention), as
        ``process`` does before its lookup."""
        self._maybe_reset()
        return self._cache.known_halves(hi, lo)

    def _process(self, decoded: DecodedWrite) -> tuple[AppendBatch, list[Rejection]]:
        reset = self._maybe_reset()
        n = len(decoded.keys)
        if n == 0:
            return AppendBatch(metadata=list(decoded.metadata)), []
        if decoded.sids is not None and not reset:  # ids found before a reset may be ids it dropped: look again
            sids, dropped = decoded.sids, decoded.dropped
            if dropped is not None and dropped.any():
                return self._known_with_drops(decoded, sids[~dropped], ~dropped)
        else:
            keys = cache_keys(decoded.keys)
            resolved = self._cache.known(keys) if decoded.version == 1 else None
            if resolved is not None:
                sids, dropped = resolved
                if dropped is not None:
                    return self._known_with_drops(decoded, sids[~dropped], ~dropped)
            else:
                sids = self._cache.ids(keys)  # every series known and confirmed
                if sids is None:
                    return self._process_with_drops(decoded, self._cache.entries(keys), keys)
        batch = AppendBatch(sid=np.repeat(sids, decoded.counts), t=decoded.t, v=decoded.v,
                            metadata=list(decoded.metadata))
        return batch, self._add_native(batch, decoded, sids, None)

    # ------------------------------------------------------------------ internals

    def _maybe_reset(self) -> bool:
        """Bring the cache up to date; True if it dropped entries (rules reloaded, series dropped)."""
        reset = False
        if self.rules_holder is not None and self.rules_holder.generation != self._generation:
            self.clear_cache()
            self._generation = self.rules_holder.generation
            reset = True
        # The bound is on entries beyond the series storage holds (refused, dropped, not yet stored):
        # those are what can pile up. A bound on all entries would clear the cache on every pass once
        # more series are active than it allows, and every series would then be resolved again.
        if self.cache_size > self.max_cache_entries + getattr(self.storage, "series_count", 0):
            self._cache.clear()
            reset = True
        if len(self._unconfirmed) > self.max_cache_entries:  # appends that failed leave theirs behind
            self._unconfirmed.clear()
        epoch = getattr(self.storage, "series_epoch", 0)
        if epoch != self._series_epoch:
            self._forget(self.storage.dropped_since(self._series_epoch))
            self._series_epoch = epoch
            reset = True
        return reset

    def _forget(self, dropped: np.ndarray | None) -> None:
        """Drop what refers to series storage no longer has (None: it cannot say which)."""
        gone = None if dropped is None else set(dropped.tolist())
        if gone is None:
            self._cache.clear()
        else:
            self._cache.forget(dropped, gone)
        self._pair_pool.clear()  # label pairs of series that are gone (pods) would stay otherwise
        if self.limits is not None and hasattr(self.limits, "forget"):
            self.limits.forget(self.storage, gone)

    def _add_native(self, batch: AppendBatch, decoded: DecodedWrite, kept_sids: np.ndarray,
                    keep: np.ndarray | None, dropped: np.ndarray | None = None) -> list[Rejection]:
        """Put the histograms and exemplars of the kept series (``keep``: per series, None: all;
        ``kept_sids``: their ids in order) into the batch; ``dropped`` marks the series the relabel
        rules dropped (their histograms and exemplars count as written). Returns the refusals of
        invalid histograms of kept series."""
        parts = decoded.native
        if parts is None:
            return []
        if dropped is not None and dropped.any():
            gone = parts.take(np.flatnonzero(dropped))
            dropped_hist, dropped_ex = gone.histograms + sum(n for n, _ in gone.invalid.values()), gone.exemplars
        else:
            dropped_hist = dropped_ex = 0
        if keep is not None:
            parts = parts.take(np.flatnonzero(keep))
        batch.native = NativeSamples(np.repeat(kept_sids, parts.hist_counts), parts.hist_t, parts.hist_blobs,
                                     np.repeat(kept_sids, parts.ex_counts), parts.ex_t, parts.ex_v, parts.ex_labels,
                                     dropped_hist, dropped_ex)
        rejections = [Rejection(INVALID_HISTOGRAM, f"series #{i}: {why}", n) for i, (n, why) in parts.invalid.items()]
        if rejections:
            self.telemetry.histograms_discarded.labels(INVALID_HISTOGRAM).inc(sum(r.samples for r in rejections))
        return rejections

    def _process_with_drops(self, decoded: DecodedWrite, found: list,
                            keys: list) -> tuple[AppendBatch, list[Rejection]]:
        """Every series known: confirmed ints, and series the rules drop. Else the slow path."""
        keep = np.fromiter((entry is not DROPPED for entry in found), bool, len(found))
        if keep.all():
            return self._process_slow(decoded, found, keys)
        try:
            sids = np.array([entry for entry in found if entry is not DROPPED], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return self._process_slow(decoded, found, keys)
        return self._known_with_drops(decoded, sids, keep)

    def _known_with_drops(self, decoded: DecodedWrite, sids: np.ndarray,
                          keep: np.ndarray) -> tuple[AppendBatch, list[Rejection]]:
        """Every series a confirmed id (``sids``: those ``keep`` marks) or dropped by the rules (some are)."""
        counts = decoded.counts
        dropped = _drop_rejection(int((~keep).sum()), int(counts[~keep].sum()))
        self._count_discarded([dropped])
        mask = np.repeat(keep, counts)
        batch = AppendBatch(sid=np.repeat(sids, counts[keep]), t=decoded.t[mask], v=decoded.v[mask],
                            metadata=list(decoded.metadata))
        return batch, [dropped] + self._add_native(batch, decoded, sids, keep, ~keep)

    def _count_discarded(self, rejections: list[Rejection]) -> None:
        by_reason: dict[str, int] = {}
        for rej in rejections:
            by_reason[rej.reason] = by_reason.get(rej.reason, 0) + rej.samples
        for reason, samples in by_reason.items():
            if samples:
                self.telemetry.samples_discarded.labels(reason).inc(samples)

    def _process_slow(self, decoded: DecodedWrite, found: list, keys: list) -> tuple[AppendBatch, list[Rejection]]:
        n = len(found)
        counts = decoded.counts
        sids = np.zeros(n, np.int64)
        keep = np.ones(n, bool)
        rejections: list[Rejection] = []
        unseen = [i for i, entry in enumerate(found) if entry is None]
        if unseen:
            resolved = self._resolve_many(decoded, unseen)
            for i, entry in zip(unseen, resolved):
                found[i] = entry
            self._cache.remember([(keys[i], entry) for i, entry in zip(unseen, resolved) if keys[i] is not None])
        # Series storage may not have yet: limits and has_series, in request order.
        admit_at: list[int] = []
        admits: list[Admit] = []
        is_new: list[bool] = []
        first_new: dict[int, int] = {}  # sid -> position in admits of its first (new) occurrence
        repeats: list[tuple[int, int]] = []  # (position, position of the first occurrence)
        has_series = self.storage.has_series
        for i, entry in enumerate(found):
            if type(entry) is int:
                sids[i] = entry
            elif type(entry) is Refuse:
                keep[i] = False
            else:
                sid = entry.sid
                first = first_new.get(sid)
                fresh = first is None and not has_series(sid)
                if first is not None:
                    repeats.append((len(admits), first))
                elif fresh:
                    first_new[sid] = len(admits)
                admit_at.append(i)
                admits.append(entry)
                is_new.append(fresh)
        refusals = self._check_limits(admits, is_new, [int(counts[i]) for i in admit_at])
        for pos, first in repeats:  # the same series twice in one request: share the first one's fate
            if refusals[first] is not None:
                refusals[pos] = refusals[first]
        new_series: list[tuple[int, Labels]] = []
        new_sids: set[int] = set()
        stored_already: list[tuple[Any, int]] = []
        refused_at: dict[int, Rejection] = {}
        for i, entry, fresh, refusal in zip(admit_at, admits, is_new, refusals):
            if refusal is not None:
                keep[i] = False
                refused_at[i] = Rejection(refusal.reason, refusal.message, int(counts[i]))
                continue
            sids[i] = entry.sid
            if fresh:
                new_sids.add(entry.sid)
                new_series.append((entry.sid, entry.labels))
                self._unconfirmed[entry.sid] = keys[i]
            elif entry.sid not in new_sids:
                stored_already.append((keys[i], entry.sid))  # storage has it: confirmed, skip all checks from now on
        self._cache.remember_ids(stored_already)
        if not keep.all():  # rejections in request order, as the sender sent the series
            dropped_series = dropped_samples = 0
            for i in np.flatnonzero(~keep).tolist():
                entry = found[i]
                if entry is DROPPED:
                    dropped_series += 1
                    dropped_samples += int(counts[i])
                elif type(entry) is Refuse:
                    rejections.append(Rejection(entry.reason, entry.message, int(counts[i])))
                else:
                    rejections.append(refused_at[i])
            if dropped_series:
                rejections.append(_drop_rejection(dropped_series, dropped_samples))
        self._count_discarded(rejections)
        if keep.all():
            sid_col, t, v = np.repeat(sids, counts), decoded.t, decoded.v
        else:
            mask = np.repeat(keep, counts)
            sid_col, t, v = np.repeat(sids[keep], counts[keep]), decoded.t[mask], decoded.v[mask]
        batch = AppendBatch(new_series=new_series, sid=sid_col, t=t, v=v, metadata=list(decoded.metadata))
        configured = np.fromiter((entry is DROPPED for entry in found), bool, n)
        rejections += self._add_native(batch, decoded, sids[keep], keep, configured)
        if new_series:
            # The series keys were built for hashing; the WAL record (storage/wal/records.py) stores
            # them, so hand them over instead of building them again.
            fresh_keys = self._fresh_keys
            got = [fresh_keys.get(sid) for sid, _ in new_series]
            if None not in got:
                batch.series_keys = got
        self._fresh_keys = {}
        return batch, rejections

    def _check_limits(self, admits: list[Admit], is_new: list[bool], samples: list[int]) -> list:
        if self.limits is None or not admits:
            return [None] * len(admits)
        labels = [a.labels for a in admits]
        if hasattr(self.limits, "check_many"):
            return self.limits.check_many(labels, is_new, self.storage, [a.sid for a in admits], samples)
        return [self.limits.check(lb, fresh, self.storage) for lb, fresh in zip(labels, is_new)]

    def _resolve_many(self, decoded: DecodedWrite, idx: list[int]) -> list[Admit | Refuse]:
        """Label work for many unseen series: validated in bulk where the fast path accepts them
        (bulk.py), series by series otherwise; then relabelled (if rules are loaded) and hashed."""
        if len(self._pair_pool) > self.max_cache_entries:
            self._pair_pool.clear()
        fast: list[Labels | None] = [None] * len(idx)
        fast_keys: list[bytes | None] = [None] * len(idx)  # series_key of what ``fast`` accepted
        records = decoded.bulk_label_records(idx) if len(idx) > 1 else None
        if records is not None:
            fast, fast_keys = validate_records(records, self._pair_pool)
        else:
            decoded_strings = decoded.bulk_label_strings(idx) if len(idx) > 1 else None
            if decoded_strings is not None:
                fast = validate_many(*decoded_strings, pair_pool=self._pair_pool)
        rules = self.rules_holder.current if self.rules_holder is not None else None
        if rules is not None and getattr(rules, "rules", None) == ():
            rules = None  # a RuleSet with no rules: apply() would return the labels unchanged
        out: list[Any] = [None] * len(idx)
        if rules is None and None not in fast:  # the usual first scrape: nothing left to do series by series
            labels_at, labels_list, known_keys = range(len(idx)), fast, fast_keys
        else:
            labels_at, labels_list, known_keys = one_by_one(decoded, idx, fast, fast_keys, rules, out)
        keys, ids = series_keys_and_ids(labels_list, known_keys)
        self._fresh_keys = dict(zip(ids.tolist(), keys))  # for this request's WAL record
        for k, admit in zip(labels_at, map(Admit, labels_list, ids.tolist())):
            out[k] = admit
        return out

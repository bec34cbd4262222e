"""A read source over the local storage and the recent samples of the gateway's shards and peers, for one query.

The PromQL engine and the metadata APIs read through it as they read the storage (the same seam:
select_series / estimate_samples / read_samples, label_names / label_values), so neither knows
where a sample came from. For each selection the shards and peers are asked first (all at once, one
remote read each), then the local storage, so the table snapshot read locally is at least as new as the
versions their answers are relative to (docs/cluster.md); the answers are merged and de-duplicated by
(sid, t), local samples first. Series ids are the blake2b of the labels, the same in every process, so a
series a peer holds is the same series here.

One object per query: what the peers answered is kept for that query only (a selection's samples
serve its read), and is counted as a one-process gateway counts its own head: the series when the query
selects them, the samples when the query takes them (``read_samples``, batch by batch), so the limits of
the query are judged once and the same way in every layout. What cannot be read fails the query
(policy.py); with ``partial`` a peer that did not answer leaves a warning in ``warnings`` instead.
"""

from __future__ import annotations

import logging

import numpy as np

from .. import npsort
from ..errors import Unavailable
from ..limits.context import QueryContext
from ..model import METRIC_NAME, Matcher, SampleBlock, selector_text
from ..storage.memory import native_head
from ..storage.batch import HistogramBlock, SeriesSet
from ..storage.memory.head import select_sorted
from ..storage.read.merge import merge_parts
from .peers import PeerFanout
from .policy import PeerFailure, warning

log = logging.getLogger(__name__)

class ClusterSource:
    def __init__(self, local, fanout: PeerFanout, samples: bool = True, partial: bool = False) -> None:
        """``samples``: selections fetch the peers' samples with the series (PromQL); without,
        only label sets (the metadata APIs). ``partial``: a peer that does not answer is a warning, not a 503."""
        self.local = local
        self.fanout = fanout
        self.samples = samples
        self.partial = partial
        self.warnings: list[str] = []
        self._failed: set[str] = set()
        # (matchers, start, end) -> each answering peer's series (and samples) for that selection
        self._answers: dict[tuple, list] = {}
        self._followed = False  # the local table view was brought up to date for a failed peer
        self.columns = True  # ask peers for columnar answers (off once a peer named a series unknown here)

    # ---------------------------------------------------------------- native histograms
    # The table's (every writer's flushed histograms), this process's heads, and the peers' heads: their
    # head-read answers carry the histograms they hold in memory (TimeSeries.histograms).
    def histogram_metrics(self) -> frozenset[str]:
        return self.local.histogram_metrics()

    def histogram_metrics_in(self, matchers: list[Matcher], start_ms: int, end_ms: int,
                             ctx: QueryContext) -> frozenset[str]:
        """The metrics holding histograms, the peers' for this selection included (asked once per selection:
        the same answer then serves its series and samples)."""
        names = set()
        for res in self._from_peers(matchers, *_window(start_ms, end_ms), ctx):
            if len(res.hists):
                at = np.flatnonzero(npsort.members(res.ids, npsort.unique(res.hists.sid)))
                names.update(dict(lb).get(METRIC_NAME, "") for lb in self._labels(res, at))
        return self.local.histogram_metrics() | names

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        """Local histograms first, then the peers' (one per (sid, t), the first kept, as for samples)."""
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        parts = [self.local.read_histograms(ids_sorted, start_ms, end_ms, ctx)]
        for (_, lo, hi, *_limit), results in self._answers.items():
            if lo <= start_ms and end_ms <= hi:
                parts += [native_head.take(r.hists, native_head.rows_in(r.hists.sid, r.hists.t, ids_sorted,
                                                                        start_ms, end_ms))
                          for r in results if len(r.hists)]
        for p in parts[1:]:  # held since they arrived (peers.py); now the query takes them, as it takes the head's
            ctx.charge_loaded(len(p), "head read (histograms)", 0)
        ctx.check("peer merge")
        return native_head.merge_histograms(parts)

    # ---------------------------------------------------------------- peers
    def _from_peers(self, matchers: list[Matcher], start_ms: int, end_ms: int, ctx: QueryContext,
                    limit: int | None = None) -> list:
        """``limit`` (series only): each peer answers at most that many series, its first in label order."""
        limit = None if self.samples else limit
        key = (tuple(matchers), start_ms, end_ms) if limit is None else (tuple(matchers), start_ms, end_ms, limit)
        got = self._answers.get(key)
        if got is None:
            got = []
            newest = -1
            failed = False
            # A query's selections ask for arrays: label sets come only for series the table does not hold yet.
            columns = self.samples and self.columns
            for answer in self.fanout.read([(matchers, start_ms, end_ms)], not self.samples, ctx, limit, columns,
                                           self.partial):
                if isinstance(answer, PeerFailure):
                    self._warn(answer)
                    failed = True
                    continue
                got.append(answer.results[0])
                if answer.table_version is not None:
                    newest = max(newest, answer.table_version)
            # What a peer no longer holds in memory it had committed by the version it named: the local
            # snapshot read next must include that version, or a sample being flushed is seen zero times.
            if newest >= 0:
                self.local.ensure_version(newest)
            # A peer that did not answer named no version, but what it committed before it went away must
            # still be answered (only its head is missing): read the table as it is now, not as last followed.
            if failed and not self._followed:
                self.local.follow()
                self._followed = True
            if columns and not all(self.local.holds_ids(_unlabelled(r)) for r in got):
                # A peer named a series this process does not know at the version the peer named (a race with
                # retention, or a peer on another table): ask again for remote read's label sets, once.
                log.warning("a peer named series this process does not know; asking again for their label sets")
                self.columns = False
                self._answers.pop(key, None)
                return self._from_peers(matchers, start_ms, end_ms, ctx, limit)
            self._answers[key] = got
        return got

    def _labels(self, res, at: np.ndarray) -> list:
        """The label sets of ``res``'s series at positions ``at``, those the peer sent by id only from the series
        table (it holds them all: ``_from_peers`` checked)."""
        missing = [i for i in at.tolist() if res.labels[i] is None]
        if missing:
            for i, lb in zip(missing, self.local.labels_of_ids(res.ids[missing])):
                if lb is None:  # dropped by retention since the check: never answer it without its labels
                    raise Unavailable("a series left the series table while the query read it; retry")
                res.labels[i] = lb
        return [res.labels[i] for i in at.tolist()]

    def _warn(self, failure: PeerFailure) -> None:
        if failure.peer in self._failed:
            return
        self._failed.add(failure.peer)
        self.warnings.append(warning(failure, "samples" if self.samples else "series"))

    # ---------------------------------------------------------------- the read seam
    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        window = _window(start_ms, end_ms)
        peers = self._from_peers(matchers, *window, ctx, limit)  # peers first: see the module docstring
        local = self.local.select_series(matchers, start_ms, end_ms, ctx, limit)
        if not any(len(res.ids) for res in peers):  # the usual case of a past window: peers hold none of it
            return local
        known = npsort.unique(local.ids)
        extra: dict[int, tuple] = {}
        for res in peers:  # a peer answers only series with samples in the window (or, series only, in its head)
            at = np.flatnonzero(~npsort.members(res.ids, known))
            for sid, labels in zip(res.ids[at].tolist(), self._labels(res, at)):
                extra.setdefault(sid, labels)
        if not extra:
            return local
        # The local ones were charged by the storage; these the query selects as it would select them there.
        if ctx is not None:
            ctx.charge_series(len(extra) if limit is None else min(len(extra), limit), "series selection")
        ids = np.concatenate([local.ids, np.fromiter(extra, np.int64, len(extra))])
        labels = local.labels + list(extra.values())
        order = sorted(range(len(ids)), key=labels.__getitem__)[:limit]
        return SeriesSet(ids[np.array(order, np.int64)], [labels[i] for i in order], label_sorted=True)

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        """The local estimate (the table's samples) and the peers' samples of these series in the window, counted:
        a one-process gateway's estimate covers its head too."""
        held = self._covering(start_ms, end_ms)
        if not held:
            return self.local.estimate_samples(series, start_ms, end_ms)
        ids_sorted = npsort.unique(np.asarray(series.ids, np.int64))
        return self.local.estimate_samples(series, start_ms, end_ms) + sum(
            len(select_sorted(b.sid, b.t, b.v, ids_sorted, start_ms, end_ms)) for b in held)

    def _covering(self, start_ms: int, end_ms: int) -> list:
        """The peers' sample blocks of every selection whose window covers this one."""
        return [res.block for (_, lo, hi, *_limit), results in self._answers.items()
                if lo <= start_ms and end_ms <= hi for res in results if len(res.block)]

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        """Local samples, then those of every peer answer to a selection covering the window."""
        covering = self._covering(start_ms, end_ms)
        if not covering:  # nothing from the peers here: the local read, which sorts the ids itself
            return self.local.read_samples(ids, start_ms, end_ms, ctx)
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        parts = [self.local.read_samples(ids_sorted, start_ms, end_ms, ctx)]
        held = [select_sorted(b.sid, b.t, b.v, ids_sorted, start_ms, end_ms) for b in covering]
        for p in held:  # their memory is held since they arrived (peers.py); now the query takes them
            ctx.charge_loaded(len(p), "head read", 0)
        parts += held
        ctx.check("peer merge")
        return merge_parts(ids_sorted, [p for p in parts if len(p)], start_ms, end_ms)

    # ---------------------------------------------------------------- metadata
    def label_names(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                    ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        return self._listing("/api/v1/labels", lambda: self.local.label_names(matchers, start_ms, end_ms, ctx, limit),
                             matchers, start_ms, end_ms, ctx, limit)

    def label_values(self, name: str, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        return self._listing(f"/api/v1/label/{name}/values",
                             lambda: self.local.label_values(name, matchers, start_ms, end_ms, ctx, limit),
                             matchers, start_ms, end_ms, ctx, limit)

    def _listing(self, path: str, local, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                 ctx: QueryContext, limit: int | None) -> list[str]:
        """Label names or values: the table's, and each shard's and peer's own (they answer from their series,
        in memory or not, on the JSON API: a name is a few bytes where a series read would ship every label set)."""
        params = [("match[]", selector_text(matchers))] if matchers else []
        params += [(k, str(v / 1000)) for k, v in (("start", start_ms), ("end", end_ms)) if v is not None]
        params += [("limit", str(limit))] if limit else []
        found = set(local())
        for got in self.fanout.json_blocking(path, params, ctx, self.partial):
            if isinstance(got, PeerFailure):
                self._warn(got)
                continue
            if not isinstance(got.data, list):
                raise Unavailable(f"{got.peer} answered {path} with something that is not a list")
            found.update(got.data)
        return sorted(found)[:limit] if limit else sorted(found)


def _unlabelled(res) -> np.ndarray:
    return res.ids[[i for i, lb in enumerate(res.labels) if lb is None]]


def _window(start_ms: int | None, end_ms: int | None) -> tuple[int, int]:
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    return (lo if start_ms is None else start_ms), (hi if end_ms is None else end_ms)

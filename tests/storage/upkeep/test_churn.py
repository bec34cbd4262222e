"""Pod churn with a short retention: the series table, its files and every cache follow the series that
still have samples, not every series ever seen (issue 9, finding 6); memory (the head window, as short as the
retention here) holds fewer still, and the archive the rest of them. Time is a clock the test moves,
and the assertions are on counts, never on how long anything took."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from metricsgw.config import load
from metricsgw.errors import Unavailable
from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.limits.context import QueryContext
from metricsgw.limits.ingest import IngestLimits
from metricsgw.model import Matcher, MetricMetadata, canonical, series_id
from metricsgw.remote import codec
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.catalog.catalog import Catalog
from metricsgw.storage.store import Storage
from metricsgw.telemetry import Telemetry

MINUTE = 60_000
SCRAPE_MS = 15_000
SCRAPES_PER_GENERATION = 4  # a new generation of pods every minute; each pod lives two generations
PODS = 30
STABLE_METRICS = ("container_cpu_seconds_total", "container_memory_bytes", "kube_pod_info")
GENERATIONS = 24
PER_GENERATION = PODS * (len(STABLE_METRICS) + 1)  # + one metric named after its generation (a batch job)
# Series that can still have samples: the live pods (two generations) plus what retention keeps
# (3 minutes, whole 1-minute partitions, a flush of lag): at most 7 generations' worth at any time.
BOUND = 7 * PER_GENERATION


def scrape(gen_alive: list[int], t_ms: int, k: int) -> bytes:
    series = []
    for gen in gen_alive:
        for i in range(PODS):
            pod = [("namespace", "batch"), ("pod", f"worker-{gen}-{i}")]
            for m in STABLE_METRICS:
                series.append(([("__name__", m), *pod], [(t_ms, float(k + i))]))
            series.append(([("__name__", f"job_{gen}_progress"), *pod], [(t_ms, float(k))]))
    meta = [MetricMetadata(f"job_{g}_progress", "gauge", "progress of one batch job", "") for g in gen_alive]
    return codec.encode_v1(series, metadata=meta, compress=False)


def side_table_sids(path, kind: str) -> set[int]:
    files = sorted((path / "table" / kind).glob(f"writer=gw0/{kind}-gw0-*.parquet"))
    return set(np.concatenate([pq.read_table(f).column("sid").to_numpy() for f in files]).tolist()) if files else set()


def test_pod_churn_keeps_the_series_table_and_caches_bounded_by_live_series(tmp_path):
    start_ms = (int(time.time() * 1000) // MINUTE - 2 * GENERATIONS) * MINUTE
    now = [start_ms / 1000]
    st = Storage(str(tmp_path), partition_ms=MINUTE, retention_ms=3 * MINUTE, clock=lambda: now[0])
    st.open()
    cfg = load({"ingest.max-series": "100000", "ingest.max-series-per-metric": "10000"})
    limits = IngestLimits(cfg, refresh_s=0.0)
    pipe = IngestPipeline(st, Telemetry(), limits=limits)
    ever: set[int] = set()
    last_sample: dict[int, int] = {}
    peak = 0
    t_ms = start_ms
    for gen in range(GENERATIONS):
        for k in range(SCRAPES_PER_GENERATION):
            t_ms += SCRAPE_MS
            now[0] = t_ms / 1000
            batch, rejected = pipe.process(codec.decode_v1(scrape([g for g in (gen - 1, gen) if g >= 0], t_ms, k)))
            assert rejected == []
            # The pipeline catches up with retention's drops as it takes the next write.
            assert pipe.cache_size <= BOUND
            assert len(limits._per_metric) <= len(STABLE_METRICS) + BOUND // PER_GENERATION
            asyncio.run(st.append(batch))
            ever.update(sid for sid, _ in batch.new_series)
            last_sample.update(dict.fromkeys(batch.sid.tolist(), t_ms))
            if k % 2:  # a flush every two scrapes, then what the flusher does after it
                st.flush()
                st.maintenance.run()
                st.table.collect()
                assert not st.maintenance.failing
        # Dashboards look at the live pods: fills the label caches, label ranks and the sample cache.
        live = st.select_series([Matcher("namespace", "=", "batch")], t_ms - 2 * MINUTE, t_ms, QueryContext())
        assert set(live.ids.tolist()) == {sid for sid, t in last_sample.items() if t >= t_ms - 2 * MINUTE}
        st.read_samples(live.ids, t_ms - 4 * MINUTE, t_ms, QueryContext())
        st.label_values("pod", [Matcher("namespace", "=", "batch")], None, None, QueryContext())
        cat = st.catalog
        peak = max(peak, len(cat))
        assert len(cat) <= BOUND
        assert len(cat.labels_of) <= len(cat)
        assert set(cat.label_ranks) <= set(cat.metrics)
        assert all(len(cat.label_ranks[m]) <= len(cat.metrics[m]) for m in cat.label_ranks)
        assert len(cat.metrics["kube_pod_info"].columns["pod"].values) <= BOUND // PER_GENERATION * PODS + 1
        assert len(cat.metrics) <= len(STABLE_METRICS) + BOUND // PER_GENERATION
        assert set(st.metadata()) <= set(cat.metrics) | set(archived(st).metrics)
        _, _, cached_files = st.sample_cache_stats()
        assert cached_files <= st.table.current.paths(), "no cache entry of a deleted file"

    assert len(ever) == GENERATIONS * PER_GENERATION and peak * 3 < len(ever), "history is much bigger than the bound"
    st.flush()
    st.maintenance.run()
    st.table.collect()
    # Exactly the series with samples left: no more (history), no fewer (a live series lost).
    kept = held(st)
    every = st.read_samples(np.array(sorted(kept), np.int64), 0, t_ms + MINUTE, QueryContext())
    assert set(np.unique(every.sid).tolist()) == kept
    assert side_table_sids(tmp_path, "series") == kept
    assert side_table_sids(tmp_path, "spans") == kept
    st.close()

    reopened = Storage(str(tmp_path), partition_ms=MINUTE, retention_ms=3 * MINUTE, clock=lambda: now[0])
    reopened.open()
    assert held(reopened) == kept
    reopened.close()


def archived(st: Storage):
    """The archive as a read from the beginning sees it (an empty catalog while memory forgot nothing)."""
    return st.archive.catalog_for(None) or Catalog()


def held(st: Storage) -> set[int]:
    """The series a read over any range finds: in memory, or forgotten by the head window and still on disk."""
    return set(st.catalog.sids.view.tolist()) | set(archived(st).sids.view.tolist())


def _retained_an_hour_ago(tmp_path):
    """A storage keeping 3 minutes, on a clock an hour back (``now[0]``, seconds, moves it), and its pipeline."""
    start_ms = (int(time.time() * 1000) // MINUTE - 60) * MINUTE
    now = [start_ms / 1000]
    st = Storage(str(tmp_path), partition_ms=MINUTE, retention_ms=3 * MINUTE, clock=lambda: now[0])
    st.open()
    return st, IngestPipeline(st, Telemetry()), now, start_ms


def test_a_dropped_series_that_comes_back_is_stored_again(tmp_path):
    st, pipe, now, start_ms = _retained_an_hour_ago(tmp_path)
    lb = [("__name__", "up"), ("pod", "a")]
    sid = series_id(canonical(lb))

    def write(t_ms: int) -> AppendBatch:
        batch, _ = pipe.process(codec.decode_v1(codec.encode_v1([(lb, [(t_ms, 1.0)])], compress=False)))
        return batch

    batch = write(start_ms)
    asyncio.run(st.append(batch))
    st.flush()
    stale = write(start_ms + 1000)  # resolved from the pipeline's cache: no labels in it
    assert stale.new_series == []
    now[0] += 10 * MINUTE / 1000
    st.maintenance.run()
    assert not st.has_series(sid)
    # A write resolved before the drop reaches storage after it: refused (503, retried), nothing stored.
    with pytest.raises(Unavailable, match="dropped by retention"):
        asyncio.run(st.append(stale))
    assert st.files.head_samples() == 0
    t_back = int(now[0] * 1000)
    batch = write(t_back)  # the retry: the pipeline has forgotten the series and sends its labels again
    assert [s for s, _ in batch.new_series] == [sid]
    asyncio.run(st.append(batch))
    st.flush()
    got = st.read_samples(np.array([sid]), 0, t_back, QueryContext())
    assert got.t.tolist() == [t_back]
    st.close()


def test_ids_found_while_decoding_are_not_used_once_retention_dropped_their_series(tmp_path):
    # The codec resolves a known request's ids while decoding (pipeline.known_sids); retention may drop those
    # series before the pipeline processes it. The pipeline must then resolve the labels again, not use the ids.
    st, pipe, now, start_ms = _retained_an_hour_ago(tmp_path)
    lb = [("__name__", "up"), ("pod", "a")]
    sid = series_id(canonical(lb))

    def decode(t_ms: int) -> codec.DecodedWrite:
        return codec.decode_v1(codec.encode_v1([(lb, [(t_ms, 1.0)])], compress=False), pipe.known_sids)

    batch, _ = pipe.process(decode(start_ms))
    asyncio.run(st.append(batch))
    pipe.confirm(batch)
    st.flush()
    t_back = start_ms + 10 * MINUTE
    decoded = decode(t_back)
    assert decoded.sids.tolist() == [sid]  # known: decoded without its labels
    now[0] = t_back / 1000
    st.maintenance.run()
    assert not st.has_series(sid)
    batch, _ = pipe.process(decoded)
    assert [s for s, _ in batch.new_series] == [sid] and batch.t.tolist() == [t_back]
    asyncio.run(st.append(batch))  # its labels go to storage again: stored, not refused
    assert decode(t_back + SCRAPE_MS).sids is None  # new again until this write is confirmed
    st.close()

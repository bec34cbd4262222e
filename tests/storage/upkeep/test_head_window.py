"""The head window: memory forgets the series not written for longer than it, and no answer changes.

Differential: two storages take the same writes through the ingest pipeline, one with a short head window and one
whose window is the whole retention (it never forgets here); every read over every range answers the same from both,
after the idle pass, when a forgotten series comes back, and after a restart. Time is a clock the test moves."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher, canonical, series_id
from metricsgw.promql.engine import Engine
from metricsgw.promql.render import render
from metricsgw.remote import codec
from metricsgw.storage.catalog.book import NONE
from metricsgw.storage.store import Storage
from metricsgw.storage.upkeep.compact import MAX_SIDE_FILES, compact_side_tables
from metricsgw.telemetry import Telemetry

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
WINDOW = 10 * MINUTE


class Twin:
    """One storage and its pipeline on the test's clock."""

    def __init__(self, path, now: list[float], window_ms: int, **kw) -> None:
        self.path, self.now, self.window_ms, self.kw = path, now, window_ms, kw
        self.open()

    def open(self) -> None:
        self.st = Storage(str(self.path), retention_ms=DAY, head_window_ms=self.window_ms,
                          clock=lambda: self.now[0], **self.kw)
        self.st.open()
        self.pipe = IngestPipeline(self.st, Telemetry())

    def write(self, series: list[tuple[list, float]], t_ms: int) -> None:
        body = codec.encode_v1([(lb, [(t_ms, v)]) for lb, v in series], compress=False)
        batch, rejected = self.pipe.process(codec.decode_v1(body))
        assert rejected == []
        asyncio.run(self.st.append(batch))

    def upkeep(self) -> None:
        self.st.flush()
        self.st.maintenance.run()
        assert not self.st.maintenance.failing


def pod(name: str, i: int) -> list:
    return [("__name__", name), ("job", "kubelet"), ("pod", f"p{i}")]


def answers(st: Storage, now_ms: int) -> tuple[list, list]:
    """What a user can ask, over ranges from the beginning, reaching into the forgotten past, and only recent; and
    the estimates of sample reads (the engine refuses a query by them)."""
    out, estimates = [], []
    engine = Engine(st)
    for start in (None, now_ms - 3 * HOUR, now_ms - 50 * MINUTE, now_ms - 5 * MINUTE):
        s = now_ms - 4 * HOUR if start is None else start  # PromQL's range: from before the first sample
        for m in ([Matcher("job", "=", "kubelet")], [Matcher("__name__", "=", "cpu")], [Matcher("pod", "=~", "p1|p7")]):
            sel = st.select_series(m, start, now_ms, QueryContext())
            out.append(sorted(zip(sel.ids.tolist(), sel.labels)))
            out.append(st.select_series(m, start, now_ms, QueryContext(), limit=3).labels)
            out.append(st.select_ids(m, start, now_ms, QueryContext()).tolist())
            estimates.append(st.estimate_samples(sel, s, now_ms))
            block = st.read_samples(sel.ids, s, now_ms, QueryContext())
            out.append((block.sid.tolist(), block.t.tolist(), block.v.tolist()))
        out.append(st.label_names([], start, now_ms, QueryContext()))
        out.append(st.label_values("pod", [], start, now_ms, QueryContext()))
        out.append(st.label_values("__name__", [Matcher("pod", "!=", "")], start, now_ms, QueryContext()))
        for q in ("sum by (pod) (cpu)", "count(mem)", "rate(cpu[5m])"):
            out.append(render(engine.range(q, s / 1000 + 60, now_ms / 1000, 60, QueryContext())))
    out.append(st.metadata())
    return out, estimates


def same_answers(short: Storage, full: Storage, now_ms: int) -> None:
    """Identical answers; estimates no higher. A series written again starts in memory at its return, so over a
    window after the forgotten past its span does not reach back across the empty gap to its old samples."""
    got, got_estimates = answers(short, now_ms)
    want, want_estimates = answers(full, now_ms)
    assert got == want
    assert all(a <= b for a, b in zip(got_estimates, want_estimates))


def test_forgotten_series_answer_as_before_and_come_back_with_their_id(tmp_path):
    start_ms = (int(time.time() * 1000) // HOUR - 3) * HOUR
    now = [start_ms / 1000]
    short = Twin(tmp_path / "short", now, WINDOW)
    full = Twin(tmp_path / "full", now, DAY)
    t = start_ms
    # Ten pods for 40 minutes; then pods 0-4 go; pod 1 comes back at 1h30 with the same labels.
    for step in range(0, 120):
        t = start_ms + step * MINUTE
        now[0] = t / 1000
        alive = range(10) if step < 40 else [i for i in range(5, 10)] + ([1] if step >= 90 else [])
        series = [(pod(m, i), float(step * 10 + i)) for i in alive for m in ("cpu", "mem")]
        for twin in (short, full):
            twin.write(series, t)
            if step % 5 == 4:
                twin.upkeep()
        if step in (60, 89, 95, 119):
            forgotten = short.st.book.forgotten_until
            assert forgotten != NONE and forgotten < t - WINDOW
            assert len(short.st.catalog) < len(full.st.catalog)
            same_answers(short.st, full.st, t)
    # In memory: the series written within the window, pod 1 back among them under its old id.
    live = {i for i in range(5, 10)} | {1}
    assert len(short.st.catalog) == 2 * len(live) and len(full.st.catalog) == 20
    assert short.st.tsdb_status(10)["headStats"]["numSeries"] == 12
    # Counted over a window, the cardinality figures take every partition: the forgotten series too, each once.
    for window in ((start_ms, t), (start_ms, start_ms + 10 * MINUTE)):
        assert short.st.tsdb_counts(*window) == full.st.tsdb_counts(*window)
    assert short.st.tsdb_counts(start_ms, t)["numSeries"] == 20
    assert short.st.tsdb_counts(start_ms, t)["pairs"]["pod=p0"] == 2
    assert short.st.tsdb_counts(t - MINUTE, t)["numSeries"] == 12
    cpu = [Matcher("__name__", "=", "cpu")]
    assert short.st.tsdb_counts(start_ms, t, cpu)["seriesByMetric"] == {"cpu": 10}
    assert short.pipe.cache_size == 12  # the ingest cache followed
    for twin in (short, full):
        twin.st.close()
        twin.open()
    assert short.st.book.forgotten_until != NONE  # from the checkpoint: the restart still asks the archive
    same_answers(short.st, full.st, t)
    short.upkeep()
    assert len(short.st.catalog) == 12
    for twin in (short, full):
        twin.st.close()


def test_a_follower_finds_a_series_it_forgot_and_its_writer_did_not(tmp_path):
    """A query process forgets by the spans it read, which run behind its writer's memory: a series written again
    before the writer forgot it appears only in the writer's spans, and the follower takes its labels from the series
    files it read long ago."""
    start_ms = (int(time.time() * 1000) // HOUR - 3) * HOUR
    now = [start_ms / 1000]
    writer = Twin(tmp_path, now, DAY)
    reader = Storage(str(tmp_path), retention_ms=DAY, head_window_ms=WINDOW, clock=lambda: now[0],
                     writer_id="q0", follow_others=True)
    reader.open()
    lb = pod("cpu", 3)
    for step in (0, 1, 2, 30, 31):  # written, idle for half an hour, written again
        t = start_ms + step * MINUTE
        now[0] = t / 1000
        writer.write([(lb, float(step))], t)
        writer.upkeep()
        reader.follow()
        reader.maintenance.run()
        if step == 2:
            now[0] = (t + 20 * MINUTE) / 1000
            reader.maintenance.run()
            assert len(reader.catalog) == 0 and reader.book.forgotten_until == t
    sel = reader.select_series([Matcher("pod", "=", "p3")], t - MINUTE, t, QueryContext())
    assert sel.labels == [tuple(sorted(lb))]
    block = reader.read_samples(sel.ids, start_ms, t, QueryContext())
    assert block.v.tolist() == [0.0, 1.0, 2.0, 30.0, 31.0]
    reader.close()
    writer.st.close()


def test_the_archive_keeps_to_its_bound_and_charges_a_query_past_it(tmp_path):
    start_ms = (int(time.time() * 1000) // HOUR - 2) * HOUR
    now = [start_ms / 1000]
    twin = Twin(tmp_path, now, WINDOW, archive_bytes=1)
    twin.write([(pod("cpu", i), 1.0) for i in range(50)], start_ms)
    twin.upkeep()
    now[0] = (start_ms + HOUR) / 1000
    twin.upkeep()
    assert len(twin.st.catalog) == 0
    ctx = QueryContext()
    sel = twin.st.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, ctx)
    assert len(sel) == 50
    assert twin.st.archive.stats() == (0, 0)  # over its bound: built for the query, not kept
    assert ctx.bytes > 50 * 100  # and charged to it
    from metricsgw.errors import LimitExceeded
    from metricsgw.storage.files import parquet_io
    real, reads = parquet_io.read_spans, []
    parquet_io.read_spans = lambda path: reads.append(path) or real(path)
    try:  # one the query cannot afford is refused before the files are read
        twin.st.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, QueryContext(max_bytes=100))
        raise AssertionError("not refused")
    except LimitExceeded:
        assert reads == []
    finally:
        parquet_io.read_spans = real
    from metricsgw.limits.memory import MemoryPool
    small = twin.st.archive.pool = MemoryPool(100)  # a pool that cannot lend it the rest: not kept
    twin.st.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, QueryContext())
    assert twin.st.archive.stats() == (0, 0) and small.used == 0
    pool = twin.st.archive.pool = MemoryPool(1 << 20)  # one that can: kept, the rest charged there
    twin.st.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, QueryContext())
    entries, size = twin.st.archive.stats()
    assert entries == 50 and pool.used == 50 * 40 - 1  # (the estimate it is kept by: 40 B a series, less its share)
    twin.st.close()
    roomy = Twin(tmp_path, now, WINDOW)
    assert len(roomy.st.catalog) == 50  # the checkpoint predates the forgetting: back in memory until the next pass
    roomy.upkeep()
    assert len(roomy.st.catalog) == 0
    roomy.st.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, QueryContext())
    entries, size = roomy.st.archive.stats()
    assert entries == 50 and 0 < size <= 32 << 20
    roomy.st.close()


def test_a_merge_of_a_writers_side_files_does_not_bring_forgotten_series_back(tmp_path):
    """A merge names every series of the writer again (the series and the spans merged in commits of their own): a
    follower joins only those written after the series it forgot."""
    start_ms = (int(time.time() * 1000) // HOUR - 3) * HOUR
    now = [start_ms / 1000]
    writer = Twin(tmp_path, now, DAY)
    reader = Storage(str(tmp_path), retention_ms=DAY, head_window_ms=WINDOW, clock=lambda: now[0],
                     writer_id="q0", follow_others=True)
    reader.open()
    for step in range(MAX_SIDE_FILES):  # a new pod a minute, each written once: a series and a spans file each
        now[0] = (start_ms + step * MINUTE) / 1000
        writer.write([(pod("cpu", step), 1.0)], start_ms + step * MINUTE)
        writer.st.flush()
    now[0] = (start_ms + HOUR) / 1000
    writer.write([(pod("cpu", 99), 1.0)], start_ms + HOUR)
    writer.st.flush()
    reader.follow()
    reader.maintenance.run()
    assert reader.catalog.sids.view.tolist() == [series_id(canonical(pod("cpu", 99)))]
    assert compact_side_tables(writer.st) > 0
    from metricsgw.storage.catalog import side_index
    reads = []
    real = side_index.read_rows
    side_index.read_rows = lambda path, rows: reads.append(len(rows)) or real(path, rows)
    try:
        reader.follow()
    finally:
        side_index.read_rows = real
    assert reads == []  # the merged file's keys are not read: its series are known or forgotten
    assert len(reader.catalog) == 1
    sel = reader.select_series([Matcher("job", "=", "kubelet")], start_ms, start_ms + HOUR, QueryContext())
    assert len(sel) == MAX_SIDE_FILES + 1  # the others from the archive
    reader.close()
    writer.st.close()


def test_a_read_reaching_back_reads_only_what_it_may_select_and_is_charged_first(tmp_path, monkeypatch):
    """The archive of a read: the forgotten series of its metric whose span meets its window, charged before their
    label sets are read (at the seed's scale every series on disk, read for each panel, killed the process)."""
    from metricsgw.errors import LimitExceeded
    from metricsgw.storage.catalog import archive as archive_mod

    start_ms = (int(time.time() * 1000) // HOUR - 3) * HOUR
    now = [start_ms / 1000]
    twin = Twin(tmp_path, now, WINDOW)
    twin.write([(pod("cpu", i), 1.0) for i in range(40)] + [(pod("mem", i), 1.0) for i in range(30)], start_ms)
    twin.write([(pod("cpu", i), 2.0) for i in range(10)], start_ms + 5 * MINUTE)  # 10 of them live longer
    twin.upkeep()
    now[0] = (start_ms + HOUR) / 1000
    twin.upkeep()
    assert len(twin.st.catalog) == 0
    archive = twin.st.archive
    cpu = [Matcher("__name__", "=", "cpu")]
    assert len(archive.catalog_for(start_ms, QueryContext(), start_ms + HOUR, cpu)) == 40
    assert set(archive.catalog_for(start_ms, QueryContext(), start_ms + HOUR, []).metrics) == {"cpu", "mem"}
    late = archive.catalog_for(start_ms + MINUTE, QueryContext(), start_ms + HOUR, cpu)
    assert len(late) == 10  # the others' spans end before the window
    assert archive.catalog_for(start_ms + 6 * MINUTE, QueryContext(), start_ms + HOUR, cpu) is None
    assert archive.metric_names() == {"cpu", "mem"}

    reads = []
    real = archive_mod.read_keys
    monkeypatch.setattr(archive_mod, "read_keys", lambda f, pos: reads.append(len(pos)) or real(f, pos))
    poor = QueryContext(max_bytes=40 * archive_mod.SERIES_BYTES - 1)
    try:
        twin.st.select_series(cpu, start_ms, start_ms + HOUR, poor)
        raise AssertionError("not refused")
    except LimitExceeded as err:
        assert "--query.max-memory-per-query" in str(err)
    assert reads == []  # refused before a label set was read
    sel = twin.st.select_series(cpu, start_ms, start_ms + HOUR, QueryContext())
    assert len(sel) == 40 and sum(reads) == 40
    twin.st.close()

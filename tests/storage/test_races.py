"""Races of finding 5 (issue 9), each made to happen on purpose: the catalog's sid index read while it
is rebuilt, an append while a query sorts the head, and shutdown while a query runs."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time

import numpy as np
import pytest

from metricsgw.errors import Unavailable
from metricsgw.limits.guard import QueryGuard
from metricsgw.model import canonical, series_id
from metricsgw.storage.catalog.catalog import Catalog
from metricsgw.storage.memory.head import Head


def pods(batch: int, n: int = 64) -> list:
    return [(series_id(lb), lb) for lb in (canonical([("__name__", f"m{batch % 5}"), ("pod", f"p{batch}-{i}")])
                                            for i in range(n))]


class InterleavedCatalog(Catalog):
    """After every store to the sid index, hands the CPU to a reader and waits for its answer: a reader
    running at the worst moment of a rebuild, every time (a test hook; no timing)."""

    reader_turn = None

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name.startswith("_index") and self.reader_turn is not None and threading.current_thread() is self.writer:
            self.reader_turn()


def test_a_reader_never_sees_the_sid_index_half_rebuilt():
    cat = InterleavedCatalog()
    batches = [pods(b) for b in range(80)]  # 5,120 series: the index is rebuilt several times
    known: list[int] = []
    answers: list[str] = []
    go, done = threading.Event(), threading.Event()
    finished = threading.Event()

    def reader() -> None:  # a query thread
        while go.wait(60) and not finished.is_set():
            go.clear()
            sids = np.array(known, np.int64)
            try:
                g = cat.dense(sids)
                answers.append("ok" if np.array_equal(cat.sids.a[g], sids) else "wrong series")
            except (IndexError, KeyError) as err:
                answers.append(repr(err))
            done.set()

    def reader_turn() -> None:
        go.set()
        assert done.wait(60)
        done.clear()

    t = threading.Thread(target=reader)
    t.start()
    cat.writer = threading.current_thread()  # the event loop: appends, then looks the series up
    cat.reader_turn = reader_turn
    try:
        for batch in batches:
            cat.add_many(batch)
            sids = np.array([s for s, _ in batch], np.int64)
            cat.touch(sids, np.zeros(len(sids), np.int64))
            known.extend(sids.tolist())
    finally:
        finished.set()
        go.set()
        t.join(60)
    assert len(answers) >= 3, "the index was rebuilt while the catalog grew"
    assert set(answers) == {"ok"}, answers


def test_catalog_answers_stay_consistent_while_threads_hammer_it():
    cat = Catalog()
    batches = [pods(b) for b in range(300)]
    published = [0]
    errors: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for k, batch in enumerate(batches):
            cat.add_many(batch)
            cat.touch(np.array([s for s, _ in batch], np.int64), np.full(len(batch), k, np.int64))
            published[0] = k + 1
        stop.set()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200_000):  # bounded
            if stop.is_set():
                return
            k = published[0]
            if not k:
                continue
            sids = np.array([batches[rng.randrange(k)][rng.randrange(64)][0] for _ in range(16)], np.int64)
            try:
                g = cat.dense(sids)
                if not np.array_equal(cat.sids.a[g], sids):
                    errors.append("wrong series")
            except (IndexError, KeyError) as err:
                errors.append(repr(err))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as the interpreter allows
    try:
        threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)] + [threading.Thread(target=writer)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        sys.setswitchinterval(old)
    assert published[0] == len(batches) and errors == []


class HeldSortHead(Head):
    """A head whose consolidation (the sort a query triggers) stops until released (a test hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.sorting = threading.Event()
        self.release = threading.Event()

    def _consolidate(self, chunks, blocks):
        self.sorting.set()
        assert self.release.wait(60), "the test never released the sort"
        return super()._consolidate(chunks, blocks)


def test_an_append_completes_while_a_query_sorts_the_head():
    head = HeldSortHead()
    sid = np.arange(1000, dtype=np.int64)[::-1].copy()
    head.append(sid, np.full(1000, 5, np.int64), np.ones(1000))
    got: list = []
    query = threading.Thread(target=lambda: got.append(head.select(np.arange(2000, dtype=np.int64), 0, 100)))
    query.start()
    assert head.sorting.wait(60)  # the query is inside the sort
    appended = threading.Event()
    ingest = threading.Thread(target=lambda: (head.append(np.array([1500], np.int64), np.array([7], np.int64),
                                                          np.array([2.0])), appended.set()))
    ingest.start()
    finished = appended.wait(30)  # a bound for a hang, not a speed: the append takes no lock the sort holds
    head.release.set()
    query.join(60)
    ingest.join(60)
    assert finished, "the append waited for the query's sort"
    assert sum(len(b) for b in got[0]) == 1000  # the query saw what was there when it started
    blocks = head.select(np.arange(2000, dtype=np.int64), 0, 100)  # the next read sees the append too
    assert sum(len(b) for b in blocks) == 1001
    assert sorted(np.concatenate([b.sid for b in blocks]).tolist()) == list(range(1000)) + [1500]


def test_a_closed_guard_refuses_queued_and_new_queries_and_cancels_running_ones():
    from metricsgw.limits.context import QueryContext

    async def main():
        guard = QueryGuard(1, 4, 30.0)
        running_ctx = QueryContext()
        entered = asyncio.Event()
        outcome: list = []

        async def running():
            async with guard.slot("query", running_ctx):
                entered.set()
                while not running_ctx.cancelled:
                    await asyncio.sleep(0.01)
                outcome.append("cancelled")

        async def queued():
            try:
                async with guard.slot("query", QueryContext()):
                    outcome.append("ran")
            except Unavailable as err:
                outcome.append(str(err))

        tasks = [asyncio.create_task(running())]
        await entered.wait()
        tasks.append(asyncio.create_task(queued()))
        while guard.queued == 0:
            await asyncio.sleep(0.01)
        guard.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        with pytest.raises(Unavailable, match="shutting down"):
            async with guard.slot("query"):
                pass
        return outcome, running_ctx

    outcome, ctx = asyncio.run(main())
    assert sorted(outcome) == sorted(["cancelled", "the server is shutting down; retry after the restart"])
    with pytest.raises(Exception, match="shutting down"):
        ctx.check("anything")


def test_shutdown_cancels_running_queries_before_storage_and_duckdb_close(tmp_path):
    """The order: no more queries, running ones cancelled and awaited, then the flusher, then DuckDB.
    A query held in its worker thread sees the cancellation and can still read storage afterwards."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from metricsgw import appkeys as K
    from metricsgw.api.running import run_guarded
    from metricsgw.app import build_app
    from metricsgw.config import load
    from metricsgw.errors import QueryCanceled
    from metricsgw.limits.context import QueryContext
    from metricsgw.model import Matcher

    app = build_app(load({"storage.path": str(tmp_path / "data")}))
    seen: dict[str, str] = {}
    started = threading.Event()

    def work(ctx: QueryContext) -> None:
        started.set()
        try:
            for _ in range(3000):  # 30 s at most if nothing cancels it
                ctx.check("work")
                time.sleep(0.01)
            seen["end"] = "never cancelled"
        except QueryCanceled as err:
            seen["end"] = str(err)
            raise
        finally:  # storage is still open: its file set and DuckDB answer
            st = app[K.STORAGE]
            try:
                ss = st.select_series([Matcher("__name__", "=~", ".+")], None, None, QueryContext())
                st.read_samples(ss.ids, 0, 1, QueryContext())
                seen["storage"] = "open"
            except Exception as err:  # noqa: BLE001 - recorded for the assertion
                seen["storage"] = repr(err)

    async def hold(request: web.Request) -> web.Response:
        ctx = QueryContext(timeout_s=60)
        await run_guarded(request, "query", ctx, lambda: work(ctx))
        return web.json_response({})

    app.router.add_get("/hold", hold)

    async def main() -> None:
        client = TestClient(TestServer(app))
        await client.start_server()
        while not app[K.STORAGE].ready:
            await asyncio.sleep(0.01)
        request = asyncio.create_task(client.get("/hold"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        await client.server.close()  # server shutdown while the query runs, its client still connected
        await asyncio.gather(request, return_exceptions=True)
        await client.close()

    asyncio.run(main())
    assert seen == {"end": "query canceled in work: the server is shutting down", "storage": "open"}

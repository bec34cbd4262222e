"""POST /api/v1/read?scope=head: what a peer's querier reads from us -- only the samples held in memory,
not yet committed, and the table version that holds the rest (X-Metricsgw-Table-Version)."""

from __future__ import annotations

import asyncio

import numpy as np
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from metricsgw.storage.read.recent import RecentView
from tests.remote.read_client import HEADERS, build_request, decode_samples, decode_streamed
from tests.storage.test_storage import batch, opened, run

T0 = 1_700_000_000_000
STEP = 15_000
FLUSHED = (("__name__", "sh"), ("job", "flushed"))  # all of its samples are committed before the reads
BOTH = (("__name__", "sh"), ("job", "both"))  # first half committed, second half in the head
WINDOW = {"start": T0 - 1, "end": T0 + 10**9}


def _write_body(series: dict) -> bytes:
    return codec.encode_v1(list(series.items()))


async def _reads(tmp_path, bodies: list[tuple[str, bytes]]) -> tuple[list, int]:
    app = build_app(load({"storage.path": str(tmp_path), "storage.retention.time": "100y"}))
    async with TestClient(TestServer(app)) as client:
        storage = app[appkeys.STORAGE]
        while not storage.ready:
            await asyncio.sleep(0.01)
        first = {FLUSHED: [(T0 + k * STEP, float(k)) for k in range(10)],
                 BOTH: [(T0 + k * STEP, float(k)) for k in range(10)]}
        second = {BOTH: [(T0 + k * STEP, float(k)) for k in range(10, 20)]}
        for part in (first, second):
            resp = await client.post("/api/v1/write", data=_write_body(part), headers={
                "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"})
            assert resp.status == 204
            if part is first:
                await asyncio.to_thread(storage.flush)
        out = []
        for path, body in bodies:
            resp = await client.post(path, data=body, headers=HEADERS)
            out.append((resp.status, dict(resp.headers), await resp.read()))
        return out, storage.table.current.table_version


def _bits(samples):
    return [(t, np.float64(v).view(np.uint64).item()) for t, v in samples]


def test_head_scope_answers_only_uncommitted_samples_with_the_table_version(tmp_path):
    all_series = build_request([{"matchers": [("__name__", "=", "sh")], **WINDOW}])
    streamed = build_request([{"matchers": [("__name__", "=", "sh")], **WINDOW}], [pb.ReadRequest.STREAMED_XOR_CHUNKS])
    results, version = asyncio.run(_reads(tmp_path, [("/api/v1/read?scope=head", all_series),
                                                      ("/api/v1/read?scope=head", streamed),
                                                      ("/api/v1/read", all_series)]))
    (s1, h1, head), (s2, h2, head_streamed), (s3, h3, everything) = results
    assert s1 == s2 == s3 == 200
    assert version >= 1 and h1["X-Metricsgw-Table-Version"] == h2["X-Metricsgw-Table-Version"] == str(version)
    assert "X-Metricsgw-Table-Version" not in h3
    want_head = {BOTH: _bits((T0 + k * STEP, float(k)) for k in range(10, 20))}
    assert decode_samples(head)[0] == want_head
    assert decode_streamed(head_streamed, 1)[0][0] == want_head
    assert set(decode_samples(everything)[0]) == {FLUSHED, BOTH} and len(decode_samples(everything)[0][BOTH]) == 20


def test_head_scope_series_only_lists_series_with_samples_in_memory_in_the_window(tmp_path):
    def series_only(start, end):
        return build_request([{"matchers": [("__name__", "=", "sh")], "start": start, "end": end,
                               "hints": {"func": "series", "start_ms": start, "end_ms": end}}])

    results, _ = asyncio.run(_reads(tmp_path, [
        ("/api/v1/read?scope=head", series_only(T0 - 1, T0 + 10**9)),
        ("/api/v1/read?scope=head", series_only(T0, T0 + 9 * STEP)),  # only committed samples in this window
        ("/api/v1/read", series_only(T0, T0 + 9 * STEP))]))
    assert [set(decode_samples(body)[0]) for _, _, body in results] == [{BOTH}, set(), {FLUSHED, BOTH}]


def test_head_scope_limit_keeps_the_first_series_in_label_order_and_charges_only_series_in_memory(tmp_path):
    """A peer's metadata call asks for at most --query.max-metadata-series (+1) series; the head read answers
    the first in label order. The flushed series it does not hold count against no budget (a shard's catalog
    may hold far more series than its head)."""
    def series_only(path_limit: str):
        body = build_request([{"matchers": [("__name__", "=~", "s.*")], **WINDOW,
                               "hints": {"func": "series", "start_ms": WINDOW["start"], "end_ms": WINDOW["end"]}}])
        return f"/api/v1/read?scope=head{path_limit}", body

    results, _ = asyncio.run(_reads(tmp_path, [series_only(""), series_only("&limit=1"), series_only("&limit=x")]))
    (s1, _, every), (s2, _, one), (s3, _, bad) = results
    assert (s1, s2, s3) == (200, 200, 400)
    assert set(decode_samples(every)[0]) == {BOTH} and set(decode_samples(one)[0]) == {BOTH}


def test_unknown_scope_is_bad_data(tmp_path):
    results, _ = asyncio.run(_reads(tmp_path, [("/api/v1/read?scope=table", build_request([{
        "matchers": [("__name__", "=", "sh")], **WINDOW}]))]))
    status, _, body = results[0]
    assert status == 400 and b"scope" in body


def test_a_view_taken_before_a_flush_still_reads_what_the_flush_committed(tmp_path):
    """The view's heads and version come together: a sample is in the view, or in a version <= its version's
    successors -- never in neither, whatever a flush does meanwhile."""
    st = opened(tmp_path)
    try:
        run(st.append(batch([0, 1], [T0, T0], [1.0, 2.0])))
        view = RecentView(st)
        before = view.table_version
        st.flush()
        assert st.table.current.table_version > before
        ctx = QueryContext()
        ss = view.select_series([Matcher("__name__", "=", "m")], T0 - 1, T0 + 1, ctx)
        assert len(ss) == 2
        block = view.read_samples(ss.ids, T0 - 1, T0 + 1, ctx)
        assert sorted(block.v.tolist()) == [1.0, 2.0]
        assert ctx.samples == 2  # charged as the storage charges them
        fresh = RecentView(st)  # after the flush: nothing in memory, the new version
        assert fresh.table_version == st.table.current.table_version
        assert len(fresh.select_series([Matcher("__name__", "=", "m")], T0 - 1, T0 + 1, QueryContext())) == 0
    finally:
        st.close()


def test_a_small_columnar_head_read_of_one_metric_is_answered_on_the_loop_and_the_same_as_in_a_thread(
        tmp_path, monkeypatch):
    """remote_read.INLINE_HEAD_SAMPLES: a read that names its metric and is small skips the thread hop once the head
    needs no sort (a read consolidated it); a larger one, or one whose matchers would scan the catalog, or one that
    would sort what was written since the last read, goes to a query thread. The answer is the same bytes."""
    import threading

    from metricsgw.cluster import head_columns
    from metricsgw.api import remote_read

    threads = []
    columns = remote_read._columns
    monkeypatch.setattr(remote_read, "_columns",
                        lambda *a, **kw: threads.append(threading.current_thread()) or columns(*a, **kw))
    path = f"/api/v1/read?scope=head&format={head_columns.FORMAT}"
    named = build_request([{"matchers": [("__name__", "=", "sh")], **WINDOW}])
    regex = build_request([{"matchers": [("job", "=~", "b.*")], **WINDOW}])
    # the first read finds the writes unsorted (a thread sorts them), the regex one a thread too, the third the loop
    results, _ = asyncio.run(_reads(tmp_path, [(path, named), (path, regex), (path, named)]))
    monkeypatch.setattr(remote_read, "INLINE_HEAD_SAMPLES", 0)
    threads_inline, threads[:] = list(threads), []
    again, _ = asyncio.run(_reads(tmp_path / "again", [(path, named), (path, named)]))
    (s1, _, sorted_body), (s2, _, regex_body), (s3, _, inline_body) = results
    assert s1 == s2 == s3 == again[1][0] == 200
    loop_thread = threading.main_thread()
    assert [t is loop_thread for t in threads_inline] == [False, False, True]
    assert [t is loop_thread for t in threads] == [False, False]  # over the limit: a query thread
    assert inline_body == sorted_body == regex_body == again[1][2]  # the same answer, whichever way it was read
    assert head_columns.decode_response(inline_body)[0].block.v.tolist() == [float(k) for k in range(10, 20)]

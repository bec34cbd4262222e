"""The columnar ?scope=head answer (cluster/head_columns.py): the codec, which series carry their label sets, and
a query process reading a peer on the same table through it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile

import aiohttp
import numpy as np
import pyarrow as pa
import pytest
from aiohttp import web

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.cluster import head_columns
from metricsgw.config import load
from metricsgw.errors import BadData
from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN, Matcher, SampleBlock, series_key
from metricsgw.remote import codec
from metricsgw.storage import crashpoints
from metricsgw.storage.batch import HistogramBlock
from metricsgw.storage.read.recent import RecentView
from tests.remote.read_client import HEADERS, build_request
from tests.storage.test_storage import batch, opened, run
from tests.web.harness import WRITE_HEADERS, fetch, serving

T0 = 1_700_000_000_000


def _result(rng, n_series: int, n_labelled: int):
    ids = np.sort(rng.choice(2**62, n_series, replace=False).astype(np.int64) - 2**61)
    labelled = np.sort(rng.choice(n_series, n_labelled, replace=False)).astype(np.int64)
    labels = [(("__name__", f"m{i}"), ("gpu", "é" * (i % 3)), ("job", "a\\b\"c")) for i in range(n_labelled)]
    counts = rng.integers(0, 4, n_series)
    sid = np.repeat(ids, counts)
    t = np.concatenate([np.empty(0, np.int64)] + [np.sort(rng.choice(10**6, c, replace=False)) for c in counts]) + T0
    v = rng.normal(size=len(sid))
    if len(v):
        v[0] = STALE_NAN
    h_sid = ids[: min(3, n_series)]
    hists = HistogramBlock(h_sid, np.full(len(h_sid), T0), pa.array([b"\x08\x01" * (i + 1) for i in range(len(h_sid))],
                                                                     pa.binary()))
    return ids, labelled, labels, SampleBlock(sid, t, v), hists


@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (50, 0), (300, 17)])
def test_codec_round_trip_is_exact(shape):
    rng = np.random.default_rng(shape[0])
    results = [_result(rng, *shape), _result(rng, 5, 2)]
    body = head_columns.encode_response([
        head_columns.encode_result(ids, labelled, [series_key(lb) for lb in labels], block, hists)
        for ids, labelled, labels, block, hists in results])
    decoded = head_columns.decode_response(body)
    assert len(decoded) == 2
    for got, (ids, labelled, labels, block, hists) in zip(decoded, results):
        assert got.ids.tolist() == ids.tolist()
        want = [None] * len(ids)
        for i, lb in zip(labelled.tolist(), labels):
            want[i] = lb
        assert got.labels == want
        assert got.block.sid.tolist() == block.sid.tolist() and got.block.t.tolist() == block.t.tolist()
        assert got.block.v.view(np.uint64).tolist() == block.v.view(np.uint64).tolist()  # bit-exact, stale marker too
        assert got.hists.sid.tolist() == hists.sid.tolist() and got.hists.blob.to_pylist() == hists.blob.to_pylist()


def test_codec_refuses_what_is_not_an_answer():
    rng = np.random.default_rng(1)
    ids, labelled, labels, block, hists = _result(rng, 20, 3)
    body = head_columns.encode_response([head_columns.encode_result(ids, labelled, [series_key(lb) for lb in labels],
                                                                    block, hists)])
    for bad in (b"", b"garbage", body[:-1], body + b"\x00", body[:30], head_columns.MAGIC + b"\xff\xff\xff\xff"):
        with pytest.raises(BadData):
            head_columns.decode_response(bad)


def test_a_view_taken_while_a_flush_commits_names_the_series_being_committed(tmp_path, monkeypatch):
    """The series a flush writes are out of the pending set before its commit: a view taken in between (its table
    version the one before the commit) must still count them as uncommitted, or a reader would be sent them
    without labels and not know them at that version."""
    st = opened(tmp_path)
    seen = {}
    reached = crashpoints.reached

    def at(name: str) -> None:
        if name == "flush.files" and "view" not in seen:
            seen["view"] = RecentView(st)
            seen["version"] = st.table.current.table_version
        reached(name)

    monkeypatch.setattr(crashpoints, "reached", at)
    try:
        run(st.append(batch([0, 1], [T0, T0], [1.0, 2.0])))
        sids = RecentView(st).select_series([Matcher("__name__", "=", "m")], T0 - 1, T0 + 1, QueryContext()).ids
        assert len(sids) == 2
        st.flush()
        view = seen["view"]
        assert view.table_version == seen["version"] < st.table.current.table_version
        assert set(view.uncommitted.tolist()) == set(sids.tolist())
        assert len(RecentView(st).uncommitted) == 0  # committed now
    finally:
        st.close()


def _body(series: dict) -> bytes:
    return codec.encode_v1(list(series.items()))


OLD = (("__name__", "cm_old"), ("job", "x"))  # committed by a flush, then sampled again
NEW = (("__name__", "cm_new"), ("job", "x"))  # only in the head


def test_a_reader_on_the_same_table_gets_labels_only_for_uncommitted_series_and_answers_in_full(tmp_path, caplog):
    sock_dir = tempfile.mkdtemp(prefix="mgw-", dir="/tmp")  # a socket path must stay under ~100 bytes
    sock = os.path.join(sock_dir, "a.sock")
    settings = {"storage.path": str(tmp_path / "data"), "storage.retention.time": "100y"}

    async def main():
        app = build_app(load({**settings, "storage.writer-id": "a"}))
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        await web.UnixSite(runner, sock).start()  # a unix: peer, as a query process reads its shards
        try:
            while not app[appkeys.STORAGE].ready:
                await asyncio.sleep(0.01)
            async with serving(tmp_path, settings={"storage.writer-id": "b", "storage.retention.time": "100y",
                                                   "cluster.peers": [f"unix:{sock}"]}) as b, \
                    aiohttp.ClientSession() as s, \
                    aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock)) as to_a:
                return await _scenario(app, to_a, s, b.url)
        finally:
            await runner.cleanup()

    try:
        status, text = asyncio.run(main())
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert status == 200, text
    body = json.loads(text)
    assert "warnings" not in body, body
    got = {r["metric"]["__name__"]: [v for _, v in r["values"]] for r in body["data"]["result"]}
    assert got == {"cm_old": ["1", "2"], "cm_new": ["3"]}
    assert not [r for r in caplog.records if "does not know" in r.getMessage()]


async def _scenario(a_app, to_a: aiohttp.ClientSession, s: aiohttp.ClientSession, b_url: str) -> tuple[int, str]:
    a = "http://a"
    status, text, _ = await fetch(to_a, "POST", a + "/api/v1/write", headers=WRITE_HEADERS, data=_body({OLD: [(T0, 1.0)]}))
    assert status == 204, text
    await asyncio.to_thread(a_app[appkeys.STORAGE].flush)
    status, text, _ = await fetch(to_a, "POST", a + "/api/v1/write", headers=WRITE_HEADERS,
                                  data=_body({OLD: [(T0 + 15_000, 2.0)], NEW: [(T0 + 15_000, 3.0)]}))
    assert status == 204, text
    req = build_request([{"matchers": [("__name__", "=~", "cm_.*")], "start": T0 - 1, "end": T0 + 10**6}])
    async with to_a.post(a + "/api/v1/read?scope=head&format=columns", data=req, headers=HEADERS) as r:
        assert r.status == 200 and r.headers["Content-Type"] == head_columns.CONTENT_TYPE
        (res,) = head_columns.decode_response(await r.read())
    by_label = {lb: sid for sid, lb in zip(res.ids.tolist(), res.labels)}
    assert set(by_label) == {None, NEW}  # OLD is in the table: sent by id only
    assert sorted(res.block.v.tolist()) == [2.0, 3.0]
    # label sets only: remote read's format, whatever was asked
    req = build_request([{"matchers": [("__name__", "=~", "cm_.*")], "start": T0 - 1, "end": T0 + 10**6,
                          "hints": {"func": "series", "start_ms": T0 - 1, "end_ms": T0 + 10**6}}])
    async with to_a.post(a + "/api/v1/read?scope=head&format=columns", data=req, headers=HEADERS) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "application/x-protobuf"
    # b reads a's head through it (a unix: peer) and knows OLD by its id
    status, text, _ = await fetch(s, "GET", b_url + "/api/v1/query_range", params={
        "query": '{__name__=~"cm_.*"}', "start": str(T0 / 1000), "end": str(T0 / 1000 + 15), "step": "15"})
    return status, text


def test_a_head_reads_ids_are_the_ids_of_its_label_selection(tmp_path):
    """The columnar answer selects ids without label sets (``RecentView.select_ids``): the same series, charged the
    same, as the label selection remote read's format uses, for matchers and windows that cut across heads."""
    rng = np.random.default_rng(7)
    st = opened(tmp_path)
    try:
        for round_ in range(3):
            idx = rng.choice(40, 25, replace=False).tolist()
            run(st.append(batch(idx, [T0 + round_ * 15_000] * len(idx), rng.normal(size=len(idx)).tolist(),
                                metric=f"m{round_ % 2}")))
            if round_ == 0:
                st.flush()
        view = RecentView(st)
        for matchers in ([Matcher("__name__", "=", "m0")], [Matcher("__name__", "=~", "m.*"), Matcher("i", "=~", "1.*")],
                         [Matcher("__name__", "=~", "m.*"), Matcher("i", "!=", "3")]):
            for lo, hi in ((T0 - 1, T0 + 10**6), (T0 + 1, T0 + 20_000), (T0 + 40_000, T0 + 50_000)):
                by_labels, by_ids = QueryContext(), QueryContext()
                want = np.sort(view.select_series(matchers, lo, hi, by_labels).ids)
                got = view.select_ids(matchers, lo, hi, by_ids)
                assert got.tolist() == want.tolist()
                assert by_ids.series == by_labels.series
    finally:
        st.close()

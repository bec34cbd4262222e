"""POST /api/v1/write through the real app and the real storage: a table of broken requests.

Each row runs against a gateway that already holds a baseline; afterwards the storage is
reopened from disk and must hold the baseline unchanged plus exactly the row's valid series.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import snappy
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.proto import remote_v2_pb2 as v2pb
from metricsgw.storage.store import Storage

V1 = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "0.1.0"}
V2 = {"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request", "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "2.0.0"}
MAX_BODY = 4096


def make_app(path) -> "web.Application":
    # The table's samples are stamped near 1970: a retention of a century keeps them in the window
    # (samples outside it are tested in tests/ingest/test_time_window.py).
    return build_app(load({"remote-write.max-body-size": str(MAX_BODY), "remote-write.max-decoded-size": "64KiB",
                           "storage.path": str(path), "storage.retention.time": "100y"}))


async def _exchange(app, requests, before=None):
    async with TestClient(TestServer(app)) as client:
        while not app[appkeys.STORAGE].ready:
            await asyncio.sleep(0.01)
        if before is not None:
            before(app)
        out = []
        for headers, body in requests:
            resp = await client.post("/api/v1/write", data=body, headers=headers)
            out.append((resp.status, await resp.text(), dict(resp.headers)))
        return out


def post(app, headers, body, before=None):
    return asyncio.run(_exchange(app, [(headers, body)], before))[0]


def read_back(path) -> list[tuple[str, int, int]]:
    """(metric, ts, value bits) of every sample, read back from disk."""
    st = Storage(str(path))
    st.open()
    try:
        ss = st.select_series([Matcher("__name__", "=~", ".+")], None, None)
        names = {int(s): dict(lb)["__name__"] for s, lb in zip(ss.ids, ss.labels)}
        blk = st.read_samples(ss.ids, -2**62, 2**62, QueryContext())
        return sorted((names[int(s)], int(t), int(b)) for s, t, b in zip(blk.sid, blk.t, blk.v.view(np.uint64)))
    finally:
        st.close(flush=False)


def good(name="ok", n=1):
    return [([("__name__", name), ("i", str(i))], [(1000, float(i))]) for i in range(n)]


BAD_LABELS = [([("__name__", "bad"), ("a-b", "1")], [(1000, 1.0)])]


def v2_with_histogram() -> bytes:
    req = v2pb.Request(symbols=["", "__name__", "h"])
    req.timeseries.add(labels_refs=[1, 2]).histograms.add(count_int=1, timestamp=1)
    return snappy.compress(req.SerializeToString())


def v1_with_exemplar() -> bytes:
    req = v1pb.WriteRequest.FromString(codec.encode_v1(good(), compress=False))
    req.timeseries[0].exemplars.add(value=1.0, timestamp=1000)
    return snappy.compress(req.SerializeToString())


async def chunks(data: bytes):
    for i in range(0, len(data), 1000):
        yield data[i:i + 1000]


# name, headers, body, status, message substring, metrics stored afterwards
TABLE = [
    ("v1 ok", V1, codec.encode_v1(good(n=2)), 204, "", ["ok", "ok"]),
    ("v2 ok", V2, codec.encode_v2(good(n=2)), 204, "", ["ok", "ok"]),
    ("no Content-Encoding means snappy", {"Content-Type": "application/x-protobuf"}, codec.encode_v1(good()),
     204, "", ["ok"]),
    ("json content type", {**V1, "Content-Type": "application/json"}, codec.encode_v1(good()), 415,
     "expected application/x-protobuf", []),
    ("unknown proto", {**V1, "Content-Type": "application/x-protobuf;proto=foo.Bar"}, codec.encode_v1(good()), 415,
     "unsupported remote-write protobuf message 'foo.Bar'", []),
    ("gzip", {**V1, "Content-Encoding": "gzip"}, codec.encode_v1(good()), 415, "only snappy", []),
    ("body over limit", V1, b"\x00" * (MAX_BODY + 1), 413, "--remote-write.max-body-size", []),
    ("chunked body over limit", V1, "chunked", 413, "--remote-write.max-body-size", []),
    ("declared 1 GiB", V1, bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00" * 20, 413,
     "declares 1073741824 decoded bytes", []),
    ("corrupt snappy", V1, b"\x20" + b"\x01" * 40, 400, "snappy: corrupt input", []),
    ("corrupt protobuf", V1, snappy.compress(b"\x0a\x30\x0a"), 400, "cannot decode remote-write 1.0 protobuf", []),
    ("empty body", V1, b"", 400, "snappy", []),
    ("bad labels next to good", V1, codec.encode_v1(good() + BAD_LABELS + good("ok2")), 400,
     "invalid_labels: series {__name__=\"bad\", a-b=\"1\"}: invalid label name 'a-b'", ["ok", "ok2"]),
    ("v2 bad labels next to good", V2, codec.encode_v2(BAD_LABELS + good()), 400, "invalid label name", ["ok"]),
    ("missing metric name", V1, codec.encode_v1([([("job", "x")], [(1, 1.0)])] + good()), 400,
     "missing metric name", ["ok"]),
    ("many rejections are capped", V1, codec.encode_v1(BAD_LABELS * 15 + good()), 400, "and 5 more", ["ok"]),
    ("native histogram only is accepted", V2, v2_with_histogram(), 204, "", []),
    ("exemplar is accepted, sample stored", V1, v1_with_exemplar(), 204, "", ["ok"]),
]


BASELINE = codec.encode_v1([([("__name__", "base"), ("i", str(i))], [(500, float(i)), (900, float("nan"))])
                            for i in range(3)])


@pytest.mark.parametrize("name, headers, body, status, message, stored", TABLE, ids=[row[0] for row in TABLE])
def test_bad_input_table(tmp_path, name, headers, body, status, message, stored):
    app = make_app(tmp_path)
    requests = [(V1, BASELINE), (headers, chunks(b"\x00" * (MAX_BODY * 3)) if body == "chunked" else body)]
    (base_status, _, _), (got_status, text, _) = asyncio.run(_exchange(app, requests))
    assert base_status == 204
    assert got_status == status, text
    assert message in text
    on_disk = read_back(tmp_path)
    baseline = [r for r in on_disk if r[0] == "base"]
    assert len(baseline) == 6 and baseline[0][1:] == (500, np.float64(0.0).view(np.uint64))
    assert sorted(r[0] for r in on_disk if r[0] != "base") == sorted(stored)
    tel = app[appkeys.TELEMETRY]
    version = "2" if headers is V2 else ("unknown" if status == 415 else "1")
    baseline_too = version == "1" and status == 204  # the baseline request was counted as well
    assert tel.registry.get_sample_value("metricsgw_remote_write_requests_total",
                                         {"version": version, "code": str(status)}) == 1 + baseline_too


def test_v2_written_headers_on_success_and_partial_write(tmp_path):
    app = make_app(tmp_path)
    replies = asyncio.run(_exchange(app, [(V2, codec.encode_v2(good(n=3))), (V2, codec.encode_v2(good(n=2) + BAD_LABELS)),
                                          (V2, v2_with_histogram()), (V1, codec.encode_v1(good()))]))
    (s1, _, h1), (s2, _, h2), (s3, _, h3), (s4, _, h4) = replies
    assert s1 == 204
    assert h1["X-Prometheus-Remote-Write-Samples-Written"] == "3"
    assert h1["X-Prometheus-Remote-Write-Histograms-Written"] == "0"
    assert h1["X-Prometheus-Remote-Write-Exemplars-Written"] == "0"
    assert s2 == 400 and h2["X-Prometheus-Remote-Write-Samples-Written"] == "2"
    assert s3 == 204 and h3["X-Prometheus-Remote-Write-Samples-Written"] == "0"
    assert h3["X-Prometheus-Remote-Write-Histograms-Written"] == "1"
    assert s4 == 204 and "X-Prometheus-Remote-Write-Samples-Written" not in h4  # a 1.0 sender gets none


def test_wal_failure_is_503_so_the_sender_retries(tmp_path):
    app = make_app(tmp_path)
    status, text, headers = post(app, V1, codec.encode_v1(good()), before=lambda a: a[appkeys.STORAGE].wal.close())
    assert status == 503 and "WAL" in text, text
    assert "Retry-After" in headers


def test_samples_ingested_counter_and_values_bit_exact(tmp_path):
    app = make_app(tmp_path)
    stale = np.array([0x7FF0000000000002], np.uint64).view(np.float64)[0]
    status, _, _ = post(app, V1, codec.encode_v1([([("__name__", "s")], [(1, stale), (2, float("-inf"))])]))
    assert status == 204
    assert [bits for _, _, bits in read_back(tmp_path)] == [0x7FF0000000000002, 0xFFF0000000000000]
    assert app[appkeys.TELEMETRY].registry.get_sample_value("metricsgw_ingested_samples_total") == 2


# ---------------------------------------------------------------- drops by configured relabel rules

DROP_RULES = """
- source_labels: [__name__]
  regex: dropme
  action: drop
"""


def dropped(name="dropme", n=2):
    return [([("__name__", name), ("i", str(i))], [(1000, float(i)), (2000, float(i))]) for i in range(n)]


def app_with_rules(tmp_path, **settings):
    rules = tmp_path / "drop.yml"
    rules.write_text(DROP_RULES)
    return build_app(load({"storage.path": str(tmp_path / "data"), "rules.file": [str(rules)],
                           "storage.retention.time": "100y", **settings}))  # samples near 1970, as make_app's


def written(headers) -> int:
    return int(headers["X-Prometheus-Remote-Write-Samples-Written"])


def test_configured_drops_are_a_success_and_count_as_written(tmp_path):
    """A series the operator's rules drop is answered 204 (Prometheus counts no failed sample) and
    counted by reason; in 2.0 its samples count as written (accepted), even when nothing is stored."""
    app = app_with_rules(tmp_path)
    replies = asyncio.run(_exchange(app, [
        (V1, codec.encode_v1(dropped() + good())),
        (V2, codec.encode_v2(dropped() + good("ok2", n=2))),
        (V2, codec.encode_v2(dropped())),  # everything dropped: still 2xx, written == sent
        (V1, codec.encode_v1(dropped())),  # known (cached) drops take the same path
    ]))
    assert [status for status, _, _ in replies] == [204, 204, 204, 204], replies
    assert written(replies[1][2]) == 4 + 2 and written(replies[2][2]) == 4
    tel = app[appkeys.TELEMETRY].registry
    assert tel.get_sample_value("metricsgw_discarded_samples_total", {"reason": "relabel_drop"}) == 16
    assert tel.get_sample_value("metricsgw_ingested_samples_total") == 3
    assert sorted(r[0] for r in read_back(tmp_path / "data")) == ["ok", "ok2", "ok2"]


def test_drops_next_to_refused_series_still_tell_the_sender(tmp_path):
    """Invalid data and limits stay 400 when the request also holds configured drops; the message
    and the 2.0 written count keep the drops apart from the refusals."""
    app = app_with_rules(tmp_path, **{"ingest.max-label-names-per-series": "3"})
    too_many_labels = [([("__name__", "wide"), ("a", "1"), ("b", "2"), ("c", "3")], [(1000, 1.0)])]
    replies = asyncio.run(_exchange(app, [
        (V2, codec.encode_v2(dropped() + BAD_LABELS + good())),
        (V1, codec.encode_v1(dropped() + too_many_labels + good("ok2"))),
    ]))
    (s1, text1, h1), (s2, text2, _) = replies
    assert s1 == 400 and "invalid label name" in text1 and "relabel_drop" not in text1, text1
    assert "1 series rejected, 1 samples not stored (1 samples of valid series were stored, " \
           "4 dropped by relabel rules)" in text1
    assert written(h1) == 1 + 4
    assert s2 == 400 and "--ingest.max-label-names-per-series=3" in text2, text2
    tel = app[appkeys.TELEMETRY].registry
    assert tel.get_sample_value("metricsgw_discarded_samples_total", {"reason": "relabel_drop"}) == 8
    assert tel.get_sample_value("metricsgw_discarded_samples_total", {"reason": "max_label_names_per_series"}) == 1
    assert sorted(r[0] for r in read_back(tmp_path / "data")) == ["ok", "ok2"]


def _native_written(headers) -> tuple[int, int, int]:
    return tuple(int(headers[f"X-Prometheus-Remote-Write-{k}-Written"]) for k in ("Samples", "Histograms", "Exemplars"))


def test_v2_written_counts_of_histograms_and_exemplars_are_exact(tmp_path):
    """Written = stored + dropped by the operator's rules; refused (invalid histogram, invalid labels) not."""
    from tests.native_requests import int_histogram, v2_request

    bad = int_histogram(1000) | {"positive_deltas": [1]}  # spans announce 4 positive buckets
    kept = {"labels": [("__name__", "nh_kept")], "samples": [(1000, 1.0), (2000, 2.0)],
            "histograms": [int_histogram(1000), bad, int_histogram(3000)],
            "exemplars": [([("trace_id", "a")], 1.0, 1000), ([("trace_id", "b")], 2.0, 2000)]}
    dropped_by_rules = {"labels": [("__name__", "dropme"), ("i", "0")], "samples": [(1000, 1.0)],
                        "histograms": [int_histogram(1000), int_histogram(2000)],
                        "exemplars": [([("trace_id", "c")], 3.0, 1000)]}
    bad_labels = {"labels": [("__name__", "bad"), ("a-b", "1")], "samples": [(1000, 1.0)],
                  "histograms": [int_histogram(1000)], "exemplars": [([("trace_id", "d")], 4.0, 1000)]}
    clean = {"labels": [("__name__", "nh_clean")], "histograms": [int_histogram(1000)],
             "exemplars": [([("trace_id", "e")], 5.0, 1000)]}
    app = app_with_rules(tmp_path)
    replies = asyncio.run(_exchange(app, [(V2, v2_request([kept, dropped_by_rules, bad_labels])),
                                          (V2, v2_request([clean, dropped_by_rules]))]))
    (s1, text1, h1), (s2, _, h2) = replies
    assert s1 == 400 and "invalid_histogram" in text1 and "invalid label name" in text1
    assert _native_written(h1) == (2 + 1, 2 + 2, 2 + 1)
    assert s2 == 204 and _native_written(h2) == (1, 1 + 2, 1 + 1)
    from metricsgw.limits.context import QueryContext
    from metricsgw.model import Matcher
    from metricsgw.storage.store import Storage

    st = Storage(str(tmp_path / "data"))  # the app is closed: what it stored, read back from disk
    st.open()
    ss = st.select_series([Matcher("__name__", "=~", "nh_.*|dropme|bad")], None, None, QueryContext())
    assert sorted(dict(lb)["__name__"] for lb in ss.labels) == ["nh_clean", "nh_kept"]
    assert len(st.read_histograms(ss.ids, 0, 10_000, QueryContext())) == 3
    assert len(st.read_exemplars(ss.ids, 0, 10_000, QueryContext())) == 3
    st.close(flush=False)

"""POST /api/v1/write through aiohttp's test server: a table of broken requests.

Storage here is an in-memory stand-in for the storage interface (append/has_series), so
the table can check exactly what was appended; the end-to-end table with the real
storage lives with the app tests.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import snappy
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.api.middleware import prometheus_errors
from metricsgw.config import load
from metricsgw.errors import Unavailable
from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.proto import remote_v2_pb2 as v2pb
from metricsgw.remote.write_handler import handle_write
from metricsgw.telemetry import Telemetry

V1 = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "0.1.0"}
V2 = {"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request", "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "2.0.0"}
MAX_BODY = 4096


class MemoryStorage:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.series: dict[int, tuple] = {}
        self.batches = []
        self.fail = fail

    def has_series(self, sid: int) -> bool:
        return sid in self.series

    async def append(self, batch) -> None:
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        self.series.update(batch.new_series)
        self.batches.append(batch)

    def stored_metrics(self) -> list[str]:
        names = {sid: dict(labels)["__name__"] for sid, labels in self.series.items()}
        return sorted(names[sid] for b in self.batches for sid in b.sid.tolist())


def make_app(storage) -> web.Application:
    app = web.Application(middlewares=[prometheus_errors])
    telemetry = Telemetry()
    app[appkeys.CONFIG] = load({"remote-write.max-body-size": str(MAX_BODY),
                                "remote-write.max-decoded-size": "64KiB"})
    app[appkeys.STORAGE] = storage
    app[appkeys.TELEMETRY] = telemetry
    app[appkeys.PIPELINE] = IngestPipeline(storage, telemetry)
    app.router.add_post("/api/v1/write", handle_write)
    return app


async def _post(app, headers, body):
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/api/v1/write", data=body, headers=headers)
        return resp.status, await resp.text(), dict(resp.headers)


def post(app, headers, body):
    return asyncio.run(_post(app, headers, body))


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


@pytest.mark.parametrize("name, headers, body, status, message, stored", TABLE, ids=[row[0] for row in TABLE])
def test_bad_input_table(name, headers, body, status, message, stored):
    storage = MemoryStorage()
    app = make_app(storage)
    got_status, text, _ = post(app, headers, chunks(b"\x00" * (MAX_BODY * 3)) if body == "chunked" else body)
    assert got_status == status, text
    assert message in text
    assert storage.stored_metrics() == stored
    tel = app[appkeys.TELEMETRY]
    version = "2" if headers is V2 else ("unknown" if status == 415 else "1")
    assert tel.registry.get_sample_value("metricsgw_remote_write_requests_total",
                                         {"version": version, "code": str(status)}) == 1


def test_v2_written_headers_on_success_and_partial_write():
    status, _, headers = post(make_app(MemoryStorage()), V2, codec.encode_v2(good(n=3)))
    assert status == 204
    assert headers["X-Prometheus-Remote-Write-Samples-Written"] == "3"
    assert headers["X-Prometheus-Remote-Write-Histograms-Written"] == "0"
    assert headers["X-Prometheus-Remote-Write-Exemplars-Written"] == "0"
    status, _, headers = post(make_app(MemoryStorage()), V2, codec.encode_v2(good(n=2) + BAD_LABELS))
    assert status == 400 and headers["X-Prometheus-Remote-Write-Samples-Written"] == "2"
    status, _, headers = post(make_app(MemoryStorage()), V2, v2_with_histogram())
    assert status == 204 and headers["X-Prometheus-Remote-Write-Samples-Written"] == "0"
    assert headers["X-Prometheus-Remote-Write-Histograms-Written"] == "0"
    _, _, headers = post(make_app(MemoryStorage()), V1, codec.encode_v1(good()))
    assert "X-Prometheus-Remote-Write-Samples-Written" not in headers  # a 1.0 sender gets none


@pytest.mark.parametrize("failure", [Unavailable("WAL is full"), OSError(28, "No space left on device")])
def test_storage_failure_is_503_so_the_sender_retries(failure):
    storage = MemoryStorage(fail=failure)
    status, text, headers = post(make_app(storage), V1, codec.encode_v1(good()))
    assert status == 503 and ("WAL is full" in text or "No space left" in text)
    assert "Retry-After" in headers


def test_samples_ingested_counter_and_values_bit_exact():
    storage = MemoryStorage()
    app = make_app(storage)
    stale = np.array([0x7FF0000000000002], np.uint64).view(np.float64)[0]
    status, _, _ = post(app, V1, codec.encode_v1([([("__name__", "s")], [(1, stale), (2, float("-inf"))])]))
    assert status == 204
    assert storage.batches[0].v.view(np.uint64).tolist() == [0x7FF0000000000002, 0xFFF0000000000000]
    assert app[appkeys.TELEMETRY].registry.get_sample_value("metricsgw_ingested_samples_total") == 2

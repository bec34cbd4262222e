"""The committed *_pb2.py modules match the .proto files (regenerated with grpc_tools)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

PROTO_DIR = Path(__file__).resolve().parents[2] / "metricsgw" / "remote" / "proto"


@pytest.mark.parametrize("name", ["remote_v1", "remote_v2", "remote_read"])
def test_generated_code_is_up_to_date(tmp_path, name):
    protoc = pytest.importorskip("grpc_tools.protoc")
    shutil.copy(PROTO_DIR / f"{name}.proto", tmp_path)
    rc = protoc.main(["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", str(tmp_path / f"{name}.proto")])
    assert rc == 0
    fresh = (tmp_path / f"{name}_pb2.py").read_text()
    assert fresh == (PROTO_DIR / f"{name}_pb2.py").read_text(), (
        f"regenerate: {sys.executable} -m grpc_tools.protoc -I metricsgw/remote/proto "
        f"--python_out=metricsgw/remote/proto metricsgw/remote/proto/{name}.proto")


def test_wire_names_match_prometheus():
    from metricsgw.remote.proto import remote_v1_pb2, remote_v2_pb2

    assert remote_v1_pb2.WriteRequest.DESCRIPTOR.full_name == "prometheus.WriteRequest"
    assert remote_v2_pb2.Request.DESCRIPTOR.full_name == "io.prometheus.write.v2.Request"
    ts = remote_v1_pb2.TimeSeries.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in ts.items()} == {"labels": 1, "samples": 2, "exemplars": 3, "histograms": 4}
    ts2 = remote_v2_pb2.TimeSeries.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in ts2.items()} == {
        "labels_refs": 1, "samples": 2, "histograms": 3, "exemplars": 4, "metadata": 5, "created_timestamp": 6}
    md = remote_v1_pb2.MetricMetadata.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in md.items()} == {"type": 1, "metric_family_name": 2, "help": 4, "unit": 5}


def test_read_messages_match_prometheus():
    """Field numbers of prompb's read-path messages (v2.42.0); the re-declared Label/Sample/TimeSeries
    are wire-identical to remote_v1's."""
    from metricsgw.remote.proto import remote_read_pb2 as rr
    from metricsgw.remote.proto import remote_v1_pb2 as v1

    def numbers(msg):
        return {n: f.number for n, f in msg.DESCRIPTOR.fields_by_name.items()}

    for name in ("ReadRequest", "ReadResponse", "Query", "QueryResult", "ChunkedReadResponse", "ChunkedSeries",
                 "Chunk", "LabelMatcher", "ReadHints"):
        assert getattr(rr, name).DESCRIPTOR.full_name == f"prometheus.{name}"
    assert numbers(rr.ReadRequest) == {"queries": 1, "accepted_response_types": 2}
    assert numbers(rr.Query) == {"start_timestamp_ms": 1, "end_timestamp_ms": 2, "matchers": 3, "hints": 4}
    assert numbers(rr.ReadHints) == {"step_ms": 1, "func": 2, "start_ms": 3, "end_ms": 4, "grouping": 5, "by": 6,
                                     "range_ms": 7}
    assert numbers(rr.ChunkedReadResponse) == {"chunked_series": 1, "query_index": 2}
    assert numbers(rr.Chunk) == {"min_time_ms": 1, "max_time_ms": 2, "type": 3, "data": 4}
    assert dict(rr.ReadRequest.ResponseType.items()) == {"SAMPLES": 0, "STREAMED_XOR_CHUNKS": 1}
    assert dict(rr.LabelMatcher.Type.items()) == {"EQ": 0, "NEQ": 1, "RE": 2, "NRE": 3}
    assert dict(rr.Chunk.Encoding.items()) == {"UNKNOWN": 0, "XOR": 1, "HISTOGRAM": 2, "FLOAT_HISTOGRAM": 3}
    ts = rr.ReadTimeSeries(labels=[rr.ReadLabel(name="a", value="b")],
                           samples=[rr.ReadSample(value=-0.5, timestamp=-3)])
    same = v1.TimeSeries.FromString(ts.SerializeToString())
    assert same.SerializeToString() == ts.SerializeToString()
    assert (same.labels[0].name, same.samples[0].value, same.samples[0].timestamp) == ("a", -0.5, -3)
    # histograms are passed on as stored: bytes here, prometheus.Histogram messages on the wire
    assert numbers(rr.ReadTimeSeries) == {"labels": 1, "samples": 2, "histograms": 4}
    h = v1.Histogram(count_int=3, sum=1.5, schema=2, positive_spans=[v1.BucketSpan(offset=-1, length=2)],
                     positive_deltas=[1, 1], timestamp=7)
    ts = rr.ReadTimeSeries(labels=[rr.ReadLabel(name="a", value="b")], histograms=[h.SerializeToString()])
    assert v1.TimeSeries.FromString(ts.SerializeToString()).histograms[0] == h

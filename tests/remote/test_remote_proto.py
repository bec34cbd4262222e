"""The committed *_pb2.py modules match the .proto files (regenerated with grpc_tools)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

PROTO_DIR = Path(__file__).resolve().parents[2] / "metricsgw" / "remote" / "proto"


@pytest.mark.parametrize("name", ["remote_v1", "remote_v2"])
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

"""Remote-write requests with native histograms and exemplars, for tests (1.0 and 2.0 alike).

A histogram is given as a dict of ``prometheus.Histogram`` fields (the 2.0 message has the same
field numbers), e.g. {"count_int": 5, "sum": 12.5, "schema": 0, "zero_threshold": 1e-128,
"zero_count_int": 1, "positive_spans": [(0, 2)], "positive_deltas": [2, 0], "timestamp": 1000}.
"""

from __future__ import annotations

import snappy

from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.proto import remote_v2_pb2 as v2pb

V1_HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
              "X-Prometheus-Remote-Write-Version": "0.1.0"}
V2_HEADERS = {"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request",
              "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "2.0.0"}


def _fill(msg, fields: dict) -> None:
    for name, value in fields.items():
        if name in ("positive_spans", "negative_spans"):
            for offset, length in value:
                getattr(msg, name).add(offset=offset, length=length)
        elif isinstance(value, (list, tuple)):
            getattr(msg, name).extend(value)
        else:
            setattr(msg, name, value)


def histogram_bytes(fields: dict) -> bytes:
    h = v1pb.Histogram()
    _fill(h, fields)
    return h.SerializeToString()


def _add_series(req, s: dict, set_labels) -> None:
    """One series of either protocol; ``set_labels(message, pairs)`` writes labels the protocol's way."""
    ts = req.timeseries.add()
    set_labels(ts, s["labels"])
    for t, v in s.get("samples", ()):
        ts.samples.add(timestamp=t, value=v)
    for fields in s.get("histograms", ()):
        _fill(ts.histograms.add(), fields)
    for labels, value, t in s.get("exemplars", ()):
        set_labels(ts.exemplars.add(value=value, timestamp=t), labels)


def _finish(req, compress: bool) -> bytes:
    raw = req.SerializeToString()
    return snappy.compress(raw) if compress else raw


def v1_request(series: list[dict], compress: bool = True) -> bytes:
    """series: [{"labels": [(n, v)...], "samples": [(t, v)], "histograms": [fields...],
    "exemplars": [(labels, value, t)]}]"""
    def set_labels(msg, pairs) -> None:
        for n, v in pairs:
            msg.labels.add(name=n, value=v)

    req = v1pb.WriteRequest()
    for s in series:
        _add_series(req, s, set_labels)
    return _finish(req, compress)


def v2_request(series: list[dict], compress: bool = True) -> bytes:
    symbols: dict[str, int] = {"": 0}

    def set_labels(msg, pairs) -> None:
        msg.labels_refs.extend(symbols.setdefault(x, len(symbols)) for pair in pairs for x in pair)

    req = v2pb.Request()
    for s in series:
        _add_series(req, s, set_labels)
    req.symbols.extend(symbols)
    return _finish(req, compress)


def int_histogram(t: int, scale: int = 1) -> dict:
    """An integer exponential histogram (schema 0) with zero, positive and negative buckets."""
    return {"count_int": 12 * scale, "sum": 18.4 * scale, "schema": 0, "zero_threshold": 0.001,
            "zero_count_int": 2 * scale, "positive_spans": [(0, 2), (1, 2)],
            "positive_deltas": [1 * scale, 1 * scale, -1 * scale, 2 * scale],  # counts 1, 2, 1, 3
            "negative_spans": [(1, 2)], "negative_deltas": [2 * scale, -1 * scale],  # counts 2, 1
            "reset_hint": 0, "timestamp": t}


def float_histogram(t: int, scale: float = 1.0) -> dict:
    """A float exponential histogram (schema 1)."""
    return {"count_float": 10.5 * scale, "sum": 33.25 * scale, "schema": 1, "zero_threshold": 1e-128,
            "zero_count_float": 0.5 * scale, "positive_spans": [(-1, 3)],
            "positive_counts": [1.5 * scale, 4.0 * scale, 2.5 * scale],
            "negative_spans": [(0, 1)], "negative_counts": [2.0 * scale], "timestamp": t}

"""A request of known series is decoded without walking its labels (codec.decode_v1's ``known``, answered by
IngestPipeline.known_sids): it must store exactly what the full walk stores, and leave every other request
(a new series, a split guessed wrong, rules reloaded) to the full walk. Every test runs twice: with the
compiled scan (scrape_scan.py) and with the numpy guess that serves until it is loaded."""

from __future__ import annotations

import asyncio
import math
import struct

import numpy as np
import pytest

from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.model import STALE_NAN_BITS
from metricsgw.remote import codec, fastscan, scrape_scan
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.series_keys import cache_keys, halves
from metricsgw.telemetry import Telemetry
from tests.ingest.test_ingest_pipeline import DropGpu1, Holder, Identity

STALE = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
T0 = 1_760_000_000_000  # a timestamp of this era: a 6-byte varint, so a 16-byte Sample with a value


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def scan_path(request, monkeypatch):
    if request.param == "compiled":
        assert scrape_scan.load()
    else:  # as before the kernel is loaded
        monkeypatch.setattr(scrape_scan, "_kernel", None)  # the codec never starts its load (api/remote_write.py does)
    return request.param


def series(n, t=T0, values=None):
    values = values if values is not None else [1.5 + i for i in range(n)]
    return [([("__name__", "gpu_util"), ("gpu", str(i)), ("host", f"h{i % 3}")], [(t, values[i])]) for i in range(n)]


def raw(s):
    return codec.encode_v1(s, compress=False)


def known_pipeline(storage, s, **kw):
    """A pipeline that has stored and confirmed the series of ``s``: they are known from now on."""
    pipe = IngestPipeline(storage, Telemetry(), **kw)
    for _ in range(2):  # the second pass confirms what the first stored
        batch, _ = pipe.process(codec.decode_v1(raw(s), pipe.known_sids))
        asyncio.run(storage.append(batch))
        pipe.confirm(batch)
    return pipe


def stored(batch):
    return batch.sid.tolist(), batch.t.tolist(), batch.v.view(np.uint64).tolist()


def test_known_series_skip_the_walk_and_store_what_the_walk_stores(storage):
    pipe = known_pipeline(storage, series(50))
    body = raw(series(50, t=T0 + 15_000, values=[0.25 * i for i in range(50)]))  # value 0.0 omitted: a 7-byte Sample
    fast = codec.decode_v1(body, pipe.known_sids)
    assert fast.sids is not None
    slow = codec.decode_v1(body)
    assert slow.sids is None and list(fast.keys) == slow.keys
    got, rej = pipe.process(fast)
    want, _ = pipe.process(slow)
    assert rej == [] and got.new_series == [] and stored(got) == stored(want)
    assert got.sid.tolist() == pipe.known_sids(*halves(cache_keys(slow.keys)))[0].tolist() and fast.dropped is None


def test_a_new_series_sends_the_request_to_the_walk(storage):
    pipe = known_pipeline(storage, series(20))
    s = series(21, t=T0 + 15_000)  # series 20 is new
    decoded = codec.decode_v1(raw(s), pipe.known_sids)
    assert decoded.sids is None and decoded.label_counts is not None  # the walk's result
    batch, rej = pipe.process(decoded)
    assert rej == [] and [dict(labels)["gpu"] for _, labels in batch.new_series] == ["20"]
    assert batch.t.tolist() == [T0 + 15_000] * 21 and batch.v.tolist() == [1.5 + i for i in range(21)]
    assert batch.sid.tolist()[:20] == pipe.known_sids(*halves(cache_keys(decoded.keys[:20])))[0].tolist()


def test_a_label_that_looks_like_a_sample_field_does_not_mislead_the_split(storage, scan_path):
    # The last label's value ends in 0x12 0x10 0x09 + 6 bytes: read from the end of a series whose Sample has
    # no value (7 bytes: 0x10 + a 6-byte timestamp), the 16-byte sample size tried first fits as well, and
    # cuts the labels short. That key was never seen, so the numpy guess must send the request to the walk;
    # the compiled scan walks the labels from the front, is not misled, and finds every series known.
    tricky = [([("__name__", "x"), ("a", "tail\x12\x10\x09abcdef")], [(T0, 0.0)])]
    s = tricky + series(3)
    pipe = known_pipeline(storage, s)
    body = raw([(labels, [(T0 + 15_000, v)]) for labels, [(_, v)] in s])
    flat = fastscan.flatten(list(v1pb.BlobWriteRequest.FromString(body).timeseries))
    guessed = fastscan.guess_label_ends(flat) - flat.starts
    walked = codec.decode_v1(body)
    assert guessed.tolist() == [len(walked.keys[0]) - 9] + [len(k) for k in walked.keys[1:]]  # wrong for series 0 only
    decoded = codec.decode_v1(body, pipe.known_sids)
    assert (decoded.sids is None) == (scan_path == "numpy") and list(decoded.keys) == walked.keys
    batch, rej = pipe.process(decoded)
    assert rej == [] and batch.new_series == []
    assert stored(batch) == stored(pipe.process(walked)[0])
    assert batch.t.tolist() == [T0 + 15_000] * 4 and batch.v.tolist() == [0.0, 1.5, 2.5, 3.5]


def test_series_the_rules_drop_are_known_too(storage):
    # With the shipped relabel rules most requests carry some dropped series: they must not send it to the walk.
    pipe = known_pipeline(storage, series(6), rules_holder=Holder(DropGpu1()))
    body = raw(series(6, t=T0 + 15_000))
    fast = codec.decode_v1(body, pipe.known_sids)
    assert fast.sids is not None and fast.dropped.tolist() == [False, True, False, False, False, False]
    got, got_rej = pipe.process(fast)
    want, want_rej = pipe.process(codec.decode_v1(body))
    assert stored(got) == stored(want) and got.v.tolist() == [1.5, 3.5, 4.5, 5.5, 6.5]
    assert got_rej == want_rej and [(r.reason, r.samples) for r in got_rej] == [("relabel_drop", 1)]
    # The time window may take the dropped series' sample away: then nothing is dropped, nothing reported.
    batch, rej = pipe.process(fast.subset(np.array([True, False, True, True, True, True])))
    assert rej == [] and batch.v.tolist() == [1.5, 3.5, 4.5, 5.5, 6.5]


def test_a_rules_reload_between_decode_and_process_is_honoured(storage):
    holder = Holder(Identity())
    pipe = known_pipeline(storage, series(3), rules_holder=holder)
    decoded = codec.decode_v1(raw(series(3, t=T0 + 15_000)), pipe.known_sids)
    assert decoded.sids is not None  # looked up under the old rules
    holder.current, holder.generation = DropGpu1(), 1  # a reload: gpu="1" dropped, host renamed to node
    batch, rej = pipe.process(decoded)
    assert [r.reason for r in rej] == ["relabel_drop"]
    assert sorted(dict(labels)["node"] for _, labels in batch.new_series) == ["h0", "h2"]
    assert batch.sid.tolist() == [sid for sid, _ in batch.new_series]


def test_a_rules_reload_before_decode_empties_the_cache_first(storage):
    holder = Holder(Identity())
    pipe = known_pipeline(storage, series(3), rules_holder=holder)
    holder.current, holder.generation = DropGpu1(), 1
    assert codec.decode_v1(raw(series(3, t=T0 + 15_000)), pipe.known_sids).sids is None


SPECIAL = [STALE, 0.0, -0.0, -1.0, math.inf, -math.inf, 5e-324, 1.5]
TIMES = [T0, 0, -1, -(2**62), 1, 2**63 - 1, T0, T0]


def test_stale_nan_zero_and_negative_values_and_timestamps_round_trip_bit_exact(storage):
    # Zero values and timestamps are omitted from the Sample, negative timestamps are 10-byte varints: every
    # Sample size the split can meet, each bit pattern as sent.
    n = len(SPECIAL)
    pipe = known_pipeline(storage, series(n))
    s = [(labels, [(t, v)]) for (labels, _), t, v in zip(series(n), TIMES, SPECIAL)]
    decoded = codec.decode_v1(raw(s), pipe.known_sids)
    assert decoded.sids is not None
    batch, rej = pipe.process(decoded)
    assert rej == [] and batch.t.tolist() == TIMES
    assert batch.v.view(np.uint64).tolist() == np.array(SPECIAL, np.float64).view(np.uint64).tolist()
    assert batch.v.view(np.uint64).tolist()[0] == STALE_NAN_BITS


def test_requests_of_other_shapes_are_left_to_the_walk(storage):
    pipe = known_pipeline(storage, series(2))
    two_samples = [(labels, [(T0, 1.0), (T0 + 1, 2.0)]) for labels, _ in series(2)]
    assert codec.decode_v1(raw(two_samples), pipe.known_sids).sids is None
    assert len(empty := codec.decode_v1(raw([]), pipe.known_sids)) == 0 and empty.sids is None
    req = v1pb.WriteRequest()  # the known series with an exemplar after its sample
    for labels, [(t, v)] in series(2):
        ts = req.timeseries.add(labels=[v1pb.Label(name=k, value=x) for k, x in labels])
        ts.samples.add(timestamp=t, value=v)
    req.timeseries[1].exemplars.add(value=1.0, timestamp=T0)
    with_exemplar = codec.decode_v1(req.SerializeToString(), pipe.known_sids)
    assert with_exemplar.sids is None and with_exemplar.exemplars == 1
    # A known key and a sample field of the usual size, its fields in the other order (valid protobuf): the
    # header is where the guess looks, the Sample behind it is not one the shortcut reads.
    key = codec.decode_v1(raw(series(1))).keys[0]
    sample = b"\x10" + codec.uvarint(T0) + b"\x09" + struct.pack("<d", 2.5)
    ts = key + b"\x12" + bytes([len(sample)]) + sample
    reversed_fields = codec.decode_v1(b"\x0a" + codec.uvarint(len(ts)) + ts, pipe.known_sids)
    assert len(sample) == 16 and reversed_fields.sids is None
    assert reversed_fields.t.tolist() == [T0] and reversed_fields.v.tolist() == [2.5] and reversed_fields.keys == [key]
    v2 = codec.decode_request(codec.encode_v2(series(2)), "application/x-protobuf;proto=io.prometheus.write.v2.Request",
                              "snappy", 1 << 20, known=pipe.known_sids)
    assert v2.version == 2 and v2.sids is None


def test_time_window_subset_keeps_the_ids_with_their_series(storage):
    pipe = known_pipeline(storage, series(4))
    decoded = codec.decode_v1(raw(series(4, t=T0 + 15_000)), pipe.known_sids)
    kept = decoded.subset(np.array([True, False, True, False]))
    assert kept.sids.tolist() == decoded.sids[[0, 2]].tolist()
    batch, _ = pipe.process(kept)
    assert batch.sid.tolist() == kept.sids.tolist() and batch.v.tolist() == [1.5, 3.5]

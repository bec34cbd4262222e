"""IngestPipeline against the real Storage: caching, validation, relabel and limit hooks."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.remote.series_keys import cache_keys
from metricsgw.model import STALE_NAN_BITS, Rejection, series_id
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.telemetry import Telemetry
from tests.ingest.counters import discarded

STALE = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]


@pytest.fixture
def telemetry():
    return Telemetry()


def request(series, version=1):
    enc = codec.encode_v1 if version == 1 else codec.encode_v2
    return (codec.decode_v1 if version == 1 else codec.decode_v2)(enc(series, compress=False))


def gpu_series(n, t=1000, value=1.0):
    # value + 0 would turn a stale NaN into an ordinary NaN, so series 0 gets `value` untouched
    return [([("__name__", "gpu_util"), ("gpu", str(i)), ("host", f"h{i % 3}")], [(t, value if i == 0 else value + i)])
            for i in range(n)]


def store(storage, batch):
    asyncio.run(storage.append(batch))


def canon(pairs):
    return tuple(sorted(pairs))


@pytest.mark.parametrize("version", [1, 2])
def test_new_series_then_cache_hit_gives_same_ids(storage, telemetry, version):
    pipe = IngestPipeline(storage, telemetry)
    batch, rej = pipe.process(request(gpu_series(50), version))
    assert rej == []
    want = [series_id(canon(labels)) for labels, _ in gpu_series(50)]
    assert [sid for sid, _ in batch.new_series] == want
    assert batch.sid.tolist() == want and batch.t.tolist() == [1000] * 50
    store(storage, batch)

    # First repeat: storage now has them, so the pipeline confirms and caches the ids.
    batch2, _ = pipe.process(request(gpu_series(50, t=2000), version))
    assert batch2.new_series == [] and batch2.sid.tolist() == want
    # Second repeat takes the all-known path: every key a confirmed id, no label work.
    assert pipe._cache.entries(cache_keys(request(gpu_series(50), version).keys)) == want
    d3 = request(gpu_series(50, t=3000, value=STALE), version)
    d3._pairs = None  # any label decoding now would fail loudly
    batch3, rej3 = pipe.process(d3)
    assert rej3 == [] and batch3.sid.tolist() == want and batch3.t.tolist() == [3000] * 50
    assert batch3.v.view(np.uint64).tolist()[0] == STALE_NAN_BITS


class CountingLimits:
    """Admits everything and counts the series it was asked about."""

    def __init__(self):
        self.checked = 0

    def check(self, labels, is_new, storage):
        self.checked += 1
        return None


@pytest.mark.parametrize("version", [1, 2])
def test_confirmed_series_take_the_known_path_on_their_next_write(storage, telemetry, version):
    # After the append returned, confirm() makes the new series plain ids: their very next write does no
    # limit check and no label work (without it, the second write of every series took the slow path).
    limits = CountingLimits()
    pipe = IngestPipeline(storage, telemetry, limits=limits)
    batch, _ = pipe.process(request(gpu_series(50), version))
    store(storage, batch)
    pipe.confirm(batch)
    checked = limits.checked
    d2 = request(gpu_series(50, t=2000), version)
    d2._pairs = None  # any label decoding now would fail loudly
    batch2, rej2 = pipe.process(d2)
    assert rej2 == [] and batch2.new_series == [] and batch2.sid.tolist() == batch.sid.tolist()
    assert limits.checked == checked


def test_a_batch_not_stored_is_not_confirmed(storage, telemetry):
    # confirm() of a batch storage does not hold (its append failed) changes nothing: the retry carries the
    # new series again.
    pipe = IngestPipeline(storage, telemetry)
    b1, _ = pipe.process(request(gpu_series(3)))
    pipe.confirm(b1)
    b2, _ = pipe.process(request(gpu_series(3)))
    assert len(b2.new_series) == 3


def test_unstored_new_series_are_offered_again(storage, telemetry):
    # If the append of a batch with new series fails (503), the retry must carry them again.
    pipe = IngestPipeline(storage, telemetry)
    b1, _ = pipe.process(request(gpu_series(3)))
    b2, _ = pipe.process(request(gpu_series(3)))
    assert len(b1.new_series) == len(b2.new_series) == 3


def test_series_repeated_within_a_request_is_new_once(storage, telemetry):
    s = gpu_series(1)
    batch, _ = IngestPipeline(storage, telemetry).process(request(s + s))
    assert len(batch.new_series) == 1 and len(batch) == 2


def test_unsorted_labels_get_the_canonical_id(storage, telemetry):
    labels = [("host", "a"), ("__name__", "x"), ("gpu", "0")]
    batch, _ = IngestPipeline(storage, telemetry).process(request([(labels, [(1, 1.0)])]))
    assert batch.new_series == [(series_id(canon(labels)), canon(labels))]


def test_invalid_series_are_rejected_and_the_rest_kept(storage, telemetry):
    good = gpu_series(2)
    bad = [([("__name__", "x"), ("a-b", "1")], [(1, 1.0), (2, 2.0)]),
           ([("__name__", "x"), ("a", "1"), ("a", "2")], [(1, 1.0)]),
           ([("job", "nometric")], [(1, 1.0)])]
    pipe = IngestPipeline(storage, telemetry)
    for attempt in range(2):  # the second time, rejections come from the cache
        batch, rej = pipe.process(request(bad[:1] + good[:1] + bad[1:] + good[1:]))
        assert [r.reason for r in rej] == ["invalid_labels", "duplicate_label_names", "missing_metric_name"]
        assert [r.samples for r in rej] == [2, 1, 1]
        assert "a-b" in rej[0].message and '{__name__="x", a-b="1"}' in rej[0].message
        assert batch.t.tolist() == [1000, 1000] and batch.v.tolist() == [1.0, 2.0]
        assert len(batch.sid) == 2
    assert discarded(telemetry, "invalid_labels") == 4


def test_invalid_utf8_is_rejected_per_series(storage, telemetry):
    req = v1pb.RawWriteRequest()
    ts = req.timeseries.add()
    ts.labels.append(v1pb.RawLabel(name=b"__name__", value=b"bad\xff").SerializeToString())
    ts.samples.add(value=1.0, timestamp=1)
    good = v1pb.WriteRequest.FromString(codec.encode_v1(gpu_series(1), compress=False))
    raw = req.SerializeToString() + good.SerializeToString()  # concatenated messages merge
    batch, rej = IngestPipeline(storage, telemetry).process(codec.decode_v1(raw))
    assert [r.reason for r in rej] == ["invalid_utf8"] and len(batch) == 1


def test_v2_bad_refs_are_rejected(storage, telemetry):
    from metricsgw.remote.proto import remote_v2_pb2 as v2pb
    req = v2pb.Request(symbols=["", "__name__", "ok"])
    req.timeseries.add(labels_refs=[1, 2]).samples.add(value=1, timestamp=1)
    req.timeseries.add(labels_refs=[1, 7]).samples.add(value=1, timestamp=1)
    batch, rej = IngestPipeline(storage, telemetry).process(codec.decode_v2(req.SerializeToString()))
    assert len(batch) == 1 and rej[0].reason == "invalid_labels" and "out of range" in rej[0].message


# ---------------------------------------------------------------- relabel and limit hooks


class DropGpu1:
    """A tiny rule set: drop gpu="1", rename host -> node."""

    def apply(self, labels):
        d = dict(labels)
        if d.get("gpu") == "1":
            return None
        if "host" in d:
            d["node"] = d.pop("host")
        return tuple(sorted(d.items()))


class Identity:
    def apply(self, labels):
        return labels


@dataclass
class Holder:
    current: object
    generation: int = 0


def test_relabel_rules_apply_and_cache_resets_on_reload(storage, telemetry):
    holder = Holder(DropGpu1())
    pipe = IngestPipeline(storage, telemetry, rules_holder=holder)
    batch, rej = pipe.process(request(gpu_series(3)))
    assert [r.reason for r in rej] == ["relabel_drop"] and rej[0].samples == 1
    assert rej[0].configured  # the operator asked for it: the write handler answers 2xx
    assert {dict(labels)["node"] for _, labels in batch.new_series} == {"h0", "h2"}
    assert all("host" not in dict(labels) for _, labels in batch.new_series)
    assert discarded(telemetry, "relabel_drop") == 1

    holder.current, holder.generation = Identity(), 1  # a reload
    batch, rej = pipe.process(request(gpu_series(3)))
    assert rej == [] and len(batch.new_series) == 3
    assert all("host" in dict(labels) for _, labels in batch.new_series)


@pytest.mark.parametrize("version", [1, 2])
def test_known_drops_next_to_known_series_answer_like_the_first_time(storage, telemetry, version):
    """Once every series is known (stored ids, or dropped by the rules), a request takes the
    vectorised path; it keeps and drops exactly what the full path did, and counts the same."""
    pipe = IngestPipeline(storage, telemetry, rules_holder=Holder(DropGpu1()))
    series = gpu_series(6) + [([("__name__", "other"), ("gpu", "1")], [(1000, 5.0), (2000, 6.0)])]
    first, rej1 = pipe.process(request(series, version))
    store(storage, first)
    pipe.process(request(series, version))  # confirms the stored series: ints in the cache from now on
    pipe._process_slow = lambda *a: pytest.fail("took the per-series path")  # noqa: SLF001 (the path under test)
    again, rej2 = pipe.process(request([(labels, [(t + 5000, v) for t, v in samples]) for labels, samples in series],
                                       version))
    assert [(r.reason, r.samples) for r in rej1] == [(r.reason, r.samples) for r in rej2] == [("relabel_drop", 3)]
    assert "2 series dropped by relabel rules" in rej2[0].message and rej2[0].configured
    assert sorted(again.sid.tolist()) == sorted(first.sid.tolist()) and len(again) == 5
    assert sorted(again.v.tolist()) == sorted(first.v.tolist()) and set(again.t.tolist()) == {6000}
    assert discarded(telemetry, "relabel_drop") == 9


@dataclass
class MaxNewSeries:
    """A tiny limit: at most `room` new series in total."""

    room: int
    calls: int = 0

    def check(self, labels, is_new, storage):
        self.calls += 1
        if not is_new:
            return None
        if self.room <= 0:
            return Rejection("max_series", f"series {labels}: over the series limit (--ingest.max-series)", 0)
        self.room -= 1
        return None


def test_limit_rejections_are_not_cached_for_good(storage, telemetry):
    limit = MaxNewSeries(room=2)
    pipe = IngestPipeline(storage, telemetry, limits=limit)
    batch, rej = pipe.process(request(gpu_series(3)))
    assert len(batch.new_series) == 2 and [r.reason for r in rej] == ["max_series"]
    assert not rej[0].configured  # a limit: the sender must be told (400)
    assert rej[0].samples == 1 and "--ingest.max-series" in rej[0].message
    store(storage, batch)
    limit.room = 1  # room frees up (e.g. series went inactive)
    batch, rej = pipe.process(request(gpu_series(3)))
    assert rej == [] and len(batch.new_series) == 1 and len(batch) == 3
    assert discarded(telemetry, "max_series") == 1


def test_histograms_and_exemplars_go_to_the_batch_with_their_series_ids(storage, telemetry):
    req = v1pb.WriteRequest.FromString(codec.encode_v1(gpu_series(2), compress=False))
    req.timeseries[1].histograms.add(count_int=1, timestamp=1)
    req.timeseries[1].exemplars.add(value=1.0, timestamp=1)
    raw_hist = req.timeseries[1].histograms[0].SerializeToString()
    batch, rej = IngestPipeline(storage, telemetry).process(codec.decode_v1(req.SerializeToString()))
    assert rej == [] and len(batch) == 2
    sid_of_second = batch.sid[1]
    assert batch.native.hist_sid.tolist() == [sid_of_second] and batch.native.hist_blob == [raw_hist]
    assert batch.native.ex_sid.tolist() == [sid_of_second] and batch.native.ex_t.tolist() == [1]


def test_invalid_histogram_is_refused_and_counted(storage, telemetry):
    req = v1pb.WriteRequest.FromString(codec.encode_v1(gpu_series(1), compress=False))
    h = req.timeseries[0].histograms.add(count_int=1, timestamp=1)
    h.positive_spans.add(offset=0, length=2)
    h.positive_deltas.append(1)  # two buckets announced, one given
    batch, rej = IngestPipeline(storage, telemetry).process(codec.decode_v1(req.SerializeToString()))
    assert [r.reason for r in rej] == ["invalid_histogram"] and "spans need 2 buckets, have 1" in rej[0].message
    assert len(batch) == 1 and batch.native.histograms == 0
    r = telemetry.registry.get_sample_value
    assert r("metricsgw_discarded_histograms_total", {"reason": "invalid_histogram"}) == 1


def test_cache_is_bounded(storage, telemetry):
    pipe = IngestPipeline(storage, telemetry, max_cache_entries=10)
    pipe.process(request(gpu_series(20)))
    assert pipe.cache_size == 20
    pipe.process(request(gpu_series(3)))  # over the bound: cleared first, then refilled
    assert pipe.cache_size == 3


def test_cache_holds_every_series_storage_holds_past_the_bound(storage, telemetry, monkeypatch):
    """The bound is on entries beyond the series stored: with more active series than
    max_cache_entries (2.7M at the seed's 7,500 nodes, one shard, against a 2M default), clearing
    the whole cache each time it passed the bound made every scrape resolve every series again."""
    pipe = IngestPipeline(storage, telemetry, max_cache_entries=10)
    store(storage, pipe.process(request(gpu_series(30)))[0])
    store(storage, pipe.process(request(gpu_series(30, t=2000)))[0])
    monkeypatch.setattr(pipe, "_process_slow", lambda *a: pytest.fail("known series took the slow path"))
    batch, rej = pipe.process(request(gpu_series(30, t=3000)))
    assert rej == [] and len(batch) == 30 and batch.new_series == [] and pipe.cache_size == 30
    monkeypatch.undo()
    # entries for series storage does not hold still count against the bound
    pipe.process(request([([("__name__", "other"), ("i", str(i))], [(1000, 1.0)]) for i in range(11)]))
    assert pipe.cache_size == 41
    pipe.process(request(gpu_series(1, t=4000)))
    assert pipe.cache_size == 1  # 41 > 30 held + 10: cleared first, then refilled


def test_empty_request(storage, telemetry):
    batch, rej = IngestPipeline(storage, telemetry).process(request([]))
    assert len(batch) == 0 and batch.new_series == [] and rej == []


def test_corrupt_label_bytes_fail_only_that_series(storage, telemetry):
    sample = v1pb.Sample(value=1.0, timestamp=1).SerializeToString()
    garbage = b"\x0a\x7f\x01"  # a label whose name claims 127 bytes but has 1
    ts = b"\x0a" + bytes([len(garbage)]) + garbage + b"\x12" + bytes([len(sample)]) + sample
    raw = b"\x0a" + bytes([len(ts)]) + ts + codec.encode_v1(gpu_series(1), compress=False)
    batch, rej = IngestPipeline(storage, telemetry).process(codec.decode_v1(raw))
    assert len(batch) == 1 and [r.reason for r in rej] == ["invalid_labels"]
    assert "series #0: cannot decode labels" in rej[0].message

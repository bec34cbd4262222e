"""The bulk new-series path gives exactly what the per-series path gives.

validate_many vs validate_labels, series_keys_and_ids vs series_key/series_id, labels_from_key
as the inverse, the A2 WAL record (and A1 still read), Catalog.add_many vs add, and
IngestLimits.check_many vs check.
"""

from __future__ import annotations

import json
import random
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from metricsgw.ingest.bulk import validate_many
from metricsgw.limits.ingest import IngestLimits
from metricsgw.model import (Matcher, MetricMetadata, labels_from_key, series_id, series_key, series_keys,
                             series_keys_and_ids)
from metricsgw.ingest.validate import LabelProblem, validate_labels
from metricsgw.storage.wal import records
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.catalog.catalog import Catalog

NAMES = ["__name__", "a", "b", "gpu", "Zeta", "_x", "1bad", "", "host"]
VALUES = ["up", "gpu_util", "x", "", "é", "9bad", "ns:metric", "\u2603"]


def random_series(rng: random.Random) -> list[tuple[str, str]]:
    pairs = [(rng.choice(NAMES), rng.choice(VALUES)) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.7:  # mostly the shape senders produce: sorted, unique, with a name
        pairs = sorted({n: v for n, v in pairs if n} .items())
        pairs = [p for p in pairs if p[0] != "__name__"] + [("__name__", rng.choice(["up", "gpu_util", "9bad"]))]
        pairs.sort()
    return pairs


def reference(pairs):
    try:
        return validate_labels([(n.encode(), v.encode()) for n, v in pairs])
    except LabelProblem:
        return "rejected"


def test_validate_many_accepts_only_what_validate_labels_accepts_unchanged():
    rng = random.Random(7)
    series = [random_series(rng) for _ in range(3000)]
    names = [n for s in series for n, _ in s]
    values = [v for s in series for _, v in s]
    got = validate_many(names, values, np.array([len(s) for s in series], np.int64), pair_pool={})
    accepted = 0
    for pairs, fast in zip(series, got):
        want = reference(pairs)
        if fast is not None:
            accepted += 1
            assert fast == want, pairs
        # a series refused by the fast path is still handled by validate_labels (either way)
    assert accepted > 500  # the fast path is the common path, not a formality
    assert sum(1 for pairs, fast in zip(series, got) if fast is None and reference(pairs) != "rejected") > 0


@pytest.mark.parametrize("pairs", [
    [("__name__", "up"), ("a", "1"), ("a", "2")],  # duplicate name
    [("a", "1"), ("__name__", "up")],  # unsorted ("_" sorts after "a"? no: it sorts before)
    [("__name__", "up"), ("b-c", "1")],  # invalid label name
    [("a", "1")],  # no metric name
    [("__name__", "9up")],  # invalid metric name
    [("__name__", "up"), ("a", "")],  # empty value: validate_labels drops it
    [],
])
def test_validate_many_leaves_odd_series_to_the_exact_path(pairs):
    ok = [("__name__", "up"), ("job", "x")]
    series = [ok, pairs, ok]
    out = validate_many([n for s in series for n, _ in s], [v for s in series for _, v in s],
                        np.array([len(s) for s in series], np.int64))
    assert out[0] == tuple(ok) and out[2] == tuple(ok) and out[1] is None


def test_series_keys_and_ids_match_the_reference_and_invert():
    label_sets = [(("__name__", "up"), ("job", "node")), (("__name__", "é"), ("x", "\u2603")),
                  (("__name__", "a"),), ()]
    keys, ids = series_keys_and_ids(label_sets)
    assert keys == [series_key(lb) for lb in label_sets]
    assert ids.tolist() == [series_id(lb) for lb in label_sets]
    assert [labels_from_key(k) for k in keys] == label_sets


def test_wal_record_roundtrip_and_old_format_still_read():
    new = [(series_id(lb), lb) for lb in [(("__name__", "up"), ("job", "é")), (("__name__", "x"),)]]
    batch = AppendBatch(new_series=new, sid=np.array([new[0][0], new[1][0]]), t=np.array([1, 2]),
                        v=np.array([0.5, float("nan")]), metadata=[MetricMetadata("up", "gauge", "h", "")])
    got = records.decode(records.encode(batch))
    assert got.new_series == new and got.metadata == batch.metadata
    assert got.sid.tolist() == batch.sid.tolist() and got.v.tobytes() == batch.v.tobytes()
    # A1, as the previous release wrote it: new series as JSON
    series = json.dumps(new, separators=(",", ":")).encode()
    u32 = struct.Struct("<I").pack
    old = b"".join([b"A1", u32(len(series)), series, u32(0), u32(1), np.int64(7).tobytes(),
                    np.int64(9).tobytes(), np.float64(1.5).tobytes()])
    got = records.decode(old)
    assert got.new_series == new and got.sid.tolist() == [7] and got.v.tolist() == [1.5]


def _mixed_series(rng: random.Random) -> list:
    series = []
    for i in range(400):
        metric = rng.choice(["up", "gpu_util", "Zmetric"])
        pairs = {"__name__": metric, "host": f"h{i % 7}"}
        if rng.random() < 0.5:  # label names differ within a metric
            pairs["gpu"] = str(i % 4)
        if rng.random() < 0.2:
            pairs["A"] = "upper"  # sorts before __name__
        if rng.random() < 0.05:  # a label value that is not ASCII
            pairs["note"] = rng.choice(["é\u2603", "x y"])
        lb = tuple(sorted(pairs.items()))
        series.append((series_id(lb), lb))
    return series + series[:5]  # repeats are registered once


def test_catalog_add_many_equals_add_one_by_one():
    series = _mixed_series(random.Random(3))
    one, many = Catalog(), Catalog()
    added = [s for s in series if one.add(*s)]
    assert many.add_many(series[:150]) + many.add_many(series[150:]) == added
    assert len(one) == len(many) == len(added) > 100
    for sid, lb in added:
        assert many.labels(sid) == one.labels(sid) == lb
    for matchers in ([Matcher("__name__", "=", "up")], [Matcher("gpu", "=~", "1|2")], [Matcher("A", "=", "")]):
        pick = lambda c: sorted(int(c.sids.a[g]) for t, rows in c.select(matchers) for g in t.gidx.view[rows])
        assert pick(many) == pick(one)
    sids = np.array([s for s, _ in added], np.int64)
    assert many.dense(sids).tolist() == one.dense(sids).tolist()


def test_catalog_add_keys_equals_add_many():
    """The start-up path (series keys split with numpy/Arrow) builds the same catalog."""
    series = _mixed_series(random.Random(5))
    many, bulk = Catalog(), Catalog()
    added = many.add_many(series[:100]) + many.add_many(series[100:])
    sids = np.array([s for s, _ in series], np.int64)
    keys = series_keys([lb for _, lb in series])
    fresh = np.concatenate([bulk.add_keys(sids[:100], keys[:100]), 100 + bulk.add_keys(sids[100:], keys[100:])])
    assert [series[i] for i in fresh.tolist()] == added
    assert bulk.sids.view.tolist() == many.sids.view.tolist()
    for sid, lb in added:
        assert bulk.labels(sid) == many.labels(sid) == tuple(lb)
    for matchers in ([Matcher("__name__", "=", "up")], [Matcher("gpu", "=~", "1|2")], [Matcher("A", "=", "")],
                     [Matcher("note", "!=", "")], [Matcher("__name__", "=", "")]):
        pick = lambda c: sorted(int(c.sids.a[g]) for t, rows in c.select(matchers) for g in t.gidx.view[rows])
        assert pick(bulk) == pick(many)


class Counts:
    def __init__(self):
        self.known = set()

    def has_series(self, sid):
        return sid in self.known

    def active_series(self):
        return len(self.known)

    def active_series_for_metric(self, name):
        return 0


def test_limits_check_many_equals_check_in_order():
    cfg = SimpleNamespace(ingest_max_series=4, ingest_max_series_per_metric=0, ingest_max_label_names_per_series=3,
                          ingest_max_label_name_length=8, ingest_max_label_value_length=12)
    label_sets = [(("__name__", "up"), ("job", f"j{i}")) for i in range(8)]
    label_sets[2] = (("__name__", "up"), ("job", "x" * 13))  # value too long
    label_sets[4] = (("__name__", "up"), ("averyverylongname", "x"))  # name too long
    label_sets[6] = (("__name__", "up"), ("a", "1"), ("b", "2"), ("c", "3"))  # too many labels
    sids = [series_id(lb) for lb in label_sets]
    one, many = IngestLimits(cfg), IngestLimits(cfg)
    want = [one.check(lb, True, Counts(), sid=s, samples=1) for lb, s in zip(label_sets, sids)]
    got = many.check_many(label_sets, [True] * 8, Counts(), sids, [1] * 8)
    assert [(r.reason, r.message) if r else None for r in got] == [(r.reason, r.message) if r else None for r in want]
    assert [r.reason if r else None for r in got] == [None, None, "label_value_too_long", None,
                                                      "label_name_too_long", None, "max_label_names_per_series",
                                                      "max_series"]


def test_pipeline_bulk_and_single_series_paths_agree(tmp_path):
    import asyncio

    from metricsgw.ingest.pipeline import IngestPipeline
    from metricsgw.remote import codec
    from metricsgw.storage.store import Storage
    from metricsgw.telemetry import Telemetry

    series = [([("__name__", "up"), ("job", f"j{i}")], [(1000, float(i))]) for i in range(6)]
    series[1] = ([("job", "x"), ("__name__", "up")], [(1000, 1.0)])  # unsorted: canonicalised
    series[3] = ([("__name__", "up"), ("bad-name", "x")], [(1000, 3.0)])  # rejected
    series[4] = ([("__name__", "up"), ("job", "j0")], [(2000, 4.0)])  # same series as #0
    raw = codec.encode_v1(series, compress=False)
    results = []
    for bulk in (True, False):
        st = Storage(str(tmp_path / f"d{bulk}"))
        st.open()
        pipe = IngestPipeline(st, Telemetry())
        decoded = codec.decode_v1(raw)
        if not bulk:
            decoded.label_counts = None  # forces the per-series path
        batch, rej = pipe.process(decoded)
        asyncio.run(st.append(batch))
        results.append((batch.new_series, batch.sid.tolist(), batch.t.tolist(),
                        [(r.reason, r.message, r.samples) for r in rej]))
        st.close(flush=False)
    assert results[0] == results[1]
    new_series, sids, t, rej = results[0]
    assert [lb for _, lb in new_series] == [(("__name__", "up"), ("job", j)) for j in ("j0", "x", "j2", "j5")]
    assert t == [1000, 1000, 1000, 2000, 1000] and sids[0] == sids[3] == series_id(new_series[0][1])
    assert [r[0] for r in rej] == ["invalid_labels"] and "bad-name" in rej[0][1]


def _decoded(series_labels):
    from metricsgw.remote import codec

    raw = codec.encode_v1([(pairs, [(1000, 1.0)]) for pairs in series_labels], compress=False)
    return codec.decode_v1(raw)


def _ascii_series(rng: random.Random) -> list[tuple[str, str]]:
    names = ["__name__", "a", "b", "gpu", "Zeta", "_x", "1bad", "host", "b-c"]
    values = ["up", "gpu_util", "x", "9bad", "ns:metric", "v" * 40, "w" * 60, "y" * 110]
    pairs = [(rng.choice(names), rng.choice(values)) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.7:
        pairs = sorted({n: v for n, v in pairs}.items())
        pairs = [p for p in pairs if p[0] != "__name__"] + [("__name__", rng.choice(["up", "gpu_util", "9bad"]))]
        pairs.sort()
    return pairs


def test_validate_records_equals_validate_many_and_the_series_keys():
    """The distinct-record path (remote/label_records.py + bulk.validate_records) accepts exactly what
    validate_many accepts, with the same canonical labels, and each accepted series' key is series_key's;
    records of every window width (up to the longest one-byte length) and their boundaries included."""
    from metricsgw.ingest.bulk import validate_records

    rng = random.Random(11)
    series = [_ascii_series(rng) for _ in range(3000)]
    series += [[("__name__", "m"), ("a", "v" * k)] for k in range(1, 122)]  # every record size 8..129
    decoded = _decoded(series)
    idx = list(range(len(series)))
    records = decoded.bulk_label_records(idx)
    assert records is not None and len(records.names) < len(records.uid) / 5  # distinct records, once each
    got, keys = validate_records(records, {})
    names, values, counts = decoded.bulk_label_strings(idx)
    want = validate_many(names, values, counts, pair_pool={})
    assert got == want
    assert sum(g is not None for g in got) > 900  # the common path, not a formality
    for labels, key in zip(got, keys):
        assert (key is None) == (labels is None)
        if labels is not None:
            assert key == series_key(labels)


def test_a_hash_collision_sends_the_request_the_exact_way(monkeypatch):
    from metricsgw.remote import label_records

    decoded = _decoded([[("__name__", "up"), ("job", "a")], [("__name__", "up"), ("job", "b")]])
    assert decoded.bulk_label_records([0, 1]) is not None
    monkeypatch.setattr(label_records, "_MULTIPLIERS", np.zeros_like(label_records._MULTIPLIERS))  # all alike
    assert decoded.bulk_label_records([0, 1]) is None  # grouped by hash, then compared whole: refused


@pytest.mark.parametrize("odd", [("job", "é"), ("job", ""), ("job", "z" * 130)],
                         ids=["not-ascii", "empty-value-field-omitted", "two-byte-length"])
def test_labels_in_another_layout_are_not_taken_as_records(odd):
    decoded = _decoded([[("__name__", "up"), odd], [("__name__", "up"), ("job", "b")]])
    assert decoded.bulk_label_records([0, 1]) is None

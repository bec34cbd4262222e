"""The compact WAL record (A3): bit-exact round trips, its size, and old records in the same replay."""

from __future__ import annotations

import numpy as np

from metricsgw.model import STALE_NAN, MetricMetadata, series_id
from metricsgw.storage.wal import records
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.wal.walcodec import RefTable, SegmentDecoder, SegmentEncoder


def _labels(i: int):
    return (("__name__", f"m{i % 7}"), ("instance", f"node-{i // 7}:9100"), ("job", "node"))


def _scrapes(n_series: int, scrapes: int, per_request: int, seed: int = 1):
    """Batches as a sender makes them: every series new in the first scrape, then the same order."""
    rng = np.random.default_rng(seed)
    labels = [_labels(i) for i in range(n_series)]
    sids = np.array([series_id(lb) for lb in labels], np.int64)
    counters = rng.integers(0, 10**6, n_series).astype(np.float64)
    out = []
    for s in range(scrapes):
        counters += rng.integers(0, 50, n_series)
        values = np.where(np.arange(n_series) % 2 == 0, counters, rng.normal(50, 10, n_series))
        for a in range(0, n_series, per_request):
            sl = slice(a, min(a + per_request, n_series))
            new = [(int(sids[i]), labels[i]) for i in range(sl.start, sl.stop)] if s == 0 else []
            out.append(AppendBatch(new_series=new, sid=sids[sl].copy(), t=np.full(sl.stop - sl.start,
                                   1_700_000_000_000 + 15_000 * s, np.int64), v=values[sl].copy()))
    return out


def _same(a: AppendBatch, b: AppendBatch) -> bool:
    return (a.new_series == b.new_series and a.metadata == b.metadata and a.sid.tolist() == b.sid.tolist()
            and a.t.tolist() == b.t.tolist() and a.v.tobytes() == b.v.tobytes())


def test_segment_round_trip_is_bit_exact():
    batches = _scrapes(500, 4, 128)
    special = batches[5]
    special.v[:6] = [float("nan"), STALE_NAN, float("inf"), -0.0, 5e-324, -1.7976931348623157e308]
    special.metadata = [MetricMetadata("m1", "counter", "help é", "bytes")]
    enc, dec = SegmentEncoder(), SegmentDecoder()
    for b in batches:
        assert _same(dec.decode(enc.encode(b)), b)


def test_a_series_twice_in_one_record_and_records_mixing_old_and_new_series():
    enc, dec = SegmentEncoder(), SegmentDecoder()
    b1 = _scrapes(50, 1, 50)[0]
    sid = np.concatenate([b1.sid[:10], b1.sid[:10]])  # two scrapes of a series in one request
    b2 = AppendBatch(sid=sid, t=np.r_[np.full(10, 5), np.full(10, 6)].astype(np.int64), v=np.arange(20.0))
    extra = [(series_id((("__name__", "late"),)), (("__name__", "late"),))]
    b3 = AppendBatch(new_series=extra, sid=np.r_[b1.sid[5:9], [extra[0][0]]].astype(np.int64),
                     t=np.arange(5, dtype=np.int64), v=np.arange(5.0) * 1.5)
    for b in (b1, b2, b3, b2):
        assert _same(dec.decode(enc.encode(b)), b)


def test_old_records_replay_beside_new_ones():
    b = _scrapes(20, 1, 20)[0]
    b.metadata = [MetricMetadata("m0", "gauge", "", "")]
    dec = SegmentDecoder()
    assert _same(dec.decode(records.encode(b)), b)  # an A2 record, as the previous release wrote it
    assert _same(dec.decode(SegmentEncoder().encode(b)), b)


def test_ref_table_gives_refs_in_order_of_first_use_and_keeps_them():
    table = RefTable()
    sids = np.array([50, -3, 50, 7], np.int64)
    refs, added = table.refs_of(sids)
    assert refs.tolist() == [0, 1, 0, 2] and added.tolist() == [50, -3, 7]
    big = np.arange(1000, 1000 + 200_000, dtype=np.int64)[::-1].copy()  # forces a rebuild of the big index
    refs, added = table.refs_of(big)
    assert refs.tolist() == list(range(3, 3 + 200_000)) and len(added) == 200_000
    refs, added = table.refs_of(np.array([7, 1000, 50, 999_999_999], np.int64))
    assert refs.tolist() == [2, 200_002, 0, 200_003] and added.tolist() == [999_999_999]


def test_compact_record_costs_less_than_prometheus_per_sample():
    """Same shape as the bench workload at small scale: Prometheus's WAL held 12.0 bytes a sample."""
    batches = _scrapes(4000, 8, 2000)
    enc = SegmentEncoder()
    size = sum(len(enc.encode(b)) + 8 for b in batches)  # + the record frame
    samples = sum(len(b) for b in batches)
    old = sum(len(records.encode(b)) + 8 for b in batches)
    assert size / samples < 12.0 and size < old / 3, (size / samples, old / samples)


def test_records_encoded_by_catalog_row_are_the_bytes_encoded_by_sid():
    """Storage passes each sample's catalog row (walcodec.RefTable.refs_of_rows): the records must be byte for byte
    those found by searching the sids, through a series twice in a record, rows-less records (metadata, replay)
    and a catalog renumbered by retention (a new epoch: the same rows now name other series)."""
    batches = _scrapes(300, 3, 128)
    sids = np.unique(np.concatenate([b.sid for b in batches]))
    rows_of = {int(s): r for r, s in enumerate(sids[::-1].tolist())}  # any fixed numbering of the series
    renumbered = {s: (r * 7 + 3) % len(sids) for s, r in rows_of.items()}  # after a retention rebuild
    twice = AppendBatch(sid=np.r_[batches[0].sid[:5], batches[0].sid[:5]].astype(np.int64),
                        t=np.r_[np.full(5, 1), np.full(5, 2)].astype(np.int64), v=np.arange(10.0))
    plan = [(b, 0) for b in batches[:4]] + [(twice, 0), (batches[4], None)] + [(b, 1) for b in batches[5:]]
    by_sid, by_row, dec = SegmentEncoder(), SegmentEncoder(), SegmentDecoder()
    for b, epoch in plan:
        expected = by_sid.encode(b)
        if epoch is not None:
            table = rows_of if epoch == 0 else renumbered
            b.rows, b.rows_epoch = np.array([table[s] for s in b.sid.tolist()], np.int64), epoch
        got = by_row.encode(b)
        assert got == expected
        assert _same(dec.decode(got), b)
    # the rows of the new epoch were learnt: a known write is one gather
    again = batches[6]
    refs, added = by_row._refs.refs_of_rows(again.sid, again.rows, 1)
    assert len(added) == 0 and refs.tolist() == by_sid._refs.refs_of(again.sid)[0].tolist()


def test_records_without_float_samples_between_others_keep_the_segments_state():
    # A write of histograms only has an empty float part, written as one constant record (walcodec._empty_record):
    # the records around it must decode as if it were encoded in full.
    batches = _scrapes(40, 3, 40)
    enc, dec, full = SegmentEncoder(), SegmentDecoder(), SegmentEncoder()
    for b in (batches[0], AppendBatch(), batches[1], AppendBatch(), AppendBatch(), batches[2]):
        record = enc.encode(b)
        assert record == full._encode(b, np.ascontiguousarray(b.sid, np.int64), len(b.sid))
        assert _same(dec.decode(record), b)

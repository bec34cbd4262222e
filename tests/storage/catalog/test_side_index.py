"""The side files' index (catalog/side_index.py): metric names found in series keys as the slow per-key split
finds them, spans merged file by file as when read all at once, keys read back by row group as written."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metricsgw.model import canonical, series_id, series_key
from metricsgw.storage.catalog.side_index import (SideIndex, _metric_of, merge_spans, metric_names, read_keys,
                                                  spans)
from metricsgw.storage.files import parquet_io


def test_metric_names_as_the_per_key_split_finds_them():
    label_sets = [
        [("__name__", "up"), ("job", "a")],
        [("Hostname", "h1"), ("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", "0")],  # a label sorting before it
        [("Hostname", "h1"), ("__name__", "last")],  # the name last in the key
        [("job", "no-name")],
        [("__name__", "été"), ("pod", "ñ\u00fe\u00ff")],  # non-ASCII, with the separators' code points as text
        [("__name__", "x"), ("__name__x", "y")],
        [("a", "__name__"), ("__name__", "y")],
    ]
    keys = [series_key(canonical(dict(lb).items())) for lb in label_sets]
    got = metric_names(pa.array(keys, pa.binary())).to_pylist()
    assert got == [_metric_of(k) for k in keys]
    assert got == ["up", "DCGM_FI_DEV_GPU_UTIL", "last", None, "été", "x", "y"]
    sliced = pa.array([b"junk"] + keys, pa.binary()).slice(1)  # an array that starts inside its buffers
    assert metric_names(sliced).to_pylist() == got


def test_spans_merged_file_by_file_equal_spans_read_at_once():
    rng = np.random.default_rng(7)
    files = []
    for _ in range(6):
        sid = rng.integers(0, 300, 200)
        lo = rng.integers(0, 1000, 200)
        files.append((sid, lo, lo + rng.integers(0, 50, 200)))
    held = spans([])
    for f in files:
        held = merge_spans(held, spans([f]))
    whole = spans(files)
    for a, b in zip(held, whole):
        assert a.tolist() == b.tolist()


def test_index_finds_each_series_its_metric_and_key(tmp_path):
    series = [canonical({"__name__": f"m{i % 3}", "pod": f"p{i}"}.items()) for i in range(1000)]
    paths = []
    for part in (series[:700], series[700:]):
        path = str(tmp_path / f"series-{len(paths)}.parquet")
        sids = np.array([series_id(lb) for lb in part], np.int64)
        table = pa.table({"sid": sids, "key": pa.array([series_key(lb) for lb in part], pa.binary())},
                         schema=parquet_io.SERIES_SCHEMA)
        pq.write_table(table, path, row_group_size=128)  # many row groups: keys read back from a few of them
        paths.append(path)
    index = SideIndex()
    index.update(tuple(paths), ())
    want = {series_id(lb): (series_key(lb), dict(lb)["__name__"]) for lb in series}
    ask = np.sort(np.array(list(want), np.int64))[::7]
    found = 0
    for f, at, pos in index.locate(ask):
        for sid, key, code in zip(ask[at].tolist(), read_keys(f, pos), f.metric[pos].tolist()):
            assert (key, index.names[code]) == want[sid]
            found += 1
    assert found == len(ask)
    assert len(index.codes_of(["m1", "nope"])) == 1
    index.update(tuple(paths[1:]), ())  # a retired file leaves the index
    assert sum(len(f.sids) for f in index.series.values()) == 300


def test_a_merged_file_takes_the_metrics_of_the_files_it_retires_without_reading_keys(tmp_path, monkeypatch):
    from metricsgw.storage.catalog import side_index

    series = [canonical({"__name__": f"m{i % 4}", "pod": f"p{i}"}.items()) for i in range(300)]

    def write(name, part):
        path = str(tmp_path / name)
        pq.write_table(pa.table({"sid": np.array([series_id(lb) for lb in part], np.int64),
                                 "key": pa.array([series_key(lb) for lb in part], pa.binary())},
                                schema=parquet_io.SERIES_SCHEMA), path)
        return path

    a, b = write("a.parquet", series[:200]), write("b.parquet", series[200:])
    index = SideIndex()
    index.update((a, b), ())
    merged = write("merged.parquet", series[::-1])
    calls = []
    real = side_index.metric_names
    monkeypatch.setattr(side_index, "metric_names", lambda keys: calls.append(len(keys)) or real(keys))
    index.update((merged,), ())
    assert calls == []  # no key read: every series of the merge was known
    f = index.series[merged]
    want = {series_id(lb): dict(lb)["__name__"] for lb in series}
    assert [index.names[c] for c in f.metric.tolist()] == [want[s] for s in f.sids.tolist()]
    assert read_keys(f, np.arange(3)) == [series_key(lb) for lb in sorted(series, key=series_id)[:3]]
    newer = write("newer.parquet", series[:10] + [canonical({"__name__": "new", "pod": "x"}.items())])
    index.update((merged, newer), ())
    assert calls == [11]  # a file with a series not known is read


def test_spans_of_files_one_at_a_time_equal_spans_read_at_once(tmp_path):
    from metricsgw.storage.catalog.side_index import spans_of_files

    rng = np.random.default_rng(3)
    paths, cols = [], []
    for i in range(5):
        sid = np.sort(rng.choice(500, 300, replace=False)).astype(np.int64)
        t = rng.integers(0, 10_000, 300).astype(np.int64)
        path = str(tmp_path / f"spans-{i}.parquet")
        parquet_io.write_spans(path, sid, t)
        paths.append(path)
        cols.append(parquet_io.read_spans(path))
    for a, b in zip(spans_of_files(paths), spans(cols)):
        assert a.tolist() == b.tolist()
    held = spans_of_files(paths[:2])
    for a, b in zip(spans_of_files(paths[2:], held), spans(cols)):
        assert a.tolist() == b.tolist()

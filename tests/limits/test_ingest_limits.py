"""Ingest limits: each fires with its reason and message; existing series keep ingesting."""

from __future__ import annotations

import pytest

from metricsgw import config
from metricsgw.limits.ingest import IngestLimits
from metricsgw.model import canonical, metric_name, series_id


class SeriesTable:
    """The three storage calls the limits use, over a plain dict (storage's contract in internals.md)."""

    def __init__(self) -> None:
        self.series: dict[int, tuple] = {}
        self.count_calls = 0

    def add(self, labels) -> None:
        self.series[series_id(labels)] = labels

    def has_series(self, sid: int) -> bool:
        return sid in self.series

    def active_series(self) -> int:
        self.count_calls += 1
        return len(self.series)

    def active_series_for_metric(self, name: str) -> int:
        self.count_calls += 1
        return sum(1 for lab in self.series.values() if metric_name(lab) == name)


def S(name, **kv):
    return canonical({"__name__": name, **kv}.items())


def limits(**overrides):
    return IngestLimits(config.load(overrides), refresh_s=0.0)


def test_defaults_admit_normal_series():
    assert limits().check(S("up", job="a"), True, SeriesTable()) is None


@pytest.mark.parametrize("overrides,labels,reason,flag", [
    ({"ingest.max-label-names-per-series": 3}, S("m", a="1", b="2", c="3"), "max_label_names_per_series",
     "--ingest.max-label-names-per-series=3"),
    ({"ingest.max-label-name-length": 8}, S("m", a_very_long_name="1"), "label_name_too_long",
     "--ingest.max-label-name-length=8"),
    ({"ingest.max-label-value-length": 4}, S("m", a="12345"), "label_value_too_long",
     "--ingest.max-label-value-length=4"),
    ({"ingest.max-label-value-length": 4}, S("m", a="ééé"), "label_value_too_long",  # 6 bytes, 3 chars
     "--ingest.max-label-value-length=4"),
])
def test_label_shape_limits(overrides, labels, reason, flag):
    lim = limits(**overrides)
    for is_new in (True, False):  # label limits apply always
        rej = lim.check(labels, is_new, SeriesTable(), samples=7)
        assert rej is not None and rej.reason == reason and rej.samples == 7
        assert flag in rej.message and 'm{' in rej.message


def test_label_shape_limits_at_the_boundary_admit():
    lim = limits(**{"ingest.max-label-names-per-series": 3, "ingest.max-label-value-length": 4,
                    "ingest.max-label-name-length": 8})
    assert lim.check(S("m", a="1234", bbbb="é"), True, SeriesTable()) is None


def test_max_series_stops_new_series_only():
    table = SeriesTable()
    lim = limits(**{"ingest.max-series": 3})
    for i in range(3):
        lab = S("m", i=str(i))
        assert lim.check(lab, True, table) is None
        table.add(lab)
    rej = lim.check(S("m", i="new"), True, table)
    assert rej.reason == "max_series"
    assert "--ingest.max-series=3" in rej.message and 'm{i="new"}' in rej.message
    assert lim.check(S("m", i="0"), False, table) is None  # existing series keep ingesting


def test_burst_of_new_series_in_one_request_cannot_overshoot():
    """Nothing reaches storage between checks (one request's batch): the limit still holds."""
    table = SeriesTable()
    lim = IngestLimits(config.load({"ingest.max-series": 5, "ingest.max-series-per-metric": 3}), refresh_s=3600)
    admitted = [i for i in range(10) if lim.check(S("a" if i % 2 else "b", i=str(i)), True, table) is None]
    assert len(admitted) == 5
    per_metric = {"a": sum(1 for i in admitted if i % 2), "b": sum(1 for i in admitted if not i % 2)}
    assert max(per_metric.values()) <= 3
    # the same new series seen twice in a burst counts once
    lim2 = IngestLimits(config.load({"ingest.max-series": 1}), refresh_s=3600)
    assert lim2.check(S("x"), True, table) is None
    assert lim2.check(S("x"), True, table) is None
    assert lim2.check(S("y"), True, table).reason == "max_series"


def test_pending_series_settle_once_stored():
    """Series admitted and then stored are not counted twice after a refresh."""
    table = SeriesTable()
    lim = limits(**{"ingest.max-series": 2})
    a, b, c = S("m", i="a"), S("m", i="b"), S("m", i="c")
    assert lim.check(a, True, table) is None
    table.add(a)
    assert lim.check(b, True, table) is None  # 1 stored + 0 pending (a settled) < 2
    table.add(b)
    assert lim.check(c, True, table).reason == "max_series"


def test_max_series_per_metric():
    table = SeriesTable()
    lim = limits(**{"ingest.max-series-per-metric": 2})
    for i in range(2):
        table.add(S("DCGM_FI_DEV_GPU_UTIL", gpu=str(i)))
    rej = lim.check(S("DCGM_FI_DEV_GPU_UTIL", gpu="9"), True, table)
    assert rej.reason == "max_series_per_metric"
    assert "--ingest.max-series-per-metric=2" in rej.message and "'DCGM_FI_DEV_GPU_UTIL'" in rej.message
    assert lim.check(S("DCGM_FI_DEV_FB_USED", gpu="9"), True, table) is None  # another metric has room
    assert lim.check(S("DCGM_FI_DEV_GPU_UTIL", gpu="0"), False, table) is None  # existing keeps ingesting


def test_storage_counts_are_cached_between_refreshes():
    table = SeriesTable()
    lim = IngestLimits(config.load({"ingest.max-series": 1000}), refresh_s=3600)
    for i in range(50):
        assert lim.check(S("m", i=str(i)), True, table) is None
    assert table.count_calls == 1


def test_unlimited_cardinality_never_reads_counts():
    table = SeriesTable()
    lim = limits()
    assert lim.check(S("m"), True, table) is None and table.count_calls == 0


def test_with_the_real_storage(tmp_path):
    """The limits against storage.Storage: admit, append, then only known series get in."""
    import asyncio
    import time

    import numpy as np

    from metricsgw.storage.batch import AppendBatch
    from metricsgw.storage.store import Storage

    st = Storage(str(tmp_path))
    st.open()
    try:
        lim = IngestLimits(config.load({"ingest.max-series": 10, "ingest.max-series-per-metric": 4}), refresh_s=0.0)
        now = int(time.time() * 1000)

        def write(series):
            admitted = []
            for lab in series:
                sid = series_id(lab)
                is_new = not st.has_series(sid)
                if lim.check(lab, is_new, st, sid=sid) is None:
                    admitted.append((sid, lab, is_new))
            batch = AppendBatch(new_series=[(s, lab) for s, lab, new in admitted if new],
                                sid=np.array([s for s, _, _ in admitted], np.int64),
                                t=np.full(len(admitted), now, np.int64), v=np.ones(len(admitted)))
            asyncio.run(st.append(batch))
            return len(admitted)

        assert write([S("gpu_util", gpu=str(g)) for g in range(6)]) == 4  # per-metric cap, in one burst
        assert st.active_series_for_metric("gpu_util") == 4
        assert write([S("temp", gpu=str(g)) for g in range(4)] + [S("power", gpu=str(g)) for g in range(4)]) == 6
        assert st.active_series() == 10
        assert write([S("gpu_util", gpu=str(g)) for g in range(4)] + [S("fresh")]) == 4  # known ones only
    finally:
        st.close(flush=False)

"""A selection that says its series are in label order (``SeriesSet.label_sorted``) is: the engine then skips
sorting them (promql/selectors.py, promql/batching.py), so a wrong claim would return rows out of order."""

from __future__ import annotations

import asyncio

import numpy as np

from metricsgw.model import Matcher, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.store import Storage


def _storage(tmp_path) -> Storage:
    st = Storage(str(tmp_path))
    st.open()
    rng = np.random.default_rng(11)
    # appended in a shuffled order, with an upper-case label sorting before __name__ in some sets
    sets = [canonical([("__name__", m), ("pod", f"p{i % 7}"), ("i", str(i))] + ([("Hostname", f"h{i % 3}")] if i % 2
                                                                                 else []))
            for m in ("a_metric", "b_metric") for i in range(60)]
    sets = [sets[k] for k in rng.permutation(len(sets))]
    sids = np.array([series_id(lb) for lb in sets], np.int64)
    asyncio.run(st.append(AppendBatch(new_series=list(zip(sids.tolist(), sets)), sid=sids,
                                      t=np.full(len(sids), 1_700_000_000_000, np.int64), v=np.ones(len(sids)))))
    return st


def test_one_metric_says_sorted_and_is(tmp_path):
    st = _storage(tmp_path)
    for flushed in (False, True):
        ss = st.select_series([Matcher("__name__", "=", "a_metric")], None, None)
        assert len(ss) == 60
        assert ss.label_sorted
        assert ss.labels == sorted(ss.labels)
        ss = st.select_series([Matcher("pod", "=", "p3"), Matcher("__name__", "=~", "a_metric")], None, None)
        assert ss.label_sorted and ss.labels == sorted(ss.labels) and len(ss) > 1
        st.flush()


def test_several_metrics_claim_nothing(tmp_path):
    st = _storage(tmp_path)
    ss = st.select_series([Matcher("__name__", "=~", ".+_metric")], None, None)
    assert len(ss) == 120
    assert not ss.label_sorted

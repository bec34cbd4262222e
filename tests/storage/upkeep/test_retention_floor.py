"""Retention drops a series only when its samples are older than both the oldest file of the snapshot and the
retention's cutoff: a follower whose snapshot does not hold another writer's samples yet (that writer commits its
series and spans first, its samples last) keeps the series it followed."""

from __future__ import annotations

import numpy as np

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.storage.store import Storage
from tests.storage.test_storage import NOW, batch, read_all, run


def test_a_series_written_since_the_cutoff_is_kept_whatever_the_snapshot_holds(tmp_path):
    a = Storage(str(tmp_path), writer_id="gwa")
    a.open()
    run(a.append(batch([0], [NOW], [1.0])))
    a.flush()
    b = Storage(str(tmp_path), writer_id="gwb")
    b.open()
    assert read_all(b) == [("0", 0, 1.0)]
    # b between another writer's side commits and its samples commit: series and spans known, no sample file
    b.maintenance.data_floor = lambda: int(np.iinfo(np.int64).max)
    b.maintenance.apply_retention()
    assert len(b.select_series([Matcher("i", "=", "0")], None, None, QueryContext()).ids) == 1
    # once the retention's cutoff passed the series' samples, it goes
    b.clock = lambda: NOW / 1000 + b.retention_ms / 1000 + 3600
    b.maintenance.apply_retention()
    assert len(b.select_series([Matcher("i", "=", "0")], None, None, QueryContext()).ids) == 0
    for st in (a, b):
        st.close()

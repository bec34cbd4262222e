"""The table of known 1.0 series (ingest/known_series.py): it answers exactly what a dict of the same entries
would, through growth, replaced entries, keys that share their low bits, forgetting and clearing."""

from __future__ import annotations

import numpy as np

from metricsgw.ingest.known_series import DROPPED, SID, KnownSeries
from metricsgw.remote.series_keys import halves


def keys(rng, n):
    return [bytes(k) for k in rng.integers(0, 256, (n, 16), dtype=np.uint8)]


def check(table, model, probe):
    state, sids = table.find(probe)
    for key, st, sid in zip(probe, state.tolist(), sids.tolist()):
        want = model.get(key)
        if want is None:
            assert st == 0
        elif want == "dropped":
            assert st == DROPPED
        else:
            assert st == SID and sid == want
    assert len(table) == len(model)


def test_it_answers_as_a_dict_of_the_same_entries_through_growth():
    rng = np.random.default_rng(1)
    table, model = KnownSeries(), {}
    for step in range(12):  # 12 x 6,000 keys: several doublings of the 1,024 slots it starts with
        batch = keys(rng, 6000)
        sids = rng.integers(-(2**63), 2**63 - 1, len(batch)).tolist()  # ids are any int64, negative too
        table.add_ids(batch[:5000], sids[:5000])
        table.add_dropped(batch[5000:])
        model.update(zip(batch[:5000], sids[:5000]))
        model.update(dict.fromkeys(batch[5000:], "dropped"))
        check(table, model, batch + keys(rng, 500))
    every = list(model)
    check(table, model, every)
    resolved = table.resolve(*halves(every))
    assert resolved is not None
    sids, dropped = resolved
    assert dropped.tolist() == [model[k] == "dropped" for k in every]
    assert [s for s, d in zip(sids.tolist(), dropped.tolist()) if not d] == \
        [model[k] for k in every if model[k] != "dropped"]


def test_resolve_is_all_or_nothing():
    rng = np.random.default_rng(2)
    table = KnownSeries()
    known = keys(rng, 100)
    assert table.resolve(*halves(known)) is None  # an empty table
    table.add_ids(known, list(range(100)))
    sids, dropped = table.resolve(*halves(known))
    assert sids.tolist() == list(range(100)) and dropped is None
    assert table.resolve(*halves(known + keys(rng, 1))) is None
    assert table.resolve(*halves(keys(rng, 1) + known)) is None


def test_keys_that_share_their_low_half_are_told_apart_and_a_key_added_again_is_replaced():
    lo = (12345).to_bytes(8, "big")
    same_low = [i.to_bytes(8, "big") + lo for i in range(1, 300)]  # all probe from the same slot
    table, model = KnownSeries(), {}
    table.add_ids(same_low, list(range(299)))
    model.update(zip(same_low, range(299)))
    table.add_dropped(same_low[:10])  # the rules changed their mind: the entry is replaced, not doubled
    model.update(dict.fromkeys(same_low[:10], "dropped"))
    table.add_ids(same_low[10:20], list(range(1000, 1010)))
    model.update(zip(same_low[10:20], range(1000, 1010)))
    check(table, model, same_low + [b"\x00" * 8 + lo])


def test_forget_drops_the_entries_of_those_ids_only_and_clear_drops_all():
    rng = np.random.default_rng(3)
    table = KnownSeries()
    ks = keys(rng, 5000)
    table.add_ids(ks[:4000], list(range(4000)))
    table.add_dropped(ks[4000:])
    gone = np.arange(0, 4000, 3)
    table.forget(gone)
    model = {k: i for i, k in enumerate(ks[:4000]) if i % 3}
    model.update(dict.fromkeys(ks[4000:], "dropped"))  # a drop is no id: it stays
    check(table, model, ks)
    table.clear()
    check(table, {}, ks)
    table.add_ids(ks[:1], [7])
    check(table, {ks[0]: 7}, ks[:10])

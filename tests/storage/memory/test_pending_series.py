"""PendingSeries: new series held compressed until the flush gives back every (sid, key) in order."""

import numpy as np
import pytest

from metricsgw.storage.memory.pending_series import PendingSeries


def test_columns_give_back_every_key_in_order_across_take_and_put_back():
    rng = np.random.default_rng(3)
    pending, want = PendingSeries(), []
    for chunk in range(5):
        keys = [bytes(rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8)) for _ in range(50)]
        keys[0] = b""  # a series with no labels has an empty key
        sids = rng.integers(-2**63, 2**63 - 1, 50, dtype=np.int64)
        pending.add(sids, keys)
        want += list(zip(sids.tolist(), keys))
    taken = pending.take()  # a flush takes them ...
    assert len(pending) == 0 and len(taken) == 250
    pending.add([7], [b"late"])
    pending.put_back(taken)  # ... fails, and gives them back before what came meanwhile
    sids, keys = pending.columns()
    assert list(zip(sids.tolist(), keys.to_pylist())) == want + [(7, b"late")]
    assert len(pending) == 251


def test_lengths_must_match():
    with pytest.raises(ValueError):
        PendingSeries().add([1, 2], [b"a"])
    assert PendingSeries().columns()[0].tolist() == []

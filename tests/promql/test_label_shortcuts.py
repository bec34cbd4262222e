"""The per-series label work the engine does in bulk (grouping by a label's place in the first set, dropping the
metric name at its place in the first set) gives what the plain per-set functions give, whatever the sets'
shapes: labels missing, extra labels before and after, upper-case names sorting before ``__name__``, empty sets."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from metricsgw.promql.aggregations import group_ids, grouper
from metricsgw.promql.value import drop_name, drop_names


def _sets(seed: int, n: int = 3000) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        lb = [("__name__", "m"), ("namespace", f"ns{rnd.randint(0, 3)}"), ("pod", f"p{rnd.randint(0, 5)}")]
        for extra, p in ((("Hostname", f"h{rnd.randint(0, 2)}"), 0.4), (("a", "x"), 0.3), (("zz", "y"), 0.3)):
            if rnd.random() < p:
                lb.append(extra)
        if rnd.random() < 0.15:
            lb.pop(rnd.randint(0, len(lb) - 1))
        out.append(() if rnd.random() < 0.02 else tuple(sorted(lb)))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("names", [["namespace"], ["pod", "namespace"], ["pod", "pod"], ["Hostname", "zz"],
                                   ["absent"], ["a", "pod"], ["__name__"], ["namespace", "pod", "zz"]])
def test_group_ids_as_one_set_at_a_time(seed, names):
    # as they come, and with a first set that holds none of the names (the places come from the others)
    for sets, without in itertools.product((_sets(seed), [(("__name__", "m"),)] + _sets(seed)), (False, True)):
        keys: dict = {}
        got = group_ids(sets, without, names, keys)
        of, plain = grouper(without, names), {}
        want = np.array([plain.setdefault(of(lb), len(plain)) for lb in sets])
        assert (got == want).all() and list(keys) == list(plain)


@pytest.mark.parametrize("seed", range(4))
def test_drop_names_as_one_set_at_a_time(seed):
    sets = _sets(seed)
    for first in (sets, [s for s in sets if s and s[0][0] == "Hostname"] + sets):  # the name first, or second
        assert drop_names(first) == [drop_name(lb) for lb in first]

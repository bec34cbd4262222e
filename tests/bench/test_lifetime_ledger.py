"""bench.lifetime's pod churn in the request template, its ledger of acknowledgements, and how a series read back
is matched with what was sent (no server: bench/test_lifetime.py runs the whole bench)."""

from __future__ import annotations

import numpy as np

from bench.lifetime_ledger import Ledger, PodChurn, _batches, _masked, _metric_name, _result_key
from bench.scale_wire import Template
from testkit.wire import encode_labels
from testkit.workload import Workload


def _template(wl: Workload) -> Template:
    return Template([encode_labels(lb) for lb in wl.series()], series_per_request=700)


def test_churn_renames_one_namespace_at_a_time_in_the_template():
    wl = Workload(3, seed=1)
    tpl = _template(wl)
    churn = PodChurn(wl, tpl)
    assert churn.places == 3 * (160 + 2 * 64)  # a GPU's DCGM series name its pod once, a pod's rules twice
    for epoch in range(1, 7):
        churn.advance()
        assert churn.epoch == epoch and churn.generations == churn.generations_at(epoch)
        assert [tpl.labels_of(i) for i in range(tpl.num_series)] == [encode_labels(lb) for lb in
                                                                     wl.series(churn.generations)]
    assert churn.generations == [2, 2, 1, 1] and [h["namespace"] for h in churn.history[:4]] == list(wl.namespaces)
    assert _metric_name(tpl.labels_of(0)) == dict(wl.series()[0])["__name__"]


def test_a_series_read_back_is_keyed_as_its_template_labels_with_the_pod_generation_hidden():
    wl = Workload(1, seed=3)
    tpl = _template(wl)
    churn = PodChurn(wl, tpl)
    churn.advance()
    i = next(i for i in range(wl.num_series) if wl.pod_of[i] >= 0 and wl.pod_namespace[wl.pod_of[i]] == 0
             and "comment" in dict(wl.series()[i]))
    pod = int(wl.pod_of[i])
    for g in (0, 1):  # as /api/v1/query answers count_over_time: no __name__
        labels = {n: v for n, v in wl.series([g, 0, 0, 0])[i] if n != "__name__"}
        key, name = _result_key(dict(wl.series()[i])["__name__"], labels)
        current = wl.pod_name(pod, 1)
        assert key == tpl.labels_of(i).replace(current.encode(), _masked(current).encode())
        assert wl.pod_generation(pod, name) == g


def test_ledger_counts_acknowledged_and_maybe_stored_requests_per_epoch():
    ledger = Ledger(num_requests=3)
    ledger.filled(0, 0, 0), ledger.finished(0, 0, True)
    ledger.filled(0, 1, 0), ledger.finished(0, 1, False)  # a 4xx, or given up: may be stored
    ledger.filled(0, 2, 0)  # sent, never answered
    ledger.filled(70, 0, 1), ledger.finished(70, 0, True)  # past the first allocation
    acked, maybe = ledger.counts(epochs=2)
    assert acked.tolist() == [[1, 1], [0, 0], [0, 0]] and maybe.tolist() == [[0, 0], [1, 0], [1, 0]]
    assert ledger.scrapes() == 71


def test_read_back_batches_cover_every_series_once_within_the_budget():
    wl = Workload(4, seed=0)
    tpl = _template(wl)
    metric_of = np.asarray([hash(_metric_name(tpl.labels_of(i))) % 1000 for i in range(wl.num_series)])
    per_series = np.full(wl.num_series, 10)
    batches = _batches(wl, metric_of, per_series, budget=3000, max_nodes=3)
    seen = np.concatenate([idx for _, _, idx in batches])
    assert sorted(seen.tolist()) == list(range(wl.num_series))
    for m, nodes, idx in batches:
        assert (metric_of[idx] == m).all() and set(wl.node_of[idx].tolist()) == set(nodes) and len(nodes) <= 3
        assert len(nodes) == 1 or per_series[idx].sum() <= 3000

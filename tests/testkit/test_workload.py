"""The workload generator (testkit/workload.py): deterministic, realistic shapes, valid labels."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import numpy as np
import pytest

from metricsgw.model import canonical, metric_name
from testkit.workload import Workload
from testkit.workload_catalog import K8S_LATENCY_BUCKETS, FB_TOTAL_MIB

T0 = 1_764_000_000_000
NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@pytest.fixture(scope="module")
def wl() -> Workload:
    return Workload(3, seed=5)


def test_same_nodes_and_seed_give_identical_output(wl):
    again = Workload(3, seed=5)
    assert again.series() == wl.series()
    for t in (T0, T0 + 15_000, T0 + 86_400_000):
        assert again.samples_at(t).tobytes() == wl.samples_at(t).tobytes()
    assert again.exposition(T0, range(1)) == wl.exposition(T0, range(1))


def test_another_seed_gives_other_values(wl):
    other = Workload(3, seed=6)
    assert other.num_series == wl.num_series
    assert other.samples_at(T0).tobytes() != wl.samples_at(T0).tobytes()


def test_series_per_node(wl):
    per_node = Counter(wl.node_of.tolist())
    gpu = [per_node[n] for n in range(3)]
    cp = [per_node[n] for n in range(3, 6)]
    assert gpu == [358] * 3  # 160 DCGM + 98 node-exporter + 100 iptables
    assert len(set(cp)) == 1 and 5000 < cp[0] < 7000  # apiserver + etcd histograms dominate
    # so 1,000 GPU nodes come to ~376k series
    assert 360_000 < 1000 * gpu[0] + 3 * cp[0] < 400_000
    assert wl.num_series == sum(per_node.values())
    dcgm = [lb for lb in wl.series() if metric_name(lb).startswith("DCGM_") and dict(lb)["Hostname"] == "gpu-node-00000"]
    assert len(dcgm) == 8 * 20


def test_labels_are_canonical_valid_and_unique(wl):
    series = wl.series()
    assert len(set(series)) == len(series)
    for lb in series:
        assert lb == canonical(lb)
        names = [n for n, _ in lb]
        assert len(names) == len(set(names))
        assert all(LABEL_RE.match(n) for n in names if n != "__name__")
        assert NAME_RE.match(metric_name(lb))
        assert "job" in names and "instance" in names


def test_dcgm_exporter_labels(wl):
    lb = next(dict(lb) for lb in wl.series() if metric_name(lb) == "DCGM_FI_DEV_GPU_UTIL")
    for name in ("gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "container",
                 "namespace", "pod", "job", "instance"):
        assert lb.get(name), name
    assert re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", lb["UUID"])
    assert lb["device"] == f"nvidia{lb['gpu']}"


def test_pods_churn_into_new_series_of_the_same_shape(wl):
    """series(generations): each namespace's pods replaced that many times: a pod's series (DCGM of its GPUs, its
    iptables rules, whose comment names it) get a new pod name of the same length, other series stay."""
    before = wl.series()
    assert wl.series([0] * len(wl.namespaces)) is before
    after = wl.series([2, 0, 1, 0])
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert set(changed) == {i for i in range(wl.num_series) if wl.pod_of[i] >= 0
                            and wl.pod_namespace[wl.pod_of[i]] in (0, 2)}
    assert not set(before) & {after[i] for i in changed}
    for i in changed:
        pod = int(wl.pod_of[i])
        old, new = dict(before[i]), dict(after[i])
        g = wl.pod_generation(pod, new["pod"])
        assert old["pod"] == wl.pod_name(pod) and g == (2 if wl.pod_namespace[pod] == 0 else 1)
        assert len(new["pod"]) == len(old["pod"]) and new["namespace"] == old["namespace"]
        assert {k for k in old if old[k] != new[k]} <= {"pod", "comment"}
    for pod in range(len(wl.pod_namespace)):  # a slot's names never come back
        names = [wl.pod_name(pod, g) for g in range(50)]
        assert len(set(names)) == 50 and [wl.pod_generation(pod, n) for n in names] == list(range(50))


def _counter_like(wl) -> np.ndarray:
    types = {m.metric: m.type for m in wl.metadata()}
    out = []
    for i, lb in enumerate(wl.series()):
        name = metric_name(lb)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if types.get(name) == "counter" or types.get(base) == "histogram":
            out.append(i)
    return np.asarray(out)


def test_counters_only_decrease_at_resets_back_near_zero(wl):
    idx = _counter_like(wl)
    step = 60_000
    vals = np.stack([wl.samples_at(T0 + k * step)[idx] for k in range(24 * 60)])  # one day, 1-minute steps
    d = np.diff(vals, axis=0)
    down = d < 0
    assert down.any(), "a day should see some exporter restarts"
    assert down.mean() < 0.01  # resets are occasional
    # after a reset the counter restarted within the last step: it holds at most ~ one step's increase
    max_up = np.where(d > 0, d, 0).max(axis=0)
    after = vals[1:][down]
    assert np.all(after <= 2 * np.broadcast_to(max_up, d.shape)[down] + 1)
    # counters of one exporter restart together: each series' reset steps are a subset of the
    # steps of the fastest counter of its instance (slow counters may be at 0 when it happens)
    labels = wl.series()
    by_instance: dict[str, list[set[int]]] = defaultdict(list)
    for col in range(len(idx)):
        steps = set(np.flatnonzero(down[:, col]).tolist())
        by_instance[dict(labels[idx[col]])["instance"]].append(steps)
    for instance, sets in by_instance.items():
        biggest = max(sets, key=len)
        assert all(s <= biggest for s in sets), instance


def _histograms(wl, metric: str) -> dict:
    fams: dict[tuple, dict] = defaultdict(dict)
    for i, lb in enumerate(wl.series()):
        name = metric_name(lb)
        if not name.startswith(metric):
            continue
        key = tuple(p for p in lb if p[0] not in ("__name__", "le"))
        d = dict(lb)
        fams[key][d["le"] if name.endswith("_bucket") else name[len(metric):]] = i
    return fams


@pytest.mark.parametrize("metric", ["apiserver_request_duration_seconds", "etcd_request_duration_seconds"])
def test_histograms_are_cumulative_and_consistent(wl, metric):
    fams = _histograms(wl, metric)
    assert len(fams) >= 100
    expected_les = [f"{x:g}" for x in K8S_LATENCY_BUCKETS] + ["+Inf"]
    for t in (T0, T0 + 15_000, T0 + 3_600_000):
        v = wl.samples_at(t)
        for parts in fams.values():
            les = sorted((k for k in parts if not k.startswith("_")), key=float)
            assert les == sorted(expected_les, key=float)
            buckets = v[[parts[le] for le in les]]
            assert np.all(np.diff(buckets) >= 0)
            assert buckets[-1] == v[parts["_count"]]
            assert v[parts["_sum"]] >= 0
            assert np.all(buckets == np.floor(buckets))


def test_gauges_vary_and_stay_in_range(wl):
    labels = wl.series()
    util = np.asarray([i for i, lb in enumerate(labels) if metric_name(lb) == "DCGM_FI_DEV_GPU_UTIL"])
    vals = np.stack([wl.samples_at(T0 + k * 15_000)[util] for k in range(40)])
    assert vals.min() >= 0 and vals.max() <= 100
    assert len(np.unique(vals)) > 10
    used = {dict(lb)["UUID"]: i for i, lb in enumerate(labels) if metric_name(lb) == "DCGM_FI_DEV_FB_USED"}
    free = {dict(lb)["UUID"]: i for i, lb in enumerate(labels) if metric_name(lb) == "DCGM_FI_DEV_FB_FREE"}
    v = wl.samples_at(T0)
    assert used.keys() == free.keys()
    for uuid, i in used.items():
        assert v[i] + v[free[uuid]] == FB_TOTAL_MIB


def test_metadata_covers_every_family(wl):
    meta = {m.metric: m for m in wl.metadata()}
    for lb in wl.series():
        name = metric_name(lb)
        assert name in meta or re.sub(r"_(bucket|sum|count)$", "", name) in meta, name
    assert meta["apiserver_request_duration_seconds"].type == "histogram"
    assert meta["node_cpu_seconds_total"].type == "counter"


def test_exposition_matches_samples(wl):
    text = wl.exposition(T0, range(1, 2))
    v = wl.samples_at(T0)
    want = {i for i in wl.series_of_nodes(range(1, 2)).tolist()}
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == len(want) == 358
    by_series = {}
    for i in want:
        lb = wl.series()[i]
        key = metric_name(lb) + "{" + ",".join(f'{n}="{val}"' for n, val in lb if n != "__name__") + "}"
        by_series[key] = v[i]
    for ln in lines:
        key, value = ln.rsplit(" ", 1)
        assert float(value) == by_series[key]
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text

"""Recording rules over native histograms, written back: real vmalert evaluates rules on metricsgw's native
histograms (quantiles, counts and sums of their rates, the float results Prometheus' functions give) and
remote-writes what it records to metricsgw, where each recorded sample equals metricsgw's own answer to the
rule's expression at the sample's time, bit for bit. (vmalert reads float results only: a rule whose result
is itself a histogram is for a Prometheus 3 ruler.)"""

from __future__ import annotations

import time

import pytest

from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.e2e.ecosystem import start_vmalert, wait_for
from tests.native_requests import v1_request

RULES = {  # record: (expr, series it gives)
    "nh_rule:p90": ("histogram_quantile(0.9, sum(rate(nh_rule[5m])))", 1),
    "nh_rule:rate_count": ("histogram_count(sum by (pod) (rate(nh_rule[5m])))", 3),
    "nh_rule:sum": ("histogram_sum(nh_rule)", 3),
    "nh_rule:fraction": ("histogram_fraction(0, 1, sum(rate(nh_rule[5m])))", 1),
}
SCRAPES = 60  # 15 minutes at 15 s, ending now: the rules evaluate over live data
STEP_MS = 15_000


def _histogram(k: int, pod: int, t: int) -> dict:
    counts = [k * (pod + 1) + b for b in range(5)]  # buckets -1..3 of schema 0, growing
    deltas = [counts[0]] + [b - a for a, b in zip(counts, counts[1:])]
    return {"count_int": sum(counts) + k, "sum": 0.75 * k * (pod + 1), "schema": 0, "zero_threshold": 1e-128,
            "zero_count_int": k, "positive_spans": [(-1, 5)], "positive_deltas": deltas, "timestamp": t}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = start_metricsgw(tmp_path_factory.mktemp("native-rules"))
    try:
        gw.wait_ready()
        end_ms = int(time.time() * 1000)
        for k in range(SCRAPES):
            t = end_ms - (SCRAPES - 1 - k) * STEP_MS
            series = [{"labels": [("__name__", "nh_rule"), ("pod", f"p{p}")], "histograms": [_histogram(k, p, t)]}
                      for p in range(3)]
            status, text, _ = remote_write(gw.base_url, v1_request(series))
            assert status == 204, text
        yield gw
    finally:
        gw.stop()


def test_vmalert_records_rules_over_native_histograms_and_writes_them_back(gateway, tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n  - name: native\n    rules:\n" + "".join(
        f"      - record: {name}\n        expr: '{expr}'\n" for name, (expr, _) in RULES.items()))
    vmalert = start_vmalert(tmp_path / "vmalert", [rules], gateway.base_url, gateway.base_url,
                            notifier_url="http://127.0.0.1:1")  # recording rules only: it sends nothing
    try:
        vmalert.wait_ready()
        for name, (expr, n_series) in RULES.items():
            def recorded(name=name):
                status, body = api(gateway.base_url, "/api/v1/query", {"query": f"{name}[1m]"})
                result = body["data"]["result"] if status == 200 else []
                return result if result and len(result[0]["values"]) >= 2 else None

            series = wait_for(f"{name} written back", recorded)
            assert len(series) == n_series, series
            for s in series:
                labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
                for ts, value in s["values"]:
                    status, body = api(gateway.base_url, "/api/v1/query", {"query": expr, "time": ts})
                    assert status == 200, body
                    want = [r for r in body["data"]["result"] if r["metric"] == labels]
                    assert [r["value"][1] for r in want] == [value], (name, ts, labels)
                    assert float(value) > 0
    finally:
        vmalert.stop()

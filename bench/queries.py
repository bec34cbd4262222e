"""Dashboard-style query benchmark: the same PromQL against two servers holding the same data.

    python -m bench.queries --dir /var/tmp/bench-1000 --nodes 1000    # loads both servers once (bench.dataset)
    python -m bench.queries --a http://127.0.0.1:9201 --b http://127.0.0.1:9090 [--window 1h --step 30s]

Queries go as Grafana sends them: POST application/x-www-form-urlencoded to /api/v1/query_range
(and /api/v1/query). Each is run `--repeat` times per server, alternating servers; the median
latency is reported with the ratio a/b, the result's series count on both sides and whether
the answers agree (same series, values within 1e-9 relative). The end time defaults to
`max(timestamp(up))` on server b, so it works right after a load run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from metricsgw.config import parse_duration

RESULTS = Path(__file__).resolve().parent / "results"

# (panel, PromQL) -- the GPU health, network, apiserver and node panels of the shipped dashboards
DASHBOARD_QUERIES = (
    ("gpu util by node", "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"),
    ("hottest gpus", "topk(10, max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP))"),
    ("cluster power", "sum(DCGM_FI_DEV_POWER_USAGE)"),
    ("fb used ratio", "topk(10, DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))"),
    ("gpus with xid", "count(DCGM_FI_DEV_XID_ERRORS > 0) or vector(0)"),
    ("dbe errors", "sum by (Hostname) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h])) > 0"),
    ("tensor active by ns", "avg by (namespace) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)"),
    ("nvlink by ns", "sum by (namespace) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m]))"),
    ("internet egress by ns",
     'sum by (namespace) (rate(iptables_rule_bytes_total{traffic="internet", direction="egress"}[5m]))'),
    ("top talkers", "topk(10, sum by (namespace, pod) (rate(iptables_rule_bytes_total[5m])))"),
    ("node rx by device", "sum by (device) (rate(node_network_receive_bytes_total[5m]))"),
    ("cpu busy", '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m]))'),
    ("mem available", "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"),
    ("targets down", "count(up == 0) or vector(0)"),
    ("apiserver p99 by verb",
     "histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket[5m])))"),
    ("apiserver codes", "sum by (code) (rate(apiserver_request_total[5m]))"),
    ("apiserver 429s", 'sum(rate(apiserver_request_total{code="429"}[5m])) or vector(0)'),
    ("etcd p99", "histogram_quantile(0.99, sum by (le, operation) (rate(etcd_request_duration_seconds_bucket[5m])))"),
    ("inflight", "sum by (request_kind) (apiserver_current_inflight_requests)"),
)


def post(base: str, path: str, params: dict, timeout_s: float = 120.0) -> tuple[int, dict, float]:
    """(status, JSON body, seconds) of a form POST, like Grafana's."""
    data = urllib.parse.urlencode(params).encode()
    req = urllib.request.Request(base + path, data=data, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            body, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        body, status = e.read(), e.code
    elapsed = time.perf_counter() - t0
    try:
        return status, json.loads(body), elapsed
    except ValueError:
        return status, {"status": "error", "error": body[:200].decode(errors="replace")}, elapsed


def _points(data: dict) -> dict:
    out = {}
    for s in data.get("result", []):
        key = tuple(sorted(s["metric"].items()))
        vals = s.get("values") or [s.get("value")]
        out[key] = [(float(t), float(v)) for t, v in vals if t is not None]
    return out


def same_answer(a: dict, b: dict, rel: float = 1e-9) -> bool:
    pa, pb = _points(a), _points(b)
    if pa.keys() != pb.keys():
        return False
    for k in pa:
        if len(pa[k]) != len(pb[k]):
            return False
        for (ta, va), (tb, vb) in zip(pa[k], pb[k]):
            if ta != tb or not (va == vb or (math.isnan(va) and math.isnan(vb))
                                or abs(va - vb) <= rel * max(abs(va), abs(vb))):
                return False
    return True


@dataclass
class QueryResult:
    panel: str
    query: str
    seconds: dict[str, list[float]] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)
    agree: bool = False
    error: str = ""

    def median(self, side: str) -> float:
        return statistics.median(self.seconds[side]) if self.seconds.get(side) else float("nan")


def run(a: str, b: str, end_s: float, window_s: float, step_s: float, repeat: int = 3,
        queries=DASHBOARD_QUERIES) -> list[QueryResult]:
    params = {"start": f"{end_s - window_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
    out = []
    for panel, q in queries:
        r = QueryResult(panel, q)
        bodies = {}
        for _ in range(repeat):
            for side, base in (("a", a), ("b", b)):
                status, body, secs = post(base, "/api/v1/query_range", params | {"query": q})
                r.seconds.setdefault(side, []).append(secs)
                r.status[side] = status
                bodies[side] = body
        for side in ("a", "b"):
            body = bodies[side]
            r.series[side] = len(body.get("data", {}).get("result", [])) if body.get("status") == "success" else -1
            if body.get("status") != "success":
                r.error += f"{side}: {body.get('error', '')[:120]} "
        if r.series["a"] >= 0 and r.series["b"] >= 0:
            r.agree = same_answer(bodies["a"]["data"], bodies["b"]["data"])
        out.append(r)
    return out


def table(results: list[QueryResult]) -> str:
    """Median latency per query (the refreshes of a dashboard), and the first run on its own:
    the first run after a restart reads cold data (metricsgw: Parquet, before its sample cache)."""
    lines = ["| panel | a ms | b ms | a/b | first run a/b | series a | series b | same answer |",
             "|---|---|---|---|---|---|---|---|"]
    ratios, firsts = [], []
    for r in results:
        ma, mb = r.median("a") * 1000, r.median("b") * 1000
        ratio = ma / mb if mb > 0 else float("nan")
        first = r.seconds["a"][0] / r.seconds["b"][0] if r.seconds.get("b") and r.seconds["b"][0] > 0 else float("nan")
        if r.series.get("a", -1) >= 0 and r.series.get("b", -1) >= 0:
            ratios.append(ratio)
            firsts.append(first)
        lines.append(f"| {r.panel} | {ma:.1f} | {mb:.1f} | {ratio:.2f} | {first:.2f} | {r.series.get('a')} | "
                     f"{r.series.get('b')} | {'yes' if r.agree else 'NO ' + r.error.strip()} |")
    if ratios:
        lines.append(f"\nmedian latency ratio a/b over {len(ratios)} answered queries: {statistics.median(ratios):.2f} "
                     f"(first runs: {statistics.median(firsts):.2f})")
    return "\n".join(lines)


def latest_timestamp(base: str) -> float:
    status, body, _ = post(base, "/api/v1/query", {"query": "max(timestamp(up))"})
    res = body.get("data", {}).get("result", []) if status == 200 else []
    if not res:
        raise RuntimeError(f"{base} has no `up` series: load data first (bench.ingest --keep, or bench.load)")
    return float(res[0]["value"][1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", help="base URL of server a (e.g. metricsgw); or use --dir")
    ap.add_argument("--b", help="base URL of server b (e.g. Prometheus)")
    ap.add_argument("--dir", type=Path, help="run both servers on a bench.dataset dir (loaded first if empty)")
    ap.add_argument("--nodes", type=int, default=1000, help="with --dir: workload size")
    ap.add_argument("--history", default="70m", help="with --dir: span of loaded data")
    ap.add_argument("--end", type=float, help="unix seconds; default max(timestamp(up)) on b")
    ap.add_argument("--window", default="1h")
    ap.add_argument("--step", default="30s")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    window, step = parse_duration(args.window), parse_duration(args.step)
    if args.dir is None:
        if not (args.a and args.b):
            ap.error("give --a and --b, or --dir")
        results = run(args.a, args.b, args.end or latest_timestamp(args.b), window, step, args.repeat)
        print(table(results))
        return
    from bench.dataset import DatasetPlan, open_dataset
    plan = DatasetPlan(nodes=args.nodes, history_s=parse_duration(args.history))
    ds = open_dataset(args.dir, plan)
    try:
        print(f"{ds.num_series:,} series; load s {ds.load_s}; restart s {ds.restart_s}", flush=True)
        results = run(ds.metricsgw.base_url, ds.prometheus.base_url, args.end or ds.end_ms / 1000, window, step,
                      args.repeat)
        rss = {s.name: psutil.Process(s.pid).memory_info().rss for s in (ds.metricsgw, ds.prometheus)}
    finally:
        ds.stop()
    print("a = metricsgw, b = Prometheus\n")
    print(table(results))
    print(f"\nRSS after the queries: metricsgw {rss['metricsgw'] / 2**20:,.0f} MiB, "
          f"Prometheus {rss['prometheus'] / 2**20:,.0f} MiB")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("queries-%Y%m%dT%H%M%SZ.json", time.gmtime())
    out.write_text(json.dumps({"plan": vars(plan), "num_series": ds.num_series, "load_s": ds.load_s,
                               "restart_s": ds.restart_s, "rss": rss, "window_s": window, "step_s": step,
                               "results": [vars(r) for r in results]}, indent=2))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()

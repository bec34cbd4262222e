"""Dashboard-style query benchmark: the same PromQL against metricsgw, Prometheus and
VictoriaMetrics holding the same data.

    python -m bench.queries --dir /var/tmp/bench-1000 --nodes 1000    # loads the servers once (bench.dataset)
    python -m bench.queries --a http://127.0.0.1:9201 --b http://127.0.0.1:9090 [--c http://127.0.0.1:8428]

Queries go as Grafana sends them: POST application/x-www-form-urlencoded to /api/v1/query_range
(and /api/v1/query), on one kept-alive connection per server (``--new-connections``: one per query). Each is run
`--repeat` times per server, alternating servers, each repeat in another order of the servers (so that no server
always runs right after the same other); the median
latency is reported with metricsgw's ratio to each of the others, the result's series count on
each side and whether each server's answer agrees with Prometheus's (same series, values within
1e-9 relative). VictoriaMetrics legitimately differs in places (its increase() does not
extrapolate and starts from the sample before the window; topk in a range query keeps other
series): the table says so per query rather than hiding it.
VictoriaMetrics runs with its response cache off (procs.start_victoria_metrics). The end time
defaults to `max(timestamp(up))` on server b, so it works right after a load run.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import signal
import statistics
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from metricsgw.config import parse_duration
from testkit import procs
from testkit.panels import DASHBOARD_QUERIES

RESULTS = Path(__file__).resolve().parent / "results"
METRICSGW, PROMETHEUS, VICTORIA_METRICS = "metricsgw", "prometheus", "victoria-metrics"
SHORT = {METRICSGW: "gw", PROMETHEUS: "prom", VICTORIA_METRICS: "vm"}


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


class KeptAlive:
    """One HTTP/1.1 connection to a server, kept open from query to query as Grafana (Go's HTTP client) keeps its
    connections to a datasource; reopened once if the server closed it while idle."""

    def __init__(self, base: str, timeout_s: float = 120.0) -> None:
        url = urllib.parse.urlsplit(base)
        self.host, self.port, self.timeout_s = url.hostname, url.port or 80, timeout_s
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, params: dict) -> tuple[int, dict, float]:
        data = urllib.parse.urlencode(params)
        t0 = time.perf_counter()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self.conn.request("POST", path, data, {"Content-Type": "application/x-www-form-urlencoded"})
                resp = self.conn.getresponse()
                body, status = resp.read(), resp.status
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        elapsed = time.perf_counter() - t0
        try:
            return status, json.loads(body), elapsed
        except ValueError:
            return status, {"status": "error", "error": body[:200].decode(errors="replace")}, elapsed

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@dataclass
class QueryResult:
    panel: str
    query: str
    seconds: dict[str, list[float]] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)
    agree: dict[str, bool] = field(default_factory=dict)  # side -> same answer as the reference side
    error: str = ""

    def median(self, side: str) -> float:
        return statistics.median(self.seconds[side]) if self.seconds.get(side) else float("nan")

    def answered(self, side: str) -> bool:
        return self.series.get(side, -1) >= 0


def run(bases: dict[str, str], end_s: float, window_s: float, step_s: float, repeat: int = 3,
        queries=DASHBOARD_QUERIES, reference: str = PROMETHEUS, keep_alive: bool = True) -> list[QueryResult]:
    """Each query `repeat` times on every server of `bases` (name -> base URL), in turn; each
    answer is compared with the `reference` server's. ``keep_alive``: one connection per server for the
    whole run, as Grafana has; otherwise a new connection per query."""
    params = {"start": f"{end_s - window_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
    clients = {side: KeptAlive(base) for side, base in bases.items()} if keep_alive else {}
    try:
        return _run(bases, clients, params, repeat, queries, reference)
    finally:
        for c in clients.values():
            c.close()


def _run(bases, clients, params, repeat, queries, reference) -> list[QueryResult]:
    # Repeat k asks the servers in the k-th of their orders (all of them in turn, the given one first), so that each
    # follows each other equally often: the state a server leaves the host in (caches, idle cores) moved the next
    # one's latency by up to 2x, and a fixed order gave that to the same server every time.
    orders = list(itertools.permutations(bases.items()))
    out = []
    for panel, q in queries:
        r = QueryResult(panel, q)
        bodies = {}
        for k in range(repeat):
            for side, base in orders[k % len(orders)]:
                if side in clients:
                    status, body, secs = clients[side].post("/api/v1/query_range", params | {"query": q})
                else:
                    status, body, secs = post(base, "/api/v1/query_range", params | {"query": q})
                r.seconds.setdefault(side, []).append(secs)
                r.status[side] = status
                bodies[side] = body
        for side, body in bodies.items():
            r.series[side] = len(body.get("data", {}).get("result", [])) if body.get("status") == "success" else -1
            if body.get("status") != "success":
                r.error += f"{side}: {body.get('error', '')[:120]} "
        for side in bases:
            if side != reference and r.answered(side) and r.answered(reference):
                r.agree[side] = same_answer(bodies[side]["data"], bodies[reference]["data"])
        out.append(r)
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def table(results: list[QueryResult], reference: str = PROMETHEUS) -> str:
    """Median latency per query (the refreshes of a dashboard), and the first run on its own:
    the first run after a restart reads cold data (metricsgw: Parquet, before its sample cache).
    Ratios are metricsgw's against each other server; "same answer" compares each server with
    the reference (Prometheus)."""
    sides = list(results[0].seconds) if results else []
    others = [s for s in sides if s != METRICSGW] if METRICSGW in sides else []
    checked = [s for s in sides if s != reference]
    head = ([f"{SHORT[s]} ms" for s in sides] + [f"{SHORT[METRICSGW]}/{SHORT[o]}" for o in others]
            + [f"first run {SHORT[METRICSGW]}/{SHORT[o]}" for o in others] + [f"series {SHORT[s]}" for s in sides]
            + [f"{SHORT[s]} same as {SHORT[reference]}" for s in checked])
    lines = ["| panel | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    ratios: dict[str, list[float]] = {o: [] for o in others}
    firsts: dict[str, list[float]] = {o: [] for o in others}
    for r in results:
        med = {s: r.median(s) * 1000 for s in sides}
        row_ratio = {o: _ratio(med[METRICSGW], med[o]) for o in others}
        row_first = {o: _ratio(r.seconds[METRICSGW][0], r.seconds[o][0]) for o in others}
        for o in others:
            if r.answered(METRICSGW) and r.answered(o):
                ratios[o].append(row_ratio[o])
                firsts[o].append(row_first[o])
        same = ["yes" if r.agree.get(s) else "no" if s in r.agree else "ERROR" for s in checked]
        cells = ([f"{med[s]:.1f}" for s in sides] + [f"{row_ratio[o]:.2f}" for o in others]
                 + [f"{row_first[o]:.2f}" for o in others] + [str(r.series.get(s)) for s in sides] + same)
        lines.append(f"| {r.panel} | " + " | ".join(cells) + " |")
    for o in others:
        if ratios[o]:
            lines.append(f"\nmedian latency ratio metricsgw/{SHORT[o]} over {len(ratios[o])} answered queries: "
                         f"{statistics.median(ratios[o]):.2f} (first runs: {statistics.median(firsts[o]):.2f})")
    errors = [f"{r.panel}: {r.error.strip()}" for r in results if r.error]
    if errors:
        lines.append("\nerrors: " + "; ".join(errors))
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
    ap.add_argument("--b", help="base URL of server b (Prometheus: the reference answers)")
    ap.add_argument("--c", help="base URL of server c (VictoriaMetrics), optional")
    ap.add_argument("--dir", type=Path, help="run the three servers on a bench.dataset dir (loaded first if empty)")
    ap.add_argument("--nodes", type=int, default=1000, help="with --dir: workload size")
    ap.add_argument("--history", default="70m", help="with --dir: span of loaded data")
    ap.add_argument("--end", type=float, help="unix seconds; default max(timestamp(up)) on b")
    ap.add_argument("--window", default="1h")
    ap.add_argument("--step", default="30s")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new-connections", action="store_true",
                    help="a new TCP connection per query (Grafana keeps one open per datasource: the default)")
    args = ap.parse_args(argv)
    window, step = parse_duration(args.window), parse_duration(args.step)
    if args.dir is None:
        if not (args.a and args.b):
            ap.error("give --a and --b, or --dir")
        bases = {METRICSGW: args.a, PROMETHEUS: args.b} | ({VICTORIA_METRICS: args.c} if args.c else {})
        results = run(bases, args.end or latest_timestamp(args.b), window, step, args.repeat,
                      keep_alive=not args.new_connections)
        print(table(results))
        return
    from bench.dataset import DatasetPlan, open_dataset
    plan = DatasetPlan(nodes=args.nodes, history_s=parse_duration(args.history))
    ds = open_dataset(args.dir, plan)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the servers too (finally below)
    try:
        print(f"{ds.num_series:,} series; load s {ds.load_s}; restart s {ds.restart_s}", flush=True)
        results = run({s.name: s.base_url for s in ds.servers}, args.end or ds.end_ms / 1000, window, step,
                      args.repeat, keep_alive=not args.new_connections)
        rss = {s.name: procs.tree_rss(s.pid) for s in ds.servers}
    finally:
        ds.stop()
    print("gw = metricsgw, prom = Prometheus 2.42, vm = VictoriaMetrics (response cache off)\n")
    print(table(results))
    print("\nRSS after the queries: " + ", ".join(f"{n} {b / 2**20:,.0f} MiB" for n, b in rss.items()))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("queries-%Y%m%dT%H%M%SZ.json", time.gmtime())
    out.write_text(json.dumps({"plan": vars(plan), "keep_alive": not args.new_connections,
                               "num_series": ds.num_series, "load_s": ds.load_s,
                               "restart_s": ds.restart_s, "rss": rss, "window_s": window, "step_s": step,
                               "results": [vars(r) for r in results]}, indent=2))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()

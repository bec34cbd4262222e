"""Dashboard refreshes with the caches off and on: metricsgw against VictoriaMetrics (Prometheus, cacheless, beside).

    python -m bench.refresh --dir /var/tmp/bench-100 --nodes 100 --repeat 5

Both phases run the dashboard panels' range queries (testkit/panels.py) over the same loaded data (bench.dataset),
as Grafana asks them (form POST, one kept-alive connection per server), each server in turn:

1. **Caches off, cold**: metricsgw with ``nocache=1``, VictoriaMetrics with ``-search.disableCache``, Prometheus
   (which has no cache); the same window ``--repeat`` times; medians. Issue 30 asks metricsgw <= 1.0x VM here.
2. **Caches on, refresh**: VictoriaMetrics restarted on its data without ``-search.disableCache``; each query is
   asked once to fill the caches, then ``--repeat`` refreshes, each with the window moved on by one step (what a
   dashboard's refresh asks); medians of the refreshes. Issue 30 asks metricsgw <= 0.5x VM here.

Each refresh's answer from metricsgw is compared with the same query's ``nocache=1`` answer (it must be equal).
The table and the ratios print; the figures go to bench/results/refresh-*.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.dataset import DatasetPlan, open_dataset
from bench.queries import RESULTS, KeptAlive
from metricsgw.config import parse_duration
from testkit import procs
from testkit.panels import DASHBOARD_QUERIES

SIDES = ("metricsgw", "prometheus", "victoria-metrics")
SHORT = {"metricsgw": "gw", "prometheus": "prom", "victoria-metrics": "vm"}


def _ask(client: KeptAlive, query: str, start: float, end: float, step: float, extra: dict | None = None):
    params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}", **(extra or {})}
    status, body, secs = client.post("/api/v1/query_range", params)
    return status, body, secs


def cold(clients: dict[str, KeptAlive], end: float, window: float, step: float, repeat: int) -> dict:
    """query -> side -> seconds of each repeat, caches off."""
    out = {}
    for _, q in DASHBOARD_QUERIES:
        out[q] = {s: [] for s in clients}
        for k in range(repeat):
            order = list(clients)[k % len(clients):] + list(clients)[:k % len(clients)]
            for side in order:
                extra = {"nocache": "1"} if side == "metricsgw" else None
                status, body, secs = _ask(clients[side], q, end - window, end, step, extra)
                out[q][side].append(secs if status == 200 else float("nan"))
    return out


def refreshed(clients: dict[str, KeptAlive], end: float, window: float, step: float, repeat: int
              ) -> tuple[dict, list[str]]:
    """query -> side -> seconds of each refresh (the window moved on a step each time), caches on; and the
    queries whose cached metricsgw answer differed from its nocache=1 answer."""
    out, differ = {}, []
    for _, q in DASHBOARD_QUERIES:
        out[q] = {s: [] for s in clients}
        for k in range(repeat + 1):
            e = end + k * step
            for side in clients:
                status, body, secs = _ask(clients[side], q, e - window, e, step)
                if k:
                    out[q][side].append(secs if status == 200 else float("nan"))
                if side == "metricsgw" and k:
                    _, fresh, _ = _ask(clients[side], q, e - window, e, step, {"nocache": "1"})
                    if fresh.get("data") != body.get("data"):
                        differ.append(q)
    return out, differ


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000 if xs else float("nan")


def table(title: str, times: dict) -> tuple[str, dict[str, float]]:
    sides = [s for s in SIDES if s in next(iter(times.values()))]
    others = [s for s in sides if s != "metricsgw"]
    lines = [f"### {title}", "", "| query | " + " | ".join(f"{SHORT[s]} ms" for s in sides) + " | "
             + " | ".join(f"gw/{SHORT[o]}" for o in others) + " |", "|---" * (1 + len(sides) + len(others)) + "|"]
    ratios: dict[str, list[float]] = {o: [] for o in others}
    for q, by_side in times.items():
        med = {s: _median_ms(by_side[s]) for s in sides}
        cells = [f"{med[s]:.1f}" for s in sides]
        for o in others:
            r = med["metricsgw"] / med[o] if med[o] > 0 else float("nan")
            ratios[o].append(r)
            cells.append(f"{r:.2f}")
        lines.append(f"| `{q[:70]}` | " + " | ".join(cells) + " |")
    summary = {o: statistics.median(ratios[o]) for o in others if ratios[o]}
    lines.append("")
    lines += [f"median ratio gw/{SHORT[o]}: {r:.2f}" for o, r in summary.items()]
    return "\n".join(lines), summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="a bench.dataset dir (loaded first if empty)")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--history", default="70m")
    ap.add_argument("--window", default="1h")
    ap.add_argument("--step", default="30s")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    window, step = parse_duration(args.window), parse_duration(args.step)
    plan = DatasetPlan(nodes=args.nodes, history_s=parse_duration(args.history))
    ds = open_dataset(args.dir, plan)
    servers = {s.name: s for s in ds.servers}
    end = ds.end_ms / 1000
    vm_on = None
    try:
        clients = {name: KeptAlive(s.base_url) for name, s in servers.items()}
        off = cold(clients, end, window, step, args.repeat)
        servers["victoria-metrics"].stop()
        vm_on = procs.start_victoria_metrics(args.dir / "victoria-metrics", extra=["-search.disableCache=false"])
        vm_on.wait_ready(timeout_s=600)
        clients["victoria-metrics"].close()
        clients["victoria-metrics"] = KeptAlive(vm_on.base_url)
        on, differ = refreshed({k: clients[k] for k in ("metricsgw", "victoria-metrics")}, end, window, step,
                               args.repeat)
    finally:
        if vm_on is not None:
            vm_on.stop()
        ds.stop()
    text_off, ratio_off = table("Caches off, cold (metricsgw nocache=1, VictoriaMetrics -search.disableCache)", off)
    text_on, ratio_on = table("Caches on, each refresh a step later (after one filling run)", on)
    print(f"{ds.num_series:,} series, {args.nodes} nodes, window {args.window}, step {args.step}, "
          f"{args.repeat} repeats\n\n{text_off}\n\n{text_on}\n")
    print("cached answers equal to nocache=1: " + ("all" if not differ else f"NOT for {differ}"))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("refresh-%Y%m%dT%H%M%SZ.json", time.gmtime())
    out.write_text(json.dumps({"nodes": args.nodes, "series": ds.num_series, "window_s": window, "step_s": step,
                               "repeat": args.repeat, "cold": off, "refresh": on, "ratios_cold": ratio_off,
                               "ratios_refresh": ratio_on, "differ": differ}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()

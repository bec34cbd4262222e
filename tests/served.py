"""A metricsgw configured as `make serve` configures it (the same --rules.file flags), holding 30 minutes of the
bench workload plus a few scrapes of its own /metrics: what a user sees after `make serve`, Prometheus
remote-writing the seed's exporters, and the dashboards imported.

``reference`` lists the label sets of the series as the exporters sent them, for those the relabel rules keep:
what the dashboards and rules are expected to find (tests/dashboards/shape.py works out answers from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from metricsgw.rules.loader import load_rule_files
from testkit.procs import Server, start_metricsgw
from testkit.workload import Workload
import asyncio

from testkit.load import send_all
from testkit.wire import build_requests, metadata_request
from tests.dashboards.loading import INTERVAL_MS, aligned_now_ms, provoke_discard_and_guard_rejection, scrape_into
from tests.e2e.client import api
from tests.shipped import make_serve_rule_files

GPU_NODES = 20
SCRAPES = 121  # 30 minutes at 15 s
SELF_SCRAPES = 6


@dataclass
class Served:
    server: Server
    end_s: float
    reference: list[dict]  # label sets as sent, of the series the relabel rules keep
    workload: Workload

    @property
    def base_url(self) -> str:
        return self.server.base_url


def write_relabelled_workload(gw: Server, workload: Workload, end_ms: int) -> None:
    """Send the workload in time order. Every request is answered 204, those holding series the relabel rules
    drop too (a configured drop is a success); anything else - a 400, a 5xx, a request not sent - fails the load."""
    start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
    reqs = build_requests(workload, start_ms, SCRAPES, INTERVAL_MS, 2, 4000, 11)
    res = asyncio.run(send_all(gw.write_url, reqs, 300.0, [metadata_request(workload)]))
    if set(res.status_counts) - {"204"} or res.requests_not_sent:
        raise RuntimeError(f"remote write to {gw.write_url} failed: {res.summary()}")


def start_served(work_dir, workload: Workload | None = None, extra_rule_files=()) -> Served:
    """``extra_rule_files`` go after make serve's, as a file added to rules/relabel/ could."""
    rule_files = make_serve_rule_files() + list(extra_rule_files)
    gw = start_metricsgw(work_dir, extra=[f"--rules.file={p}" for p in rule_files])
    try:
        gw.wait_ready()
        workload = workload or Workload(GPU_NODES, seed=1)
        end_ms = aligned_now_ms()
        write_relabelled_workload(gw, workload, end_ms)
        provoke_discard_and_guard_rejection(gw.base_url)
        instance = gw.base_url.removeprefix("http://")
        sent = list(workload.series())
        for k in range(SELF_SCRAPES):  # stamped on the workload's last scrapes, so both fill the same windows
            t_ms = end_ms - (SELF_SCRAPES - 1 - k) * INTERVAL_MS
            # some traffic between scrapes, so counters and histograms move
            api(gw.base_url, "/api/v1/query", {"query": "sum(rate(up[1m]))", "time": t_ms / 1000})
            api(gw.base_url, "/api/v1/query_range", {"query": "up", "start": t_ms / 1000 - 600,
                                                     "end": t_ms / 1000, "step": 60})
            sent += [tuple(map(tuple, labels)) for labels in
                     scrape_into([gw.base_url], gw.base_url, "metricsgw", instance, t_ms)]
        rules = load_rule_files([str(p) for p in rule_files])
        reference = [dict(lb) for lb in dict.fromkeys(sent) if rules.apply(lb) is not None]
        status, body = api(gw.base_url, "/api/v1/query", {"query": 'count({__name__=~".+"})', "time": end_ms / 1000})
        stored = int(body["data"]["result"][0]["value"][1])
        assert stored == len(reference), f"stored {stored} series, the relabel rules keep {len(reference)}"
        return Served(gw, end_ms / 1000, reference, workload)
    except BaseException:
        gw.stop()
        raise

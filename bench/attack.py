"""Expensive-request benchmark: what an unbounded metadata or query request costs each server.

    python -m bench.attack --url http://127.0.0.1:9201 [--pid 1234] [--timeout 30s]

Each request below is one that took real deployments down (Grafana's `{le!=""}` series call with
no time range, label value scans, match-everything queries). For each we record the status,
the time to answer (or the client timeout), the response size and, when --pid is given, the
server's RSS growth and CPU seconds while it ran. The client gives up at --timeout and
closes the connection, so a server that keeps working after the client left shows up in the
CPU figure taken --linger seconds later.
"""

from __future__ import annotations

import argparse
import socket
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

from metricsgw.config import parse_duration

# (name, method, path, params)
ATTACKS = (
    ("series le!=\"\" no range", "GET", "/api/v1/series", [("match[]", '{le!=""}')]),
    ("series all names, limit 40000", "GET", "/api/v1/series", [("match[]", '{__name__!=""}'), ("limit", "40000")]),
    ("series regex any", "POST", "/api/v1/series", [("match[]", '{__name__=~".+"}')]),
    ("label names", "GET", "/api/v1/labels", []),
    ("__name__ values", "GET", "/api/v1/label/__name__/values", []),
    ("pod values", "GET", "/api/v1/label/pod/values", []),
    ("UUID values under le", "GET", "/api/v1/label/UUID/values", [("match[]", '{le!=""}')]),
    ("metadata", "GET", "/api/v1/metadata", []),
    ("instant match-all", "POST", "/api/v1/query", [("query", '{__name__=~".+"}')]),
    ("count by name", "POST", "/api/v1/query", [("query", 'count by (__name__) ({__name__=~".+"})')]),
    ("buckets over 1d", "POST", "/api/v1/query",
     [("query", "sum by (le) (rate(apiserver_request_duration_seconds_bucket[1d]))")]),
)


@dataclass
class AttackResult:
    name: str
    status: int | str
    seconds: float
    bytes: int
    rss_growth: int | None = None
    cpu_s: float | None = None


def _send(base: str, method: str, path: str, params: list, timeout_s: float) -> tuple[int | str, int]:
    query = urllib.parse.urlencode(params)
    if method == "GET":
        req = urllib.request.Request(f"{base}{path}?{query}" if query else base + path)
    else:
        req = urllib.request.Request(base + path, data=query.encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, len(r.read())
    except urllib.error.HTTPError as e:
        return e.code, len(e.read())
    except (socket.timeout, TimeoutError):
        return "client timeout", 0
    except urllib.error.URLError as e:
        return f"error: {e.reason}", 0


def run(base: str, pid: int | None = None, timeout_s: float = 30.0, linger_s: float = 2.0,
        attacks=ATTACKS) -> list[AttackResult]:
    proc = None
    if pid:
        import psutil

        proc = psutil.Process(pid)
    out = []
    for name, method, path, params in attacks:
        if proc:
            rss0, cpu0 = proc.memory_info().rss, sum(proc.cpu_times()[:2])
        t0 = time.perf_counter()
        status, size = _send(base, method, path, params, timeout_s)
        r = AttackResult(name, status, time.perf_counter() - t0, size)
        if proc:
            time.sleep(linger_s)  # work that goes on after the client left still counts
            r.rss_growth = proc.memory_info().rss - rss0
            r.cpu_s = sum(proc.cpu_times()[:2]) - cpu0
        out.append(r)
    return out


def table(results: list[AttackResult]) -> str:
    lines = ["| request | status | seconds | bytes | RSS growth MiB | server CPU s |", "|---|---|---|---|---|---|"]
    for r in results:
        rss = f"{r.rss_growth / 2**20:.0f}" if r.rss_growth is not None else "-"
        cpu = f"{r.cpu_s:.2f}" if r.cpu_s is not None else "-"
        lines.append(f"| {r.name} | {r.status} | {r.seconds:.2f} | {r.bytes:,} | {rss} | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="server base URL (loopback)")
    ap.add_argument("--pid", type=int, help="server pid, to measure its RSS and CPU")
    ap.add_argument("--timeout", default="30s", help="client timeout per request")
    ap.add_argument("--linger", default="2s", help="wait after each request before reading CPU/RSS")
    a = ap.parse_args(argv)
    from bench.load import check_loopback

    check_loopback(a.url)
    print(table(run(a.url, a.pid, parse_duration(a.timeout), parse_duration(a.linger))))


if __name__ == "__main__":
    main()

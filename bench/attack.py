"""Expensive-request benchmark: what the requests that took real deployments down cost each server.

    python -m bench.attack --nodes 300 [--scrapes 4] [--timeout 120s] [--metricsgw-flag=--query.timeout=30s]
    python -m bench.attack --url http://127.0.0.1:9201 --pid 1234   # an already running server
    python -m bench.attack --nodes 7500 --scrapes 2 --only "cardinality page"   # some of the requests

With --nodes, the same GPU-cluster workload (testkit/workload.py) is remote-written, with the
same pre-encoded requests, into metricsgw and into real Prometheus (each in a fresh data dir,
loopback only), and every request below is sent to each server in turn: Grafana's `{le!=""}`
series call with no time range (plain, and from clients that hang up after 1 s), label calls
without matchers, the values of a high-cardinality label, and heavy queries.

Per case and server: HTTP status, time to answer (or the client timeout), response bytes, and
the server's RSS before / peak / after and CPU seconds, taken over the call plus --linger
seconds, so work that goes on after a client left shows up in the CPU figure. Prints a
Markdown table and writes JSON to bench/results/attack-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path


from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import Plan, check_loopback, prepare, send_all

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20


@dataclass(frozen=True)
class Attack:
    name: str
    method: str
    path: str
    params: tuple  # ((key, value), ...); "{start}" / "{end}" are filled from the loaded data
    hang_up_after_s: float = 0.0  # > 0: clients that leave after this long (no answer is read)
    clients: int = 1
    gzip: bool = False  # ask for a gzipped answer, as Grafana's backend does; bytes are then the compressed size


ALL = '{__name__=~".+"}'
RANGE = (("start", "{start}"), ("end", "{end}"), ("step", "15"))
ATTACKS = (
    Attack('series {le!=""}, no range', "GET", "/api/v1/series", (("match[]", '{le!=""}'),)),
    Attack('series {le!=""}, 4 clients leave after 1s', "GET", "/api/v1/series", (("match[]", '{le!=""}'),),
           hang_up_after_s=1.0, clients=4),
    Attack("series " + ALL, "POST", "/api/v1/series", (("match[]", ALL),)),
    Attack("series " + ALL + ", 4 clients leave after 1s", "POST", "/api/v1/series", (("match[]", ALL),),
           hang_up_after_s=1.0, clients=4),
    Attack('Grafana 12: series {__name__!=""} limit=40000', "GET", "/api/v1/series",
           (("match[]", '{__name__!=""}'), ("limit", "40000"))),
    Attack('Grafana 12: series {__name__!=""} limit=40000, gzip', "GET", "/api/v1/series",
           (("match[]", '{__name__!=""}'), ("limit", "40000")), gzip=True),
    Attack("label names", "GET", "/api/v1/labels", ()),
    Attack("__name__ values", "GET", "/api/v1/label/__name__/values", ()),
    Attack("pod values", "GET", "/api/v1/label/pod/values", ()),
    Attack("UUID values", "GET", "/api/v1/label/UUID/values", ()),
    Attack("metadata", "GET", "/api/v1/metadata", ()),
    Attack("instant " + ALL, "POST", "/api/v1/query", (("query", ALL), ("time", "{end}"))),
    Attack("range count(" + ALL + ")", "POST", "/api/v1/query_range", (("query", f"count({ALL})"),) + RANGE),
    Attack("range count(" + ALL + "), 4 clients leave after 1s", "POST", "/api/v1/query_range",
           (("query", f"count({ALL})"),) + RANGE, hang_up_after_s=1.0, clients=4),
    Attack("range sum by (le) (rate(apiserver buckets[5m]))", "POST", "/api/v1/query_range",
           (("query", "sum by (le) (rate(apiserver_request_duration_seconds_bucket[5m]))"),) + RANGE),
    Attack("range sum by (mode) (rate(node_cpu_seconds_total[5m]))", "POST", "/api/v1/query_range",
           (("query", "sum by (mode) (rate(node_cpu_seconds_total[5m]))"),) + RANGE),
    # The Cardinality page's calls (Prometheus 2.42 answers its head's figures whatever the parameters)
    Attack("cardinality page: TSDB status of the head", "GET", "/api/v1/status/tsdb", ()),
    Attack("cardinality page: TSDB status over the load's window", "GET", "/api/v1/status/tsdb",
           (("start", "{start}"), ("end", "{end}"))),
    Attack("cardinality page: a metric's labels, by Hostname", "GET", "/api/v1/status/tsdb",
           (("match[]", "DCGM_FI_DEV_GPU_UTIL"), ("focusLabel", "Hostname"))),
)


@dataclass
class Result:
    server: str
    attack: str
    status: str
    seconds: float
    bytes: int
    rss_before_mib: float | None = None
    rss_peak_mib: float | None = None
    rss_after_mib: float | None = None
    cpu_s: float | None = None
    error: str = ""
    warning: str = ""  # the first `warnings` entry of a 200 answer (truncation)
    results: int | None = None  # entries in `data` (series, names, values) or in `data.result`


def _params(attack: Attack, window: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, window.get(v.strip("{}"), v) if v in ("{start}", "{end}") else v) for k, v in attack.params]


def send(base: str, attack: Attack, window: dict[str, str], timeout_s: float) -> tuple[str, bytes | int, str]:
    """(status, response body or its size, error text); the whole call is bounded by timeout_s."""
    query = urllib.parse.urlencode(_params(attack, window))
    headers = {"Accept-Encoding": "gzip"} if attack.gzip else {}
    if attack.method == "GET":
        req = urllib.request.Request(f"{base}{attack.path}?{query}" if query else base + attack.path, headers=headers)
    else:
        req = urllib.request.Request(base + attack.path, data=query.encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **headers})
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            chunks = []
            while chunk := r.read(1 << 20):  # read in pieces so the total time stays bounded
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    return "client timeout", sum(map(len, chunks)), ""
            return str(r.status), b"".join(chunks), ""
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            err = json.loads(body).get("error", "")
        except ValueError:
            err = body[:200].decode(errors="replace")
        return str(e.code), len(body), err[:200]
    except (socket.timeout, TimeoutError):
        return "client timeout", 0, ""
    except (urllib.error.URLError, ConnectionError) as e:
        return "error", 0, str(getattr(e, "reason", e))[:200]


def hang_up(base: str, attack: Attack, window: dict[str, str]) -> None:
    """Send the request, wait, close the connection without reading (a client timing out)."""
    u = urllib.parse.urlparse(base)
    query = urllib.parse.urlencode(_params(attack, window))
    if attack.method == "GET":
        head, body = f"GET {attack.path}?{query} HTTP/1.1\r\n", b""
    else:
        body = query.encode()
        head = (f"POST {attack.path} HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(body)}\r\n")
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall((head + f"Host: {u.hostname}:{u.port}\r\nConnection: close\r\n\r\n").encode() + body)
        time.sleep(attack.hang_up_after_s)


def run_attack(server_name: str, base: str, pid: int | None, attack: Attack, window: dict[str, str],
               timeout_s: float, linger_s: float) -> Result:
    sampler = None
    if pid:
        rss0 = procs.tree_rss(pid)
        sampler = procs.ResourceSampler(pid, period_s=0.05).start()
    t0 = time.perf_counter()
    if attack.hang_up_after_s > 0:
        threads = [threading.Thread(target=hang_up, args=(base, attack, window)) for _ in range(attack.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        status, size, err = f"{attack.clients} clients left", 0, ""
    else:
        status, size, err = send(base, attack, window, timeout_s)
    res = Result(server_name, attack.name, status, time.perf_counter() - t0,
                 size if isinstance(size, int) else len(size), error=err)
    if isinstance(size, bytes):  # parsed after the clock stopped
        _describe(res, size)
    if sampler:
        time.sleep(linger_s)  # work that goes on after the answer (or after the client left) counts
        usage = sampler.stop()
        res.rss_before_mib, res.rss_peak_mib = rss0 / MiB, max(usage.rss_peak, rss0) / MiB
        res.rss_after_mib, res.cpu_s = usage.rss_last / MiB, usage.cpu_s
    return res


def _describe(res: Result, body: bytes) -> None:
    try:
        doc = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    except ValueError:
        return
    res.warning = (doc.get("warnings") or [""])[0][:60]
    data = doc.get("data")
    if isinstance(data, dict) and "result" in data:
        data = data["result"]
    res.results = len(data) if isinstance(data, (list, dict)) else None


def attack_server(name: str, base: str, pid: int | None, window: dict[str, str], timeout_s: float,
                  linger_s: float, attacks=ATTACKS) -> list[Result]:
    check_loopback(base)
    out = []
    for attack in attacks:
        procs.wait_idle(pid)  # the previous case's leftover work
        r = run_attack(name, base, pid, attack, window, timeout_s, linger_s)
        print(f"  {name:10s} {attack.name:55s} {r.status:>16s} {r.seconds:7.2f}s {r.bytes:>12,d} B"
              + (f"  RSS {r.rss_before_mib:.0f}->{r.rss_peak_mib:.0f}->{r.rss_after_mib:.0f} MiB"
                 f"  CPU {r.cpu_s:.2f}s" if r.cpu_s is not None else ""), flush=True)
        out.append(r)
    return out


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def table(results: list[Result]) -> str:
    lines = ["| request | server | status | seconds | bytes | results | RSS before / peak / after MiB "
             "| CPU s (+linger) | warning |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        cpu = "-" if r.cpu_s is None else f"{r.cpu_s:.2f}"
        n = "-" if r.results is None else f"{r.results:,}"
        lines.append(f"| {r.attack} | {r.server} | {r.status} | {r.seconds:.2f} | {r.bytes:,} | {n} | "
                     f"{_mib(r.rss_before_mib)} / {_mib(r.rss_peak_mib)} / {_mib(r.rss_after_mib)} | {cpu} | "
                     f"{r.warning or r.error[:60]} |")
    return "\n".join(lines)


def load_both(nodes: int, scrapes: int, work: Path, gw_flags: list[str]) -> tuple[dict, list[procs.Server], int]:
    end_ms = int(time.time() * 1000) // 15000 * 15000
    plan = Plan(nodes=nodes, duration_s=scrapes * 15.0, interval_s=15.0, connections=2, samples_per_request=5000,
                end_ms=end_ms)
    workload, preamble, shards = prepare(plan)
    window = {"start": f"{(end_ms - scrapes * 15000) / 1000 - 600:.3f}", "end": f"{end_ms / 1000:.3f}"}
    servers = [procs.start_metricsgw(work / "metricsgw", extra=gw_flags), procs.start_prometheus(work / "prometheus")]
    for srv in servers:
        srv.wait_ready()
        t0 = time.perf_counter()
        res = asyncio.run(send_all(srv.write_url, shards, time_limit_s=600.0, preamble=preamble))
        print(f"loaded {srv.name}: {res.samples_ok:,} samples of {workload.num_series:,} series "
              f"in {time.perf_counter() - t0:.1f}s ({res.requests_failed} requests failed)", flush=True)
    return window, servers, workload.num_series


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, help="load this many GPU nodes into metricsgw and Prometheus")
    ap.add_argument("--scrapes", type=int, default=4, help="scrapes (15 s apart) of every series")
    ap.add_argument("--url", help="instead: attack this already running server (loopback)")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, to measure RSS and CPU")
    ap.add_argument("--timeout", default="120s", help="client timeout per request")
    ap.add_argument("--linger", default="2s", help="keep measuring CPU/RSS this long after each request")
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra metricsgw flag (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the requests whose name contains this (repeatable), e.g. 'cardinality page'")
    a = ap.parse_args(argv)
    attacks = [x for x in ATTACKS if not a.only or any(o in x.name for o in a.only)]
    if not attacks:
        ap.error(f"no request's name contains {a.only}")
    timeout_s, linger_s = parse_duration(a.timeout), parse_duration(a.linger)
    meta: dict = {"timeout_s": timeout_s, "linger_s": linger_s}
    if a.url:
        now = time.time()
        window = {"start": f"{now - 3600:.3f}", "end": f"{now:.3f}"}
        results = attack_server("server", a.url, a.pid, window, timeout_s, linger_s, attacks)
    elif a.nodes:
        work = Path(tempfile.mkdtemp(prefix="metricsgw-attack-"))
        servers = []
        try:
            window, servers, num_series = load_both(a.nodes, a.scrapes, work, a.metricsgw_flag)
            meta |= {"nodes": a.nodes, "series": num_series, "scrapes": a.scrapes, "metricsgw_flags": a.metricsgw_flag}
            results = []
            for srv in servers:
                results += attack_server(srv.name, srv.base_url, srv.pid, window, timeout_s, linger_s, attacks)
        finally:
            for srv in servers:
                srv.stop()
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
        results.sort(key=lambda r: [x.name for x in ATTACKS].index(r.attack))
    else:
        ap.error("give --nodes N (load and compare both servers) or --url")
    print()
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"attack-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

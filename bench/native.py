"""Native histograms side by side: metricsgw and Prometheus 2.42 (--enable-feature=native-histograms).

    python -m bench.native --series 200 --scrapes 120

Per server: remote-write ``scrapes`` requests of ``series`` integer histograms each (schema 3, about
40 populated buckets in two spans, growing like a latency histogram, 15 s apart, ending now); time the
load (wall, and the server's CPU seconds); stop the server cleanly (metricsgw flushes to Parquet) and
measure its data dir per histogram; start it again and time range queries over the whole window
(median of ``--repeat``), checking both servers give the same answer. The machine is shared: read
the ratios first.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import statistics
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import snappy

from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from testkit import procs

INTERVAL_MS = 15_000
QUERIES = ["histogram_quantile(0.99, sum(rate(nh_bench[5m])))", "sum by (pod) (rate(nh_bench[5m]))",
           "histogram_count(nh_bench)", "histogram_quantile(0.5, nh_bench)"]


def request(series: int, k: int, t: int, part: int = 0, parts: int = 1) -> bytes:
    """Scrape k of every series (of those ``s % parts == part``): counts grow by a seeded, bucket-dependent amount."""
    req = v1pb.WriteRequest()
    for s in range(part, series, parts):
        ts = req.timeseries.add()
        for name, value in (("__name__", "nh_bench"), ("instance", f"i{s}"), ("pod", f"p{s % 10}")):
            ts.labels.add(name=name, value=value)
        h = ts.histograms.add(schema=3, zero_threshold=1e-128, timestamp=t, sum=0.0)
        counts = [(k + 1) * (1 + (b * 7 + s) % 13) for b in range(40)]
        h.positive_spans.add(offset=-5, length=24)
        h.positive_spans.add(offset=3, length=16)
        h.positive_deltas.extend([counts[0]] + [b - a for a, b in zip(counts, counts[1:])])
        h.zero_count_int = k
        h.count_int = sum(counts) + k
        h.sum = 0.001 * sum(c * (b + 1) for b, c in enumerate(counts))
    return snappy.compress(req.SerializeToString())


class _Sender:
    """Remote write over one kept-alive connection, as Prometheus's remote_write sends (each shard of its queue
    reuses its connection); the same client for both servers."""

    HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
               "X-Prometheus-Remote-Write-Version": "0.1.0"}

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.path = parts.path
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def post(self, body: bytes) -> None:
        self.conn.request("POST", self.path, body=body, headers=self.HEADERS)
        r = self.conn.getresponse()
        r.read()
        if r.status // 100 != 2:
            raise RuntimeError(f"{self.path}: {r.status}")

    def close(self) -> None:
        self.conn.close()


def _query(base: str, query: str, start_s: float, end_s: float) -> tuple[float, dict]:
    params = urllib.parse.urlencode({"query": query, "start": start_s, "end": end_s, "step": "60s"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=300) as r:
        body = json.loads(r.read())
    return time.perf_counter() - t0, body


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _start(kind: str, work: Path, port: int, gw_flags: Sequence[str] = ()) -> procs.Server:
    if kind == "prometheus":
        return procs.start_prometheus(work, port=port, extra=["--enable-feature=native-histograms"])
    return procs.start_metricsgw(work, port=port, extra=["--query.promql-compat=2", *gw_flags])  # answers meet 2.42's


def plan(series: int, scrapes: int, connections: int, end_ms: int) -> tuple[list[list[bytes]], int, float, float]:
    """The requests of each connection in send order, the histograms in all, and the window they span (s)."""
    streams = [[request(series, k, end_ms - (scrapes - 1 - k) * INTERVAL_MS, part, connections)
                for k in range(scrapes)] for part in range(connections)]
    return streams, series * scrapes, (end_ms - (scrapes - 1) * INTERVAL_MS) / 1000, end_ms / 1000


def _send_all(url: str, bodies: list[bytes], errors: list) -> None:
    sender = _Sender(url)
    try:
        for body in bodies:
            sender.post(body)
    except Exception as err:  # noqa: BLE001 - reported by the caller
        errors.append(err)
    finally:
        sender.close()


def _load(server: procs.Server, streams: list[list[bytes]]) -> dict:
    """Each stream over its own kept-alive connection, all at once (as Prometheus' remote-write shards: a series
    always in the same shard, so in time order), into a server that has finished starting: a load takes under a
    second, and the 0.3-0.4 s of CPU metricsgw's query process spends loading its kernels right after ready
    doubled its CPU per request (1.15-1.65 ms against 0.75 settled, 2026-12-07)."""
    procs.wait_idle(server.pid, max_s=30.0, window_s=0.25, below=0.05)
    errors: list = []
    threads = [threading.Thread(target=_send_all, args=(server.write_url, bodies, errors)) for bodies in streams]
    cpu0, t0 = procs.tree_cpu_s(server.pid), time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out = {"load_s": time.perf_counter() - t0}
    if errors:
        raise errors[0]
    out["load_cpu_s"] = procs.tree_cpu_s(server.pid) - cpu0
    return out


def load_round(kind: str, streams: list[list[bytes]], work: Path, gw_flags: Sequence[str] = ()) -> dict:
    """One load into a fresh server, nothing else measured (the rounds that give the load's median)."""
    server = _start(kind, work, procs.free_port(), gw_flags)
    try:
        server.wait_ready()
        return _load(server, streams)
    finally:
        server.stop()


def run_one(kind: str, streams: list[list[bytes]], histograms: int, start_s: float, end_s: float, work: Path,
            repeat: int, gw_flags: Sequence[str] = ()) -> dict:
    port = procs.free_port()
    server = _start(kind, work, port, gw_flags)
    out: dict = {"histograms": histograms}
    try:
        server.wait_ready()
        out.update(_load(server, streams))
    finally:
        server.stop()  # a clean stop: metricsgw writes its head to Parquet
    out["disk_bytes_per_histogram"] = _du(server.data_dir) / out["histograms"]
    out["disk_by_dir"] = {p.name: _du(p) if p.is_dir() else p.stat().st_size for p in server.data_dir.iterdir()}
    native = server.data_dir / "table" / "histograms"
    if native.exists():
        out["parquet_bytes_per_histogram"] = _du(native) / out["histograms"]
    server = _start(kind, work, port, gw_flags)
    try:
        server.wait_ready()
        out["queries"] = {}
        for q in QUERIES:
            times, answer = [], None
            for _ in range(repeat):
                dt, answer = _query(server.base_url, q, start_s, end_s)
                times.append(dt)
            out["queries"][q] = {"median_s": statistics.median(times), "answer": answer["data"]}
    finally:
        server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--scrapes", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--connections", type=int, default=1,
                    help="remote-write connections at once, each with its share of the series (Prometheus' shards)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="loads into fresh servers, the two taking turns; the histograms/s reported is their median "
                         "(a load takes well under a second: one alone moves by a third with the machine)")
    ap.add_argument("--metricsgw-flag", action="append", default=[],
                    help="extra flag for metricsgw (e.g. --metricsgw-flag=--storage.wal-fsync=false)")
    args = ap.parse_args()
    end_ms = int(time.time() * 1000) // INTERVAL_MS * INTERVAL_MS
    streams, histograms, start_s, end_s = plan(args.series, args.scrapes, args.connections, end_ms)
    kinds = ("metricsgw", "prometheus")
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-native-") as tmp:
        for r in range(args.rounds - 1):
            for kind in kinds:
                rates[kind].append(histograms / load_round(kind, streams, Path(tmp) / f"{kind}-{r}",
                                                                   args.metricsgw_flag)["load_s"])
        for kind in kinds:  # the last round also measures the disk and the queries
            results[kind] = run_one(kind, streams, histograms, start_s, end_s, Path(tmp) / kind, args.repeat,
                                    args.metricsgw_flag)
            rates[kind].append(histograms / results[kind]["load_s"])
    gw, prom = results["metricsgw"], results["prometheus"]
    print(f"{args.series} series x {args.scrapes} scrapes = {histograms} histograms of 40 buckets, "
          f"{args.connections} connection(s), {args.rounds} rounds, metricsgw flags {args.metricsgw_flag}")
    print(f"{'':44} {'metricsgw':>12} {'prometheus':>12}")
    for key in ("load_s", "load_cpu_s", "disk_bytes_per_histogram"):
        print(f"{key + ' (last round)' if key != 'disk_bytes_per_histogram' else key:44} {gw[key]:12.2f} {prom[key]:12.2f}")
    gw_rate, prom_rate = statistics.median(rates["metricsgw"]), statistics.median(rates["prometheus"])
    print(f"{'histograms/s (load, median of rounds)':44} {gw_rate:12.0f} {prom_rate:12.0f}   {gw_rate / prom_rate:.2f}x")
    print(f"{'histograms/s by round':44} {' '.join(f'{x:.0f}' for x in rates['metricsgw'])} | "
          f"{' '.join(f'{x:.0f}' for x in rates['prometheus'])}")
    print(f"{'data dir bytes, by top folder (metricsgw)':44} {gw['disk_by_dir']}")
    if "parquet_bytes_per_histogram" in gw:
        print(f"{'parquet bytes per histogram (metricsgw)':44} {gw['parquet_bytes_per_histogram']:12.2f}")
    for q in QUERIES:
        a, b = gw["queries"][q], prom["queries"][q]
        same = "same" if _same(a["answer"], b["answer"]) else "DIFFERENT"
        print(f"{q[:44]:44} {a['median_s']:11.3f}s {b['median_s']:11.3f}s  {same}")


def _same(a: dict, b: dict) -> bool:
    def norm(d):
        return sorted((json.dumps(r["metric"], sort_keys=True), json.dumps(r.get("values")),
                       json.dumps(r.get("histograms"))) for r in d["result"])
    return norm(a) == norm(b) or _close(a, b)


def _close(a: dict, b: dict) -> bool:
    """Floats equal within 1e-9 (histogram_quantile interpolates in another order of operations)."""
    ra = {json.dumps(r["metric"], sort_keys=True): r for r in a["result"]}
    rb = {json.dumps(r["metric"], sort_keys=True): r for r in b["result"]}
    if ra.keys() != rb.keys():
        return False
    for k in ra:
        va, vb = ra[k].get("values", []), rb[k].get("values", [])
        if len(va) != len(vb) or any(ta != tb or not math.isclose(float(x), float(y), rel_tol=1e-9)
                                     for (ta, x), (tb, y) in zip(va, vb)):
            return False
        if ra[k].get("histograms") != rb[k].get("histograms"):
            return False
    return True


if __name__ == "__main__":
    main()

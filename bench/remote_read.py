"""Remote read side by side: the same series in metricsgw and Prometheus, the same ReadRequests.

    python -m bench.remote_read --series 2000 --samples 240

Writes ``--series`` gauges of ``--samples`` samples each (15 s apart, ending now, so Prometheus's
head takes them) into both servers by remote write, then times each read ``--repeat`` times and
prints a Markdown table: best wall time, samples/s and bytes of the answer, for SAMPLES and
STREAMED_XOR_CHUNKS, reading everything and reading a narrow selection. Wall times include the
client's HTTP round trip; both servers share the machine with the client.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from metricsgw.remote import codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from testkit.procs import start_metricsgw, start_prometheus
from tests.e2e.client import remote_write
from tests.remote.read_client import build_request, post

INTERVAL_MS = 15_000
WRITE_BATCH = 200  # series per remote-write request


def series_data(n_series: int, n_samples: int, end_ms: int):
    t = end_ms - INTERVAL_MS * np.arange(n_samples)[::-1]
    for i in range(n_series):
        v = 50 + 10 * np.sin(np.arange(n_samples) / 11.0 + i) + (i % 7)
        yield ([("__name__", f"rr_bench_{i % 10}"), ("instance", f"node-{i:05d}"), ("job", "bench")],
               list(zip(t.tolist(), np.round(v, 2).tolist())))


def load(url: str, n_series: int, n_samples: int, end_ms: int) -> None:
    batch = []
    for s in series_data(n_series, n_samples, end_ms):
        batch.append(s)
        if len(batch) == WRITE_BATCH:
            status, text, _ = remote_write(url, codec.encode_v1(batch), timeout=120)
            assert status == 204, text
            batch = []
    if batch:
        status, text, _ = remote_write(url, codec.encode_v1(batch), timeout=120)
        assert status == 204, text


def time_read(url: str, body: bytes, repeat: int) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        status, _, raw = post(url + "/api/v1/read", body, timeout=600)
        took = time.perf_counter() - t0
        assert status == 200, raw[:300]
        best, size = min(best, took), len(raw)
    return best, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    end_ms = int(time.time() * 1000) // INTERVAL_MS * INTERVAL_MS
    start_ms = end_ms - INTERVAL_MS * args.samples
    reads = {
        "everything": [("__name__", "=~", "rr_bench_.*")],
        "one metric, 10 of its series": [("__name__", "=", "rr_bench_3"), ("instance", "=~", "node-000.*")],
    }
    with tempfile.TemporaryDirectory() as work:
        servers = {"metricsgw": start_metricsgw(Path(work) / "gw"), "prometheus": start_prometheus(Path(work) / "prom")}
        try:
            for s in servers.values():
                s.wait_ready()
                load(s.base_url, args.series, args.samples, end_ms)
            print(f"{args.series} series x {args.samples} samples; best of {args.repeat}; "
                  "client and both servers on one machine\n")
            print("| read | response | metricsgw s | Prometheus s | ratio | metricsgw bytes | Prometheus bytes |")
            print("|---|---|---|---|---|---|---|")
            for name, matchers in reads.items():
                for rname, rtype in (("SAMPLES", pb.ReadRequest.SAMPLES),
                                     ("STREAMED_XOR_CHUNKS", pb.ReadRequest.STREAMED_XOR_CHUNKS)):
                    body = build_request([{"matchers": matchers, "start": start_ms, "end": end_ms}], [rtype])
                    (g, gb), (p, pbytes) = (time_read(servers[k].base_url, body, args.repeat)
                                            for k in ("metricsgw", "prometheus"))
                    print(f"| {name} | {rname} | {g:.3f} | {p:.3f} | {g / p:.1f}x | {gb:,} | {pbytes:,} |")
        finally:
            for s in servers.values():
                s.stop()


if __name__ == "__main__":
    main()

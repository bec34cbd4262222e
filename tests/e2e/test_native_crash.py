"""kill -9 loses no acknowledged native histogram or exemplar and replays none twice: killed by the
test right after the acknowledgements (all in the WAL), or by the server itself at a step of its
first flush (files written but not committed; committed but the WAL not yet truncated)."""

from __future__ import annotations

import subprocess
import time

import pytest

from metricsgw.promql.native import decode, to_json
from metricsgw.storage import crashpoints
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.native_requests import float_histogram, histogram_bytes, int_histogram, v1_request, v2_request

REQUESTS = 30


def _series(k: int, t: int) -> list[dict]:
    return [{"labels": [("__name__", "crash_nh"), ("kind", "int")], "histograms": [int_histogram(t, scale=k + 1)]},
            {"labels": [("__name__", "crash_nh"), ("kind", "float")], "histograms": [float_histogram(t, k + 0.5)],
             "exemplars": [([("trace_id", f"t{k}")], float(k), t)]}]


@pytest.mark.parametrize("crash_at", [None, "flush.files", "flush.marker"])
def test_acknowledged_histograms_and_exemplars_survive_kill_9(tmp_path, monkeypatch, crash_at):
    base_ms = (int(time.time()) - 3600) * 1000
    if crash_at:
        monkeypatch.setenv(crashpoints.ENV, f"{crash_at}:1")
    flush = "1s" if crash_at else "1h"  # without a crash point nothing is flushed before the kill
    # one process: a crash point must kill the gateway, not a child its front would restart
    server = start_metricsgw(tmp_path, extra=[f"--storage.flush-interval={flush}", "--server.single-process"])
    want: dict[tuple[str, int], dict] = {}
    exemplars: list[tuple[int, str]] = []
    try:
        server.wait_ready()
        for k in range(REQUESTS):
            t = base_ms + k * 1000
            series = _series(k, t)
            body = v2_request(series) if k % 2 else v1_request(series)
            try:
                status, _, _ = remote_write(server.base_url, body, version=2 if k % 2 else 1)
            except OSError:  # the server died mid-request: this one was never acknowledged
                break
            if status != 204:
                break  # the server killed itself mid-way: what was acknowledged before must survive
            for s in series:
                want[(dict(s["labels"])["kind"], t)] = to_json(decode(histogram_bytes(s["histograms"][0])))
            exemplars.append((t, f"t{k}"))
        assert len(want) >= 2, "nothing was acknowledged before the crash"
        if crash_at:
            server.proc.wait(timeout=60)  # the server kills itself at its first flush
        else:
            server.proc.kill()
            server.proc.wait()
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server did not reach {crash_at}")
    finally:
        server.stop()
    monkeypatch.delenv(crashpoints.ENV, raising=False)
    restarted = start_metricsgw(tmp_path, port=int(server.base_url.rsplit(":", 1)[1]),
                                extra=["--server.single-process"])
    try:
        restarted.wait_ready()
        end_s = (base_ms + REQUESTS * 1000) / 1000
        status, body = api(restarted.base_url, "/api/v1/query_range",
                           {"query": "crash_nh", "start": base_ms / 1000, "end": end_s, "step": "1s"})
        assert status == 200, body
        # A histogram stays selected for 5 minutes after its sample: read each at its own time only.
        got = {(r["metric"]["kind"], round(float(t) * 1000)): h for r in body["data"]["result"]
               for t, h in r["histograms"]}
        assert {k: got.get(k) for k in want} == want
        status, body = api(restarted.base_url, "/api/v1/query_exemplars",
                           {"query": "crash_nh", "start": base_ms / 1000, "end": end_s})
        stored = [(round(float(e["timestamp"]) * 1000), e["labels"]["trace_id"]) for s in body["data"]
                  for e in s["exemplars"]]
        assert stored[: len(exemplars)] == exemplars and len(stored) in (len(exemplars), len(exemplars) + 1)
    finally:
        restarted.stop()

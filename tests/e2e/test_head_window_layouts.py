"""The head window over the process layouts (one process; the default with ingest shards and a query process):
series not written for longer than --storage.head-window leave memory and /api/v1/status/tsdb, queries over their
old range still find them, and one written again comes back. Old series are written with timestamps half an hour
back, so nothing waits for a window to pass: the tests wait only for the flusher's next passes (every second here)."""

from __future__ import annotations

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import http_get, start_metricsgw
from tests.dashboards.loading import aligned_now_ms
from tests.e2e.client import api, remote_write
from tests.e2e.procs_helpers import wait_for

LAYOUTS = {"single": ["--server.single-process"], "default": ["--ingest.shards=2", "--query.processes=1"]}
FLAGS = ["--storage.head-window=10m", "--storage.flush-interval=1s", "--storage.follow-interval=1s"]
MINUTE_MS = 60_000
OLD_PODS, LIVE_PODS = 30, 8


def _write(url: str, pods: range, t_ms: int, name: str) -> None:
    body = encode_v1([([("__name__", name), ("pod", f"p{i}")], [(t_ms, float(i))]) for i in pods])
    status, text, _ = remote_write(url, body)
    assert status == 204, text


def _num_series(url: str) -> int:
    status, out = api(url, "/api/v1/status/tsdb")
    assert status == 200
    return out["data"]["headStats"]["numSeries"]


def _series(url: str, match: str, start_ms: int, end_ms: int) -> list[dict]:
    status, out = api(url, "/api/v1/series", {"match[]": match, "start": start_ms / 1000, "end": end_ms / 1000})
    assert status == 200, out
    return sorted(out["data"], key=lambda s: s["pod"])


def _catalogs(url: str) -> list[float]:
    """The series each process's series table holds (/metrics: the processes' lines, by ``process``)."""
    _, text = http_get(f"{url}/metrics")
    return [float(line.rsplit(b" ", 1)[1]) for line in text.splitlines()
            if line.startswith(b"metricsgw_series_memory_entries{") and b'holder="catalog"' in line]


@pytest.fixture(scope="module", params=list(LAYOUTS))
def gateway(request, tmp_path_factory):
    """A gateway that took 30 pods' series half an hour back (one sample a minute for 10 minutes) and 8 live ones
    now, and forgot the old ones."""
    gw = start_metricsgw(tmp_path_factory.mktemp(f"head-window-{request.param}"),
                         extra=[*LAYOUTS[request.param], *FLAGS])
    try:
        gw.wait_ready()
        now_ms = aligned_now_ms()
        old_ms = now_ms - 40 * MINUTE_MS
        for k in range(10):
            _write(gw.base_url, range(OLD_PODS), old_ms + k * MINUTE_MS, "old_pod_cpu")
        _write(gw.base_url, range(LIVE_PODS), now_ms, "live_pod_cpu")
        wait_for(lambda: _num_series(gw.base_url) == LIVE_PODS, "the old series forgotten by the head", 120)
        wait_for(lambda: _catalogs(gw.base_url) and max(_catalogs(gw.base_url)) <= LIVE_PODS,
                 "every process's series table down to the live series", 120)
        yield gw, old_ms, now_ms
    finally:
        gw.stop()


def test_status_counts_the_head_windows_series(gateway):
    gw, _, _ = gateway
    status, out = api(gw.base_url, "/api/v1/status/tsdb")
    assert [m["name"] for m in out["data"]["seriesCountByMetricName"]] == ["live_pod_cpu"]
    _, text = http_get(f"{gw.base_url}/metrics")
    lines = [line for line in text.splitlines() if line.startswith(b"metricsgw_series_memory_bytes{")]
    for holder in (b"catalog", b"archive", b"ingest_cache"):
        assert any(b'holder="' + holder + b'"' in line for line in lines), holder
    assert b"metricsgw_query_sample_cache_bytes" in text
    in_use = [line for line in text.splitlines() if line.startswith(b'metricsgw_memory_bytes{') and b'part="malloc_in_use"' in line]
    assert in_use and all(float(line.rsplit(b" ", 1)[1]) > 0 for line in in_use)


def test_queries_over_the_old_range_still_find_the_forgotten_series(gateway):
    gw, old_ms, now_ms = gateway
    assert len(_series(gw.base_url, "old_pod_cpu", old_ms, now_ms)) == OLD_PODS
    assert _series(gw.base_url, "old_pod_cpu", now_ms - 5 * MINUTE_MS, now_ms) == []
    status, out = api(gw.base_url, "/api/v1/query_range", {"query": "sum(old_pod_cpu)", "start": old_ms / 1000,
                                                            "end": (old_ms + 9 * MINUTE_MS) / 1000, "step": 60})
    assert status == 200
    assert [float(v) for _, v in out["data"]["result"][0]["values"]] == [float(sum(range(OLD_PODS)))] * 10
    status, out = api(gw.base_url, "/api/v1/label/pod/values", {"start": old_ms / 1000, "end": now_ms / 1000})
    assert len(out["data"]) == OLD_PODS


def test_a_forgotten_series_written_again_comes_back(gateway):
    gw, old_ms, now_ms = gateway
    _write(gw.base_url, range(3), now_ms + 1000, "old_pod_cpu")
    wait_for(lambda: _num_series(gw.base_url) == LIVE_PODS + 3, "three old series back in the head", 60)
    wait_for(lambda: len(_series(gw.base_url, "old_pod_cpu", now_ms, now_ms + 2000)) == 3, "back in queries", 60)
    status, out = api(gw.base_url, "/api/v1/query_range", {"query": 'old_pod_cpu{pod="p1"}', "start": old_ms / 1000,
                                                            "end": (now_ms + 60_000) / 1000, "step": 60})
    values = out["data"]["result"][0]["values"]
    # 10 minutes, 4 steps of lookback (Prometheus 3's is left-open: the step exactly 5 m after the last sample is
    # empty), then its return.
    assert len(values) == 15 and all(float(v) == 1.0 for _, v in values)

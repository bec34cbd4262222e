"""The per-query memory budget on a real server: a query that must hold more than
--query.max-memory-per-query is refused with 422 naming it; an aggregation over as many samples
is answered, a batch of series at a time; the memory goes back to the pool after each query."""

from __future__ import annotations

from metricsgw.limits.memory import MemoryShares
from tests.guard.conftest import server_fixture
from tests.guard.helpers import metric, timed_api

PER_QUERY = 8 << 20

server = server_fixture([f"--query.max-memory-per-query={PER_QUERY}", "--query.max-memory=512MiB"])


def _range(loaded, query: str) -> dict:
    return {"query": query, "start": loaded.start_ms / 1000 - 600, "end": loaded.end_s, "step": "15"}


def test_a_query_over_the_per_query_bytes_is_422_naming_the_setting(server, loaded):
    # every one of the ~202k series at 43 steps: far more than 8 MiB of points
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, 'count({__name__=~".+"})'), method="POST")
    assert status == 422, body
    assert body["errorType"] == "execution"
    assert "--query.max-memory-per-query" in body["error"], body["error"]
    assert metric(server.base_url, "metricsgw_query_memory_bytes") == 0  # given back


def test_an_aggregation_of_one_metric_is_answered_within_it(server, loaded):
    # node_cpu_seconds_total: 33,472 series x 43 steps of rate = 1.4M points (~23 MiB) held at
    # once if evaluated whole; summed batch by batch it stays under 8 MiB
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, "sum by (mode) (rate(node_cpu_seconds_total[5m]))"), method="POST")
    assert status == 200, body
    assert len(body["data"]["result"]) == 8
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, "rate(node_cpu_seconds_total[5m])"), method="POST")
    assert status == 422 and "--query.max-memory-per-query" in body["error"], body
    assert metric(server.base_url, "metricsgw_query_memory_bytes") == 0
    # 512 MiB less DuckDB's, the caches' and the archive's shares (limits/memory.py; 304 MiB), in the process that
    # answers queries (the one query process: a shard has its own pool for the head reads it answers)
    assert metric(server.base_url, "metricsgw_query_memory_limit_bytes", process="querier-0") == \
        MemoryShares.of(512 << 20).queries == 304 << 20

"""--server.allocator: metricsgw starts itself again (same pid) with jemalloc preloaded, and its children inherit
it; glibc leaves it out. Why jemalloc: malloc.py and bench/RESULTS.md (the soak)."""

from __future__ import annotations

import json

import pytest

from metricsgw import malloc
from testkit import procs


def _has_jemalloc(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return malloc.JEMALLOC in f.read()


@pytest.fixture(autouse=True)
def _installed():
    if malloc.jemalloc_path() is None:
        pytest.skip("libjemalloc2 is not installed (make test installs it)")


@pytest.mark.parametrize("layout", [[], ["--server.single-process"]], ids=["default", "single-process"])
def test_auto_preloads_jemalloc_in_every_process(tmp_path, layout):
    gw = procs.start_metricsgw(tmp_path, extra=layout)
    try:
        gw.wait_ready()
        pids = [gw.pid] + [p.pid for p in procs.gateway_children(gw.pid).values()]
        assert len(pids) == (1 if layout else 3)
        assert all(_has_jemalloc(pid) for pid in pids)
        _, text = procs.http_get(gw.base_url + "/metrics")
        in_use = [line for line in text.splitlines() if line.startswith(b"metricsgw_memory_bytes{")
                  and b'part="malloc_in_use"' in line]
        assert in_use and all(float(line.rsplit(b" ", 1)[1]) > 0 for line in in_use)
        assert b"C allocator: jemalloc" in gw.log_path.read_bytes()
        _, body = procs.http_get(gw.base_url + "/api/v1/status/runtimeinfo")
        assert json.loads(body)["data"]["allocator"] == "jemalloc"
    finally:
        gw.stop()


def test_glibc_leaves_it_out(tmp_path):
    gw = procs.start_metricsgw(tmp_path, extra=["--server.allocator=glibc"])
    try:
        gw.wait_ready()
        pids = [gw.pid] + [p.pid for p in procs.gateway_children(gw.pid).values()]
        assert len(pids) == 3 and not any(_has_jemalloc(pid) for pid in pids)
    finally:
        gw.stop()

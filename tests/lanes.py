"""The fast lane: tests that start real processes are marked ``e2e``, so ``pytest -m "not e2e"`` skips them.

A test is e2e when its module is listed below (by path under tests/, a folder or a file). The list is kept
honest at run time: a test not marked e2e that starts a real process fails, naming the process, so a new
server-starting test cannot slow the fast lane down (or need the Debian packages) unnoticed. ``make test``
runs both lanes, so CI catches an unlisted one too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# path under tests/ -> what real process its tests start (a folder covers every file in it)
E2E = {
    "e2e/": "metricsgw serve, Prometheus, vmagent, vmalert, Alertmanager, node-exporter",
    "advisor/test_advisor_keeps_panels.py": "metricsgw serve twice, with and without the advisor's rules",
    "alerts/test_promtool.py": "promtool and vmalert on the shipped rules",
    "alerts/test_rules_on_metricsgw.py": "metricsgw serve loaded with crafted faults",
    "api/test_read_guard.py": "metricsgw serve",
    "bench/test_dataset.py": "metricsgw serve, Prometheus and VictoriaMetrics loaded with the bench data set",
    "bench/test_ingest_tool.py": "the bench against metricsgw serve",
    "bench/test_lifetime.py": "metricsgw serve under bench.lifetime, killed with SIGKILL and started again",
    "bench/test_native_bench.py": "metricsgw serve and Prometheus",
    "bench/test_restart.py": "metricsgw serve, killed and restarted",
    "bench/test_soak_tools.py": "metricsgw serve under the soak, attack and big-query benches",
    "cluster/test_busy_peer.py": "metricsgw serve as a peer",
    "cluster/test_peers.py": "metricsgw serve (the shared `served` gateway)",
    "conformance/test_corpus.py": "metricsgw serve in each process layout",
    "conformance/test_golden.py": "metricsgw serve in each process layout",
    "conformance/test_results_cache.py": "metricsgw serve, one process and with shards",
    "dashboards/": "metricsgw serve (the shared `served` gateway), promtool",
    "grafana/": "metricsgw serve and Prometheus side by side",
    "guard/": "metricsgw serve on a loaded copy of ~200k series",
    "ruler/": "metricsgw serve, vmalert, Prometheus as rulers",
    "rules/test_prometheus_oracle.py": "Prometheus as the oracle",
    "rules/test_promtool_oracle.py": "promtool as the oracle",
    "rules/test_shipped_rules.py": "promtool",
    "storage/test_races.py": "metricsgw serve",
    "storage/files/test_table_s3.py": "moto_server (an S3 server)",
    "test_docs.py::test_bad_flag_value_stops_start_up_naming_it": "metricsgw serve (it stops at the bad flag)",
    "testkit/test_wire_and_load.py": "metricsgw serve as the load's target",
    "ui/": "metricsgw serve (default layout behind basic auth, and one process) and Debian's chromium",
    "web/test_secured_clients.py": "metricsgw serve with TLS, Prometheus as a client",
    "web/test_webconfig.py": "metricsgw serve on bad files, promtool",
}

# Quick tools of the base system, not real processes: ctypes.util.find_library runs ldconfig, a test reads
# `make -n`, mounts a small tmpfs, or makes its certificates with openssl.
QUICK_TOOLS = {"ldconfig", "make", "mount", "umount", "openssl"}

TESTS = os.path.dirname(os.path.abspath(__file__))


def _listed(nodeid_under_tests: str) -> bool:
    return any(nodeid_under_tests.startswith(prefix) for prefix in E2E)


def pytest_collection_modifyitems(items):
    for item in items:
        rel = os.path.relpath(str(item.path), TESTS).replace(os.sep, "/")
        if _listed(rel + item.nodeid[len(item.nodeid.split("::")[0]):]):
            item.add_marker(pytest.mark.e2e)


def is_real_process(argv) -> bool:
    """A server or a tool of another project; our own Python running a script or a short CLI call is not."""
    argv = [os.fsdecode(a) for a in ([argv] if isinstance(argv, (str, bytes)) else argv)]
    program = os.path.basename(argv[0])
    if argv[0] != sys.executable and not program.startswith("python"):
        return program not in QUICK_TOOLS  # prometheus, promtool, vmalert, chromium...: servers, or Debian packages
    if "--help" in argv:
        return False
    return "serve" in argv or "metricsgw.procs.child" in argv or any(a.startswith("bench.") for a in argv)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """Around setup, call and teardown (fixtures start servers too): refuse a real process to an unmarked test."""
    if item.get_closest_marker("e2e"):
        yield
        return
    original = subprocess.Popen.__init__

    def refusing(self, args, *a, **kw):
        if is_real_process(args):
            raise RuntimeError(f"{item.nodeid} starts a real process ({args!r}) but is not marked e2e: "
                               "list it in tests/lanes.py, or the fast lane slows down")
        original(self, args, *a, **kw)

    subprocess.Popen.__init__ = refusing
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original

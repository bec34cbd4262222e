import sys
from pathlib import Path

# The tests import their harness, testkit/ (servers, ports, the workload), from the repo root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import pytest  # noqa: E402

pytest_plugins = ["tests.lanes"]  # the e2e mark and its guard: the fast lane


@pytest.fixture(scope="session", autouse=True)
def compiled_window_kernels():
    """Engines built in a test take the compiled window kernels, as a query process does once it has loaded them
    (compiled.py); a test of the numpy paths unloads them for its own run (tests/promql/numpy_windows.py). The
    histogram kernel likewise (tests/promql/test_histogram_scalars.py runs protobuf's path beside it)."""
    from metricsgw.promql import histogram_scalars, window_kernels

    assert window_kernels.load(), "the compiled window kernels must load where the tests run"
    assert histogram_scalars.load(), "the compiled histogram kernel must load where the tests run"


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """metricsgw as `make serve` runs it, loaded with the workload (tests/served.py); shared by the dashboard
    and rule tests so the load happens once."""
    from tests.served import start_served

    s = start_served(tmp_path_factory.mktemp("served") / "gw")
    try:
        yield s
    finally:
        s.server.stop()

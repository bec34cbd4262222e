"""Runs every tests/promql/testdata/*.test golden script against the engine and MemSource.

The scripts named in ``PROMETHEUS_2_42`` are Prometheus v2.42.0's promql/testdata files taken
verbatim (tag v2.42.0, commit 225c61122d88b01d1f0eaaee0e05b6f3e0567ac0), so their expected
values are Prometheus's, not ours; a test pins their hashes so they cannot be trimmed or
edited quietly. metricsgw_*.test and prom242_fixes.test are our own."""

from __future__ import annotations

import glob
import hashlib
import os

import pytest

from metricsgw.promql.engine import Engine

from tests.promql.numpy_windows import numpy_windows
from tests.promql.promqltest import run_script

HERE = os.path.dirname(__file__)
SCRIPTS = sorted(glob.glob(os.path.join(HERE, "testdata", "*.test")))

# sha256 of each file as it is in prometheus/prometheus at v2.42.0, promql/testdata/.
PROMETHEUS_2_42 = {
    "aggregators.test": "4cdb600425a71cb73a04ddb8dc0de70a2b1c75351d6da64799c24c08de570d64",
    "at_modifier.test": "8916b4fe669bc6af693fc388600386adbc2dec833c409f5aa4f02a0e06303244",
    "collision.test": "09d8d733f7bb8f7c5a18689f2a9863bb607e35b7aadfdcd63e663d97044473b3",
    "functions.test": "500a3ef042406c6c03233d154edea7f341b8b2524d51301f36ee2ffa81521021",
    "histograms.test": "0d717d6b96f22a1a1bda1a521ebf88eef2ec08ec2ecdf5097bdb7d36c4e6e820",
    "literals.test": "9ec1dc31c71c25baabe9e709930aff716fe70bf9580acf3bbe1a87018057e193",
    "operators.test": "445ba80352fba0cb1f1b7d7bfecc5cade55f053dc487a01ec6a15b290f6cf923",
    "selectors.test": "a00f4d00499afd01d527fc186d272aa748b00cf3e887f306f003f95fb1f554da",
    "staleness.test": "ef03652dcbdc43d0c397b97d5411766dd0a2ff654a2dbd772fb011bce67a3129",
    "subquery.test": "6739f69ae9815e4ece2a19fdee736829d433c267c890eb5ea13f498a6693f41e",
    "trig_functions.test": "cb70f2d40147f61721054ea742a024998572052210d6859150c3786b54c2d108",
}


@pytest.mark.parametrize("batch_samples,numpy", [(2_000_000, False), (1, False), (2_000_000, True)],
                         ids=["whole", "one-series-batches", "numpy-windows"])
@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(p) for p in SCRIPTS])
def test_script(path: str, batch_samples: int, numpy: bool) -> None:
    """Also with aggregations evaluated one series at a time (promql/batching.py), and with the window search
    and the rate family in numpy instead of compiled (promql/window_kernels.py): the expected values are the
    same."""
    with numpy_windows(numpy):
        n, failures = run_script(path, lambda src: Engine(src, batch_samples=batch_samples, promql_compat=2))
    assert n > 0, f"{path} has no eval commands"
    assert not failures, f"{len(failures)} of {n} evals failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", sorted(PROMETHEUS_2_42))
def test_prometheus_scripts_are_verbatim(name: str) -> None:
    with open(os.path.join(HERE, "testdata", name), "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == PROMETHEUS_2_42[name], (
            f"{name} differs from Prometheus v2.42.0's promql/testdata/{name}: restore it verbatim "
            "and put metricsgw-specific cases in metricsgw_*.test")

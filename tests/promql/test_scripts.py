"""Runs every tests/promql/testdata/*.test golden script against the engine and MemSource.

Most scripts are Prometheus's own promql/testdata cases (2.x era), so the expected values
are Prometheus's, not ours."""

from __future__ import annotations

import glob
import os

import pytest

from metricsgw.promql.engine import Engine

from tests.promql.promqltest import run_script

HERE = os.path.dirname(__file__)
SCRIPTS = sorted(glob.glob(os.path.join(HERE, "testdata", "*.test")))


@pytest.mark.parametrize("batch_samples", [2_000_000, 1], ids=["whole", "one-series-batches"])
@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(p) for p in SCRIPTS])
def test_script(path: str, batch_samples: int) -> None:
    """Also with aggregations evaluated one series at a time (promql/batching.py): the
    expected values are the same."""
    n, failures = run_script(path, lambda src: Engine(src, batch_samples=batch_samples))
    assert n > 0, f"{path} has no eval commands"
    assert not failures, f"{len(failures)} of {n} evals failed:\n" + "\n".join(failures)

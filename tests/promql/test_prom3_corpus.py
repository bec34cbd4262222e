"""Prometheus 3.14's native histogram corpus, run against the engine over MemSource (tests/promql/prom3_corpus.py).

tests/promql/testdata3/native_histograms.test is Prometheus v3.14.0's promql/promqltest/testdata file taken
verbatim (tag v3.14.0, commit d7598b7141418fa35be2b5ec5d0fefb634199610; Apache-2.0, Copyright The Prometheus
Authors), so its expected values are Prometheus 3's. metricsgw does not answer all of it yet (3.x functions
and operators it lacks, histogram_quantile/fraction's interpolation changed in 3.x, annotations): the evals it
answers are listed in native_histograms.passing, and none of them may regress. When more pass, list them.
"""

from __future__ import annotations

import hashlib
import os

from metricsgw.promql.engine import Engine
from tests.promql import prom3_corpus

HERE = os.path.join(os.path.dirname(__file__), "testdata3")
SCRIPT = os.path.join(HERE, "native_histograms.test")
SHA256 = "dca164981ef933750b21ad62a552e4bfb7015504a35bc828b47c1ac61a5a6393"


def _listed() -> set[int]:
    with open(os.path.join(HERE, "native_histograms.passing"), encoding="utf-8") as fh:
        return {int(line) for line in fh if line.strip() and not line.startswith("#")}


def test_the_script_is_verbatim():
    with open(SCRIPT, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == SHA256, "restore Prometheus v3.14.0's file verbatim"


def test_the_evals_answered_as_prometheus_3_still_are():
    results = prom3_corpus.run(SCRIPT, Engine)
    assert len(results) == 522  # every eval of the script was read
    regressed = {line: results.get(line, "not run") for line in _listed() if results.get(line, "not run") is not None}
    assert not regressed, "\n".join(f"native_histograms.test:{k}: {v}" for k, v in sorted(regressed.items())[:20])
    newly = sorted(line for line, problem in results.items() if problem is None and line not in _listed())
    assert not newly, f"these evals now pass: add them to native_histograms.passing: {newly}"

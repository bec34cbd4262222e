"""The golden PromQL scripts (tests/promql/testdata/*.test, 11 of them Prometheus 2.42's verbatim) answered by
every implementation of the read seam, from the same data, with --query.promql-compat=2 (the scripts are 2.42's): the engine over the in-memory double, and the
query API of a one-process gateway, of the default layout and of a cluster of three gateways.

All the scripts' phases are loaded at once, told apart by a label (golden.py, isolate.py), so each layout's
gateways start once. The data is in the heads (nothing flushed): the table side of the seam is
test_differential.py's.
"""

from __future__ import annotations

import pytest

from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from tests.conformance import golden, layouts
from tests.conformance.http_eval import HttpEvaluator
from tests.promql.promqltest import EngineEvaluator


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> dict[str, dict[str, list[str]]]:
    """layout -> script -> what it answered wrong (the evals are all asked here, once)."""
    tagged, unparsed = golden.phases()
    data = golden.series(tagged)
    source = MemSource()
    for labels, t, v in data:
        source.add(labels, t, v)
    # Prometheus 2.42's answers: every layout's query processes (the default layout's children too) take the flag.
    out = {"memsource": golden.failures(EngineEvaluator(Engine(source, promql_compat=2)), tagged)}
    started = layouts.start(tmp_path_factory.mktemp("golden"), flags=("--query.promql-compat=2",))
    try:
        for name, gateways in started.items():
            gateways.write(data)
        for name, gateways in started.items():
            out[name] = golden.failures(HttpEvaluator(gateways.url), tagged)
    finally:
        layouts.stop(started)
    for per_script in out.values():
        for script, lines in unparsed.items():
            per_script[script] = lines + per_script[script]
    return out


@pytest.mark.parametrize("layout", layouts.LAYOUTS)
@pytest.mark.parametrize("script", golden.SCRIPTS)
def test_script(failures, layout, script):
    got = failures[layout][script]
    assert not got, f"{len(got)} failed evals:\n" + "\n".join(got[:20])

"""The differential query corpus (tests/e2e/queries.py) and the metadata calls, over one dataset placed in the
table, across the table/head boundary and in the head (dataset.py): every layout answers what a one-process
gateway answers -- status, errorType, warnings, infos and data (tests/e2e/compare.py; topk/bottomk may choose among
equal values) -- and the engine over the in-memory double answers the queries the same too."""

from __future__ import annotations

import duckdb
import pytest
from deltalake import DeltaTable

from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from tests.conformance import dataset, layouts, memsource_api
from tests.dashboards.loading import aligned_now_ms
from tests.e2e import queries
from tests.e2e.client import api
from tests.e2e.compare import compare_answers

REFERENCE = "single"
COMPARED = [name for name in layouts.LAYOUTS if name != REFERENCE]
# The calls of the metadata APIs (the double has none: it is a SampleReader only), over each copy's window.
METADATA = [("/api/v1/series", {"match[]": ["up", "stale_test"]}),
            ("/api/v1/series", {"match[]": '{__name__=~"DCGM_FI_DEV_GPU_.*", gpu!="0"}'}),
            ("/api/v1/labels", {}),
            ("/api/v1/labels", {"match[]": "stale_test"}),
            ("/api/v1/label/__name__/values", {}),
            ("/api/v1/label/case/values", {"match[]": "stale_test"}),
            ("/api/v1/label/job/values", {"match[]": ["up", "node_cpu_seconds_total"]})]
# Issue 29's bugs, until the fix lands: (layout, placement, query) -> what goes wrong.
KNOWN: dict[tuple[str, str, str], str] = {}


class Placed:
    """The started layouts holding the three copies, the double holding them too, and the reference's answers
    (each call asked of it once, whichever layout it is compared with)."""

    def __init__(self, started: dict, copies: dict, engine) -> None:
        self.started, self.copies, self.engine = started, copies, engine
        self._reference: dict = {}

    def answer(self, layout: str, path: str, params: dict, method: str = "POST") -> tuple[int, dict]:
        """The query APIs are asked by POST, as Grafana asks; /label/<name>/values and /status/tsdb take GET only."""
        if layout == "memsource":
            return memsource_api.answer(self.engine, path, params)
        if layout == REFERENCE:
            key = (path, repr(sorted(params.items())), method)
            if key not in self._reference:
                self._reference[key] = api(self.started[REFERENCE].url(), path, params, method=method)
            return self._reference[key]
        return api(self.started[layout].url(), path, params, method=method)


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    copies = dataset.copies(aligned_now_ms())
    source = MemSource()
    for c in copies.values():
        for labels, t, v in c.series:
            source.add(labels, t, v)
    started = layouts.start(tmp_path_factory.mktemp("corpus"))
    try:
        for gateways in started.values():
            gateways.write(dataset.before_restart(copies))
        for gateways in started.values():
            gateways.restart()
        for gateways in started.values():
            gateways.write(dataset.after_restart(copies))
        yield Placed(started, copies, Engine(source))
    finally:
        layouts.stop(started)


def _calls(query: str, copy: dataset.Copy) -> list[tuple[str, dict]]:
    """The last sample, just past the boundary copy's cut, and a range over all of a copy and past its end."""
    end, start = copy.end_ms / 1000, copy.start_ms / 1000
    query = query.replace("<END>", f"{end:.3f}").replace("<START>", f"{start:.3f}")
    return [("/api/v1/query", {"query": query, "time": f"{end:.3f}"}),
            ("/api/v1/query", {"query": query, "time": f"{(start + end) / 2 + 7.5:.3f}"}),
            ("/api/v1/query_range", {"query": query, "start": f"{start + 3.3:.3f}", "end": f"{end + 360:.3f}",
                                     "step": "61s"})]


def _problems(placed: Placed, layout: str, path: str, params: dict, ordered: bool = False) -> list[str]:
    got, want = placed.answer(layout, path, params), placed.answer(REFERENCE, path, params)
    problems = compare_answers(got, want, path, params, ordered, want_name=REFERENCE, got_name=layout)
    for key in ("warnings", "infos"):
        if got[1].get(key) != want[1].get(key):
            problems.append(f"{path} {params}: {key} {got[1].get(key)} != {want[1].get(key)}")
    return problems


def _cases():
    for layout in COMPARED:
        for placement in dataset.PLACEMENTS:
            for query in queries.QUERIES:
                reason = KNOWN.get((layout, placement, query))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                yield pytest.param(layout, placement, query, marks=marks, id=f"{layout}-{placement}-{query}")


@pytest.mark.parametrize("layout, placement, query", list(_cases()))
def test_query_equals_one_process(placed, layout, placement, query):
    problems = []
    for path, params in _calls(query, placed.copies[placement]):
        problems += _problems(placed, layout, path, params, path.endswith("query") and queries.ordered(query))
    assert not problems, "\n".join(problems[:6])


@pytest.mark.parametrize("layout", layouts.GATEWAYS)
def test_data_is_placed_as_said(placed, layout):
    """The table holds the table copy and the boundary copy's first half, nothing newer (so the rest is in
    the heads: a one-process gateway answers it)."""
    files = DeltaTable(str(placed.started[layout].storage_path / "table" / "samples")).file_uris()
    lo, hi = duckdb.execute("SELECT min(t), max(t) FROM read_parquet($f)", {"f": files}).fetchone()
    table, boundary = placed.copies["table"], placed.copies["boundary"]
    assert lo == table.start_ms
    assert boundary.start_ms < hi <= (boundary.start_ms + boundary.end_ms) // 2


@pytest.mark.parametrize("placement", dataset.PLACEMENTS)
@pytest.mark.parametrize("call", range(len(METADATA)), ids=[f"{p}{params}" for p, params in METADATA])
@pytest.mark.parametrize("layout", [name for name in layouts.GATEWAYS if name != REFERENCE])
def test_metadata_equals_one_process(placed, layout, call, placement):
    path, params = METADATA[call]
    copy = placed.copies[placement]
    params = {**params, "start": f"{copy.start_ms / 1000:.3f}", "end": f"{copy.end_ms / 1000:.3f}"}
    (s_got, got), (s_want, want) = (placed.answer(n, path, params, "GET") for n in (layout, REFERENCE))
    assert (s_got, got.get("warnings")) == (s_want, want.get("warnings")) == (200, None), (got, want)
    if path == "/api/v1/series":  # its order is not the API's to keep (Prometheus 2.42 sorts only for several match[])
        got["data"], want["data"] = (sorted(d["data"], key=lambda s: sorted(s.items())) for d in (got, want))
    assert got["data"] == want["data"] and want["data"]


def test_tsdb_status_equals_one_process(placed):
    """The default layout's page adds up its shards'; a cluster gateway's is its own (as each Prometheus's)."""
    for params in ({}, {"limit": "3"}):
        (s_got, got), (s_want, want) = (placed.answer(n, "/api/v1/status/tsdb", params, "GET")
                                        for n in ("default", REFERENCE))
        assert (s_got, got.get("warnings"), got.get("data")) == (s_want, want.get("warnings"), want.get("data"))

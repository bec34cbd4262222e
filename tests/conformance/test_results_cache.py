"""The range-query results cache in the gateway's own layouts: a one-process gateway watches its own storage's
late writes, a query process its shards' (their extent boards). Over the differential corpus's queries and data,
a refresh read from the cache answers exactly what ``nocache=1`` answers, while live samples arrive and after
late samples (a backfill between old samples) changed what the cache held."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from metricsgw.model import canonical
from tests.conformance import dataset, layouts
from tests.dashboards.loading import aligned_now_ms
from tests.e2e import queries
from tests.e2e.client import api
from tests.guard.helpers import metric

LAYOUTS = ["single", "default"]
STEP = "61s"


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    copies = dataset.copies(aligned_now_ms())
    work = tmp_path_factory.mktemp("cache")
    started = {}
    try:
        for name in LAYOUTS:
            started[name] = layouts.Gateways(name, work / name, [])
        for g in started.values():
            g.wait_ready()
            g.write(dataset.before_restart(copies))
            g.restart()  # the table copy and half the boundary copy go to the table
            g.write(dataset.after_restart(copies))
        yield started, copies
    finally:
        layouts.stop(started)


def _range_queries() -> list[str]:
    return [q for q in queries.QUERIES if "<END>" not in q and "<START>" not in q]


def _ask(url: str, query: str, copy: dataset.Copy, nocache: bool) -> tuple[int, dict]:
    params = {"query": query, "start": f"{copy.start_ms / 1000 + 3.3:.3f}", "end": f"{copy.end_ms / 1000:.3f}",
              "step": STEP}
    if nocache:
        params["nocache"] = "1"
    status, body = api(url, "/api/v1/query_range", params, method="POST")
    return status, {k: body.get(k) for k in ("status", "errorType", "error", "data", "warnings")}


class LiveWriter:
    """Samples arriving all the while, as a scrape's do: newer than every step the test asks about."""

    def __init__(self, gateways: layouts.Gateways) -> None:
        self.gateways, self.stop = gateways, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        labels = canonical({"__name__": "up", "job": "node", "instance": "10.0.0.1:9100"}.items())
        while not self.stop.wait(0.2):
            t = np.array([int(time.time() * 1000)])
            self.gateways.write([(labels, t, np.array([1.0]))])

    def __enter__(self) -> "LiveWriter":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _late_samples(copies: dict[str, dataset.Copy]) -> list[tuple]:
    """Every third series of each copy: a sample 7 s after each of its samples in the copy's first half."""
    out = []
    for copy in copies.values():
        mid = (copy.start_ms + copy.end_ms) // 2
        for labels, t, v in copy.series[::3]:
            keep = t < mid
            if keep.any():
                out.append((labels, t[keep] + 7000, v[keep] * 2 + 1))
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cached_answers_equal_uncached_ones_through_live_and_late_samples(placed, layout):
    started, copies = placed
    gateways = started[layout]
    url = gateways.url()
    problems, before = [], {}
    with LiveWriter(gateways):
        for placement, copy in copies.items():
            for q in _range_queries():
                uncached = _ask(url, q, copy, nocache=True)
                filled, refreshed = _ask(url, q, copy, False), _ask(url, q, copy, False)
                before[placement, q] = uncached
                if not uncached == filled == refreshed:
                    problems.append(f"{placement}: {q}: {uncached} / {filled} / {refreshed}"[:400])
        hits = metric(url, "metricsgw_query_results_cache_steps_total", result="hit")
        assert hits > 0, "no step was read from the cache"
        gateways.write(_late_samples(copies))
        changed = 0
        for placement, copy in copies.items():
            for q in _range_queries():
                cached, uncached = _ask(url, q, copy, False), _ask(url, q, copy, nocache=True)
                changed += uncached != before[placement, q]
                if cached != uncached:
                    problems.append(f"after late samples, {placement}: {q}: {cached} != {uncached}"[:400])
    assert not problems, "\n".join(problems[:8])
    # the late samples changed many answers: a cache that dropped nothing would have failed above
    assert changed > len(_range_queries()), changed
    assert metric(url, "metricsgw_query_results_cache_steps_total", result="hit") > hits


def test_a_bad_nocache_value_is_refused(placed):
    started, copies = placed
    status, body = api(started["single"].url(), "/api/v1/query_range",
                       {"query": "up", "start": "1", "end": "2", "step": "1", "nocache": "maybe"})
    assert status == 400 and body["errorType"] == "bad_data"
    assert body["error"] == 'invalid parameter "nocache": cannot parse "maybe" (use true or false)'

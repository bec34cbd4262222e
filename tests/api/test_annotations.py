"""Prometheus 3's annotations in the answer: ``warnings`` and ``infos`` in the envelope, a range query with them
never answered from the results cache (which would drop them), and none with --query.promql-compat=2."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
# Buckets that must be made monotonic (le=1 holds 2, le=+Inf 1): an info; a quantile above 1: a warning.
BUCKETS = 'label_replace(vector(2), "le", "1", "", "") or label_replace(vector(1), "le", "+Inf", "", "")'
CALLS = [("/api/v1/query", {"query": f"histogram_quantile(2, {BUCKETS})", "time": "100"}),
         ("/api/v1/query", {"query": f"histogram_quantile(0.5, {BUCKETS})", "time": "100"}),
         ("/api/v1/query_range", {"query": "sort(vector(1))", "start": "0", "end": "600", "step": "60"}),
         ("/api/v1/query_range", {"query": "sort(vector(1))", "start": "0", "end": "600", "step": "60"})]


async def _answers(tmp_path, **settings) -> list[dict]:
    app = build_app(load({"storage.path": str(tmp_path / "data"), **settings}))
    async with TestClient(TestServer(app)) as client:
        while not app[appkeys.STORAGE].ready:
            await asyncio.sleep(0.01)
        out = []
        for path, form in CALLS:
            resp = await client.post(path, data=form, headers=FORM)
            assert resp.status == 200, await resp.text()
            out.append(json.loads(await resp.text()))
        return out


def test_prometheus_3s_warnings_and_infos_are_in_the_envelope(tmp_path):
    answers = asyncio.run(_answers(tmp_path))
    assert answers[0]["warnings"] == ["PromQL warning: quantile value should be between 0 and 1, got 2"]
    assert "infos" not in answers[0]
    assert answers[1]["infos"][0].startswith("PromQL info: input to histogram_quantile needed to be fixed")
    assert "warnings" not in answers[1]
    sort_warning = ["PromQL warning: sort is ineffective for range queries since results are always ordered by labels"]
    assert answers[2]["warnings"] == answers[3]["warnings"] == sort_warning  # the second is not a cached answer


def test_prometheus_2_has_none(tmp_path):
    answers = asyncio.run(_answers(tmp_path, **{"query.promql-compat": "2"}))
    assert all("warnings" not in a and "infos" not in a for a in answers)
    assert answers[0]["data"]["result"][0]["value"][1] == "+Inf"

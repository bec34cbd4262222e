"""The pages' routes and the status endpoints in one process (the browser tests, tests/ui/, drive the pages
themselves): each page and static file is served with the Content-Security-Policy that keeps it offline, the
status endpoints answer in Prometheus's shape, ``/api/v1/status/tsdb`` takes VictoriaMetrics' parameters, and
``/api/v1/status/advise`` proposes what the advisor's command proposes."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import yaml

from metricsgw.api.pages import PAGES, UI
from metricsgw.remote import codec
from metricsgw.rules.loader import parse_rule_text
from tests.web.harness import WRITE_HEADERS, fetch, serving

NOW_MS = (int(time.time()) - 60) * 1000
DAY_MS = 86_400_000


def _body() -> bytes:
    series = [([("__name__", "cpu"), ("pod", f"p{i}"), ("node", f"n{i % 2}")], [(NOW_MS, float(i))]) for i in range(6)]
    series += [([("__name__", "unread_total"), ("i", str(i))], [(NOW_MS, 1.0)]) for i in range(2)]
    return codec.encode_v1(series)


def _run(tmp_path, check, settings=None, web_config=None):
    async def go():
        async with serving(tmp_path, web_config, settings) as srv, aiohttp.ClientSession() as s:
            status, text, _ = await fetch(s, "POST", srv.url + "/api/v1/write", data=_body(), headers=WRITE_HEADERS)
            assert status == 204, text
            await check(s, srv.url)
    asyncio.run(go())


async def _json(s, url: str, params=None) -> tuple[int, dict]:
    status, text, _ = await fetch(s, "GET", url, params=params or {})
    return status, json.loads(text)


def test_every_page_and_static_file_is_served_offline(tmp_path):
    async def check(s, url):
        status, _, headers = await fetch(s, "GET", url + "/", allow_redirects=False)
        assert status == 302 and headers["Location"] == "query"
        for path, name in PAGES.items():
            status, text, headers = await fetch(s, "GET", url + path)
            assert status == 200 and text == (UI / name).read_text(), path
            assert "default-src 'self'" in headers["Content-Security-Policy"]
            assert "http://" not in text and "https://" not in text, f"{name} loads something from elsewhere"
        for f in (UI / "static").rglob("*"):
            if f.is_file() and f.suffix in (".js", ".css"):
                status, _, _ = await fetch(s, "GET", f"{url}/static/{f.relative_to(UI / 'static').as_posix()}")
                assert status == 200, f
        assert (await fetch(s, "GET", url + "/static/../app.py"))[0] == 404  # no way out of the static folder
    _run(tmp_path, check)


def test_the_javascript_modules_stay_small_and_import_only_their_neighbours():
    for f in (UI / "static" / "js").glob("*.js"):
        text = f.read_text()
        assert len(text.splitlines()) < 400, f"{f.name}: split it"
        for line in text.splitlines():
            if line.startswith("import "):
                assert " from \"./" in line, f"{f.name} imports from elsewhere: {line}"


def test_flags_runtimeinfo_and_config(tmp_path):
    rules = tmp_path / "relabel.yml"
    rules.write_text("- source_labels: [__name__]\n  regex: unread_total\n  action: drop\n")

    async def check(s, url):
        status, body = await _json(s, url + "/api/v1/status/flags")
        assert status == 200 and body["data"]["query.max-samples"] == "1234"
        assert body["data"]["cluster.peers"] == "http://u:<secret>@127.0.0.1:1"
        status, body = await _json(s, url + "/api/v1/status/runtimeinfo")
        assert body["data"]["reloadConfigSuccess"] is True and body["data"]["storageRetention"] == "15d"
        status, body = await _json(s, url + "/api/v1/status/config")
        data = body["data"]
        assert data["files"] == [str(rules)] and [r["action"] for r in data["rules"]] == ["drop"]
        assert parse_rule_text(data["yaml"], "config").rules[0].regex == "unread_total"  # the YAML loads back
        status, body = await _json(s, url + "/api/v1/status/layout")
        assert body["data"]["singleProcess"] and body["data"]["parts"][0]["healthy"]
        assert body["data"]["peers"] == [{"name": "http://127.0.0.1:1", "state": "ok"}]  # not read yet; no password
        assert {p["name"] for p in body["data"]["storage"]["parts"]} >= {"wal"}
    _run(tmp_path, check, {"query.max-samples": "1234", "rules.file": [str(rules)],
                           "cluster.peers": ["http://u:pw@127.0.0.1:1"]})


def test_tsdb_status_over_a_window_a_metric_and_a_focus_label(tmp_path):
    async def check(s, url):
        _, head = await _json(s, url + "/api/v1/status/tsdb")
        assert head["data"]["headStats"]["numSeries"] == 8
        day = time.strftime("%Y-%m-%d", time.gmtime(NOW_MS / 1000))
        _, by_day = await _json(s, url + "/api/v1/status/tsdb", {"date": day})
        assert by_day["data"]["seriesCountByMetricName"] == head["data"]["seriesCountByMetricName"]
        _, empty = await _json(s, url + "/api/v1/status/tsdb", {"start": (NOW_MS - 3 * DAY_MS) / 1000,
                                                                  "end": (NOW_MS - 2 * DAY_MS) / 1000})
        assert empty["data"]["headStats"]["numSeries"] == 0
        _, cpu = await _json(s, url + "/api/v1/status/tsdb", {"match[]": "cpu", "focusLabel": "node", "topN": "1"})
        assert cpu["data"]["headStats"]["numSeries"] == 6
        assert cpu["data"]["seriesCountByFocusLabelValue"] == [{"name": "n1", "value": 3}]
        assert cpu["data"]["labelValueCountByLabelName"] == [{"name": "pod", "value": 6}]
        status, bad = await _json(s, url + "/api/v1/status/tsdb", {"date": "yesterday"})
        assert status == 400 and "YYYY-MM-DD" in bad["error"]
        status, bad = await _json(s, url + "/api/v1/status/tsdb", [("match[]", "cpu"), ("match[]", "up")])
        assert status == 400 and "at most one" in bad["error"]
    _run(tmp_path, check)


def test_advise_proposes_what_the_command_proposes(tmp_path):
    dashboard = tmp_path / "mine.json"
    dashboard.write_text(json.dumps({"panels": [{"title": "CPU", "targets": [{"expr": "sum by (node) (cpu)"}]}]}))

    async def check(s, url):
        status, body = await _json(s, url + "/api/v1/status/advise")
        assert status == 200, body
        data = body["data"]
        assert [d["metric"] for d in data["drops"]] == ["unread_total"]
        assert "mine.json" in data["sources"]["dashboards"] and "metricsgw.json" in data["sources"]["dashboards"]
        assert [r["metric"] for r in data["labelRemovals"]] == []  # pod keeps cpu's series apart: not proposed
        assert {(u["metric"], u["label"]) for u in data["notProposed"]} == {("cpu", "pod")}
        status, text, headers = await fetch(s, "GET", url + "/api/v1/status/advise", params={"format": "yaml"})
        assert status == 200 and "attachment" in headers["Content-Disposition"]
        assert text == data["relabelRules"] and yaml.safe_load(text)[0]["regex"] == "unread_total"
        status, body = await _json(s, url + "/api/v1/status/advise", {"minSeries": "3"})
        assert body["data"]["drops"] == [] and body["data"]["smallUnread"] == 1
        status, body = await _json(s, url + "/api/v1/status/advise", {"top": "many"})
        assert status == 400 and '"top"' in body["error"]
    _run(tmp_path, check, {"advisor.dashboards": [str(dashboard)]})

"""/api/v1/rules and /api/v1/alerts: the configured ruler's groups and alerts, in Prometheus's exact shape.

The oracle is a real Prometheus 2.42 evaluating a rule file: metricsgw pointed at that Prometheus
answers exactly what it answers, and metricsgw pointed at a vmalert evaluating the same file answers
the same too (vmalert's own format differs). Only what changes from one evaluation to the next
(timestamps, durations) is masked before comparing; field order is compared as well.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from metricsgw.app import build_app
from metricsgw.appkeys import RULER
from metricsgw.config import load
from metricsgw.ruler.shape import group_token
from testkit.procs import PROMETHEUS, Server, _spawn, free_port, start_metricsgw
from tests.e2e.client import api
from tests.e2e.ecosystem import start_vmalert, wait_for

RULE_FILE = """\
groups:
  - name: zeta
    interval: 1s
    rules:
      - record: job:shape:one
        expr: vector(1)
        labels:
          team: e2e
      - alert: ShapeFiring
        expr: vector(2) > 1
        labels:
          severity: page
        annotations:
          summary: "value {{ $value }}"
      - alert: ShapePending
        expr: vector(3)
        for: 1h
      - alert: ShapeInactive
        expr: vector(1) < 0
  - name: alpha
    interval: 2s
    rules:
      - record: job:other:two
        expr: vector(2)
"""
VOLATILE = {"lastEvaluation", "evaluationTime", "activeAt"}


def start_prometheus_ruler(work_dir: Path, rule_file: Path) -> Server:
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    config.write_text(f"global:\n  evaluation_interval: 1s\nrule_files: [{rule_file}]\n")
    argv = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    return _spawn("prometheus", argv, work_dir / "data", port)


@pytest.fixture(scope="module")
def rulers(tmp_path_factory):
    work = tmp_path_factory.mktemp("rulers")
    rule_file = work / "rules.yml"
    rule_file.write_text(RULE_FILE)
    servers: list[Server] = []
    try:
        prom = start_prometheus_ruler(work / "prom", rule_file)
        servers.append(prom)
        vmalert_port = free_port()
        gw_prom = start_metricsgw(work / "gw-prom", extra=[f"--rules.ruler-url={prom.base_url}"])
        gw_vm = start_metricsgw(work / "gw-vm", extra=[f"--rules.ruler-url=http://127.0.0.1:{vmalert_port}"])
        servers += [gw_prom, gw_vm]
        for server in servers:
            server.wait_ready()
        # vmalert queries Prometheus (same data as Prometheus's own rules) and writes to metricsgw;
        # without its alertgroup label its alerts carry the labels Prometheus's do.
        vmalert = start_vmalert(work / "vmalert", [rule_file], prom.base_url, gw_vm.base_url,
                                "http://127.0.0.1:1", port=vmalert_port, extra=["-disableAlertgroupLabel"])
        servers.append(vmalert)
        vmalert.wait_ready()
        yield prom, gw_prom, gw_vm
    finally:
        for server in reversed(servers):
            server.stop()


def masked(value) -> str:
    """The answer as JSON text (key order and 1 vs 1.0 count) with per-evaluation values replaced by their type."""
    def mask(v):
        if isinstance(v, dict):
            return {k: (("text" if isinstance(x, str) else "number") if k in VOLATILE else mask(x))
                    for k, x in v.items()}
        return [mask(x) for x in v] if isinstance(v, list) else v
    return json.dumps(mask(value))


def settled(base_url: str, path: str = "/api/v1/rules"):
    """An answer where every rule has been evaluated (health ok) and ShapeFiring fires."""
    def probe():
        status, body = api(base_url, path)
        if status != 200:
            return None
        rules = [r for g in body["data"]["groups"] for r in g["rules"]]
        firing = [r for r in rules if r["name"] == "ShapeFiring" and r["state"] == "firing"]
        return body if rules and firing and all(r["health"] == "ok" for r in rules) else None
    return wait_for(f"all rules evaluated at {base_url}", probe, timeout_s=60)


def test_prometheus_as_ruler_is_passed_through_unchanged(rulers):
    prom, gw_prom, _ = rulers
    want = settled(prom.base_url)
    got = settled(gw_prom.base_url)
    assert masked(got) == masked(want), json.dumps(got)[:2000]


def test_vmalert_as_ruler_answers_in_prometheus_shape(rulers):
    prom, _, gw_vm = rulers
    want = settled(prom.base_url)
    got = settled(gw_vm.base_url)
    assert masked(got) == masked(want), (json.dumps(got)[:1500], json.dumps(want)[:1500])
    (pending,) = [r for g in got["data"]["groups"] for r in g["rules"] if r["name"] == "ShapePending"]
    assert pending["state"] == "pending" and pending["alerts"][0]["value"] == "3e+00"


def test_alerts_equal_prometheus(rulers):
    prom, gw_prom, gw_vm = rulers
    settled(prom.base_url), settled(gw_vm.base_url)
    _, want = api(prom.base_url, "/api/v1/alerts")
    for gw in (gw_prom, gw_vm):
        _, got = api(gw.base_url, "/api/v1/alerts")
        key = lambda a: a["labels"]["alertname"]  # noqa: E731 (Prometheus lists them rule by rule)
        assert masked(sorted(got["data"]["alerts"], key=key)) == masked(sorted(want["data"]["alerts"], key=key))
        assert {a["labels"]["alertname"]: a["state"] for a in got["data"]["alerts"]} == \
            {"ShapeFiring": "firing", "ShapePending": "pending"}


def names(body) -> list[tuple[str, list[str]]]:
    return [(g["name"], [r["name"] for r in g["rules"]]) for g in body["data"]["groups"]]


@pytest.mark.parametrize("params, want", [
    ({"type": "alert"}, [("zeta", ["ShapeFiring", "ShapePending", "ShapeInactive"])]),
    ({"type": "RECORD"}, [("alpha", ["job:other:two"]), ("zeta", ["job:shape:one"])]),
    ({"rule_name[]": ["ShapePending", "job:other:two"]}, [("alpha", ["job:other:two"]), ("zeta", ["ShapePending"])]),
    ({"rule_group[]": "zeta", "type": "record"}, [("zeta", ["job:shape:one"])]),
    ({"file[]": "/nowhere.yml"}, []),
    ({"match[]": '{severity="page"}'}, [("zeta", ["ShapeFiring"])]),
    ({"group_limit": "1"}, [("alpha", ["job:other:two"])]),
])
def test_filters_as_prometheus_reads_them(rulers, params, want):
    _, gw_prom, gw_vm = rulers
    for gw in (gw_prom, gw_vm):
        settled(gw.base_url)
        status, body = api(gw.base_url, "/api/v1/rules", params)
        assert status == 200 and names(body) == want, body


def test_paging_and_excluded_alerts(rulers):
    prom, gw_prom, _ = rulers
    settled(gw_prom.base_url)
    _, first = api(gw_prom.base_url, "/api/v1/rules", {"group_limit": "1"})
    file = first["data"]["groups"][0]["file"]
    assert first["data"]["groupNextToken"] == group_token(file, "zeta")
    page2 = {"group_limit": "1", "group_next_token": first["data"]["groupNextToken"]}
    _, second = api(gw_prom.base_url, "/api/v1/rules", page2)
    assert names(second) == [("zeta", ["job:shape:one", "ShapeFiring", "ShapePending", "ShapeInactive"])]
    assert "groupNextToken" not in second["data"]
    _, lean = api(gw_prom.base_url, "/api/v1/rules", {"exclude_alerts": "true", "type": "alert"})
    assert [r["alerts"] for g in lean["data"]["groups"] for r in g["rules"]] == [None, None, None]


@pytest.mark.parametrize("params, message", [
    ({"type": "alerts"}, 'invalid parameter "type": not supported value "alerts"'),
    ({"group_limit": "0"}, 'invalid parameter "group_limit": group_limit needs to be greater than 0'),
    ({"group_limit": "x"}, 'invalid parameter "group_limit": group_limit needs to be a valid number'),
    ({"group_next_token": "abc"}, 'invalid parameter "group_next_token": group_limit needs to be present'),
    ({"group_limit": "1", "group_next_token": "abc"}, "invalid group_next_token 'abc'. were rule groups changed?"),
    ({"exclude_alerts": "maybe"}, 'invalid parameter "exclude_alerts"'),
    ({"match[]": "{"}, 'invalid parameter "match[]"'),
])
def test_bad_parameters_are_400(rulers, params, message):
    _, gw_prom, _ = rulers
    status, body = api(gw_prom.base_url, "/api/v1/rules", params)
    assert status == 400 and body["errorType"] == "bad_data" and message in body["error"], body


# ------------------------------------------------------------------ no ruler, a ruler down, a ruler that hangs

def run_app(tmp_path, settings: dict, scenario):
    async def main():
        app = build_app(load({"storage.path": str(tmp_path / "data"), **settings}))
        async with TestClient(TestServer(app)) as client:
            return await scenario(client)
    return asyncio.run(main())


async def get_json(client, path, params=None):
    resp = await client.get(path, params=params)
    return resp.status, await resp.json()


def test_without_a_ruler_the_lists_are_empty(tmp_path):
    async def scenario(client):
        return [await get_json(client, "/api/v1/rules"), await get_json(client, "/api/v1/alerts"),
                await get_json(client, "/api/v1/rules", {"type": "bogus"}), (await client.post("/api/v1/rules")).status]
    rules, alerts, bad, post = run_app(tmp_path, {}, scenario)
    assert rules == (200, {"status": "success", "data": {"groups": []}})
    assert alerts == (200, {"status": "success", "data": {"alerts": []}})
    assert bad[0] == 400 and bad[1]["error"] == 'invalid parameter "type": not supported value "bogus"'
    assert post == 405  # GET only, as in Prometheus


def test_a_ruler_that_is_down_is_a_clear_503(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def scenario(client):
        return [await get_json(client, "/api/v1/rules"), await get_json(client, "/api/v1/alerts")]
    for status, body in run_app(tmp_path, {"rules.ruler-url": url}, scenario):
        assert status == 503 and body["status"] == "error" and body["errorType"] == "unavailable", body
        assert f"the ruler at {url} (--rules.ruler-url) is unavailable" in body["error"], body


def test_a_hanging_ruler_blocks_nothing_and_times_out(tmp_path):
    """While /api/v1/rules waits on a ruler that never answers, the event loop serves other requests;
    the wait ends with 503 when the ruler hangs up, or at --rules.ruler-timeout."""
    async def scenario(client):
        asked = asyncio.Event()
        mode = {"hang_up": False}
        held: list[asyncio.StreamWriter] = []

        async def ruler_that_never_answers(reader, writer):
            await reader.readline()
            if mode["hang_up"]:
                writer.close()
                return
            held.append(writer)
            asked.set()

        ruler = await asyncio.start_server(ruler_that_never_answers, "127.0.0.1", 0)
        ruler_client = client.server.app[RULER]
        # The port is known only now; the configured timeout (10m) is far beyond the test.
        ruler_client.base_url = f"http://127.0.0.1:{ruler.sockets[0].getsockname()[1]}"
        pending = asyncio.create_task(get_json(client, "/api/v1/rules"))
        await asyncio.wait_for(asked.wait(), 60)
        healthy = await client.get("/-/healthy")
        still_waiting = not pending.done()
        mode["hang_up"] = True  # the ruler hangs up: the waiting request ends now (a retry too)
        for writer in held:
            writer.close()
        hung_up = await pending
        mode["hang_up"] = False
        ruler_client.timeout_s = 0.3
        timed_out = await get_json(client, "/api/v1/alerts")
        for writer in held:
            writer.close()
        ruler.close()
        return healthy.status, still_waiting, hung_up, timed_out

    healthy, still_waiting, hung_up, timed_out = run_app(
        tmp_path, {"rules.ruler-url": "http://127.0.0.1:1", "rules.ruler-timeout": "10m"}, scenario)
    assert healthy == 200 and still_waiting
    assert hung_up[0] == 503 and hung_up[1]["errorType"] == "unavailable", hung_up
    assert "is unavailable: ServerDisconnectedError" in hung_up[1]["error"], hung_up
    assert timed_out[0] == 503 and "no answer within 0.3s (--rules.ruler-timeout)" in timed_out[1]["error"], timed_out

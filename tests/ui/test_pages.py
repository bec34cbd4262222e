"""The pages in headless Chromium (issue 32), against a loaded gateway in the default layout (behind basic auth and
without) and in one process: each loads with no console error and no request leaving the gateway, and shows what the API answers.

The waits are Playwright's expectations (they wait for the page, whatever the machine's speed); a held query
(metricsgw/testhooks.py) is running for as long as the test needs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
from playwright.sync_api import expect

from tests.e2e.procs_helpers import wait_for
from tests.guard.helpers import QueryHold
from tests.ui.gateway import CPU, DROPPED, MAX_SAMPLES, PODS, READER, UNREAD

expect.set_options(timeout=30_000)

PAGES = {"/query": "#expr", "/graph": "#expr", "/cardinality": "#top-metrics", "/tsdb-status": "#top-metrics",
         "/queries": "#running", "/status": "#flags-table", "/flags": "#flags-table", "/config": "#config-out p",
         "/advisor": "#drops-table"}


@pytest.mark.parametrize("path", list(PAGES))
def test_each_page_loads_with_no_error_and_nothing_from_elsewhere(page, path):
    page.goto(path)
    expect(page.locator(PAGES[path])).to_be_visible()
    expect(page.locator(".msg.error")).to_have_count(0)


def test_the_root_leads_to_the_query_page(page):
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/query$"))
    expect(page.locator("nav a[aria-current=page]")).to_have_text("Query")


def _run(page, expr: str, tab: str = "table") -> None:
    page.goto("/query")
    page.locator("#expr").fill(expr)
    page.locator(f"#tab-{tab}").click()  # selects the view and runs the expression


def test_a_query_shows_its_table_then_its_graph(page, gateway, watch):
    watch.allow("status of 422")
    expr = f"rate({CPU}[5m])"
    instant = gateway.data("/api/v1/query", {"query": expr, "time": gateway.end})["result"]
    assert len(instant) == PODS
    page.goto("/query")
    page.locator("#expr").fill(expr)
    page.locator("#time").fill(_local(gateway.end))
    page.locator("#run").click()
    expect(page.locator("#result-table tbody tr")).to_have_count(PODS)
    expect(page.locator("#result-table")).to_contain_text('pod="p3"')
    page.locator("#tab-graph").click()  # the graph over the default hour: refused, more points than the limit
    expect(page.locator(".refusal")).to_contain_text("--query.max-samples")
    page.locator("#range").fill("5m")
    page.locator("#step").fill("30s")
    page.locator("#run").click()
    expect(page.locator("#graph-out canvas").first).to_be_visible()
    ranged = gateway.data("/api/v1/query_range", {"query": expr, "start": gateway.end - 300, "end": gateway.end,
                                                  "step": 30})["result"]
    assert len(ranged) == PODS
    expect(page.locator("#graph-info")).to_have_attribute("data-series", str(len(ranged)))
    expect(page.locator(".u-legend .u-series")).to_have_count(len(ranged) + 1)  # the time column, then each series


def _local(t: float) -> str:
    """``t`` as the browser's datetime-local input takes it (the browser runs in this machine's time zone)."""
    import datetime

    return datetime.datetime.fromtimestamp(int(t)).strftime("%Y-%m-%dT%H:%M:%S")


def test_a_refused_query_names_the_limit_and_its_value(page, gateway, watch):
    watch.allow("status of 422")
    expr = f"{CPU}[30m]"
    status, body = gateway.get("/api/v1/query", {"query": expr, "time": gateway.end})
    assert status == 422 and "--query.max-samples" in body["error"]
    _run(page, expr)
    refusal = page.locator(".refusal")
    expect(refusal).to_contain_text("Refused by the guard")
    expect(refusal.locator("code.flag")).to_have_text(f"--query.max-samples (now {MAX_SAMPLES})")


def test_the_answers_warnings_are_shown(page, gateway):
    body = gateway.get("/api/v1/query", {"query": f"sum({CPU})", "time": gateway.end})[1]
    assert body["warnings"], "the dead peer should leave a warning"
    _run(page, f"sum({CPU})")
    expect(page.locator(".msg.warning").first).to_contain_text(body["warnings"][0][:40])


def test_autocomplete_offers_metric_names_label_names_and_values(page):
    page.goto("/query")
    box = page.locator("#expr")
    box.press_sequentially("ui_cpu")
    expect(page.locator("#suggest li", has_text=CPU)).to_be_visible()
    page.locator("#suggest li", has_text=CPU).click()
    expect(box).to_have_value(CPU)
    box.press_sequentially("{po")
    expect(page.locator("#suggest li", has_text="pod")).to_be_visible()
    box.press("ArrowDown")
    box.press("Enter")
    expect(box).to_have_value(CPU + "{pod")
    box.press_sequentially('="p')
    expect(page.locator("#suggest li", has_text="p7")).to_be_visible()


def _texts(locator) -> list[str]:
    return [t.strip() for t in locator.all_inner_texts()]


def test_cardinality_matches_the_api_and_drills_down(page, gateway):
    tsdb = gateway.data("/api/v1/status/tsdb", {"topN": 10})
    page.goto("/cardinality")
    expect(page.locator("#num-series")).to_have_text(f"{tsdb['headStats']['numSeries']:,}")
    names = [e["name"] for e in tsdb["seriesCountByMetricName"]]
    expect(page.locator("#top-metrics tbody tr td:first-child")).to_have_text(names)
    expect(page.locator("#top-metrics tbody tr td:nth-child(2)")).to_have_text(
        [f"{e['value']:,}" for e in tsdb["seriesCountByMetricName"]])
    # over the last 7 days, every partition
    page.locator("#window").select_option("7")
    page.locator("#card-form button[type=submit]").click()
    week = gateway.data("/api/v1/status/tsdb", {"start": gateway.end - 7 * 86400, "end": gateway.end + 60})
    expect(page.locator("#num-series")).to_have_text(f"{week['headStats']['numSeries']:,}")
    # one day: the newest sample's (UTC)
    day = time.strftime("%Y-%m-%d", time.gmtime(gateway.end))
    page.locator("#window").select_option("date")
    page.locator("#date").fill(day)
    page.locator("#card-form button[type=submit]").click()
    that_day = gateway.data("/api/v1/status/tsdb", {"date": day})
    expect(page.locator("#num-series")).to_have_text(f"{that_day['headStats']['numSeries']:,}")
    # a metric's labels, then a label's values
    page.locator("#top-metrics a", has_text=CPU).click()
    of_cpu = gateway.data("/api/v1/status/tsdb", {"match[]": CPU, "topN": 10})
    assert of_cpu["headStats"]["numSeries"] == PODS
    expect(page.locator("#num-series")).to_have_text(str(PODS))
    labels = [e["name"] for e in of_cpu["labelValueCountByLabelName"]]
    expect(page.locator("#top-labels tbody tr td:first-child")).to_have_text(labels)
    page.locator("#top-labels a", has_text="node").click()
    nodes = gateway.data("/api/v1/status/tsdb", {"match[]": CPU, "focusLabel": "node"})["seriesCountByFocusLabelValue"]
    assert sorted(e["name"] for e in nodes) == ["n0", "n1"] and {e["value"] for e in nodes} == {PODS // 2}
    expect(page.locator("#focus-values tbody tr td:first-child")).to_have_text([e["name"] for e in nodes])
    expect(page.locator("#focus-values tbody tr td:nth-child(2)")).to_have_text([str(e["value"]) for e in nodes])
    page.locator("#growth-button").click()
    expect(page.locator("#growth-table tbody tr", has_text=CPU).locator("td").last).to_have_text(str(PODS))
    # each of the metric's labels and label=value pairs, day by day (the newest day: the samples' day)
    today = gateway.data("/api/v1/status/tsdb",
                         {"date": time.strftime("%Y-%m-%d", time.gmtime()), "match[]": CPU, "topN": 10})
    expect(page.locator("#growth-labels tbody tr", has_text="node").first.locator("td").last).to_have_text(
        str(next(e["value"] for e in today["labelValueCountByLabelName"] if e["name"] == "node")))
    expect(page.locator("#growth-pairs tbody tr", has_text="node=n0").locator("td").last).to_have_text(
        str(PODS // 2))


def test_the_queries_page_shows_a_refused_query_and_an_admin_cancels_a_running_one(page, gateway):
    refused = f"{CPU}[31m]"
    grafana = {"X-Dashboard-Uid": "gpu-fleet", "X-Panel-Id": "7", "User-Agent": "Grafana/10.4.1"}
    assert gateway.get("/api/v1/query", {"query": refused, "time": gateway.end}, headers=grafana)[0] == 422
    wait_for(lambda: any(q["params"]["query"] == refused for q in
                         gateway.data("/api/v1/status/recent_queries", {"kind": "refused"})["refused"]),
             "the refused query in the log")
    page.goto("/queries")
    page.locator("#kind-refused").click()
    row = page.locator("#recent-table tbody tr", has_text=refused)
    expect(row).to_contain_text("--query.max-samples")
    expect(row.locator(".ua")).to_have_text("Grafana/10.4.1")  # the client's user agent, and Grafana's headers
    expect(row.locator(".grafana")).to_have_text("Grafana: dashboard gpu-fleet panel 7")
    held = f"count({CPU})" + QueryHold.HELD
    gateway.hold.engage()
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(r=gateway.get(
        "/api/v1/query", {"query": held, "time": gateway.end})))
    thread.start()
    try:
        wait_for(lambda: gateway.hold.reached() >= 1, "the held query running")
        page.locator("#refresh").click()
        running = page.locator("#running-table tbody tr", has_text="count(")
        expect(running).to_have_count(1)
        running.locator("button.cancel").click()
        expect(page.locator(".msg.info", has_text="canceled")).to_be_visible()
        thread.join(60)
        assert answer["r"][0] != 200 and "cancel" in answer["r"][1]["error"]
        expect(page.locator("#running-table tbody tr", has_text="count(")).to_have_count(0)
    finally:
        gateway.hold.release()
        thread.join(60)


def test_the_status_page_shows_flags_layout_and_storage(page, gateway):
    page.goto("/flags")
    row = page.locator("#flags-table tbody tr", has_text="--query.max-samples")
    expect(row.locator("td").last).to_have_text(str(MAX_SAMPLES))
    parts = page.locator("#parts-table tbody tr")
    if gateway.single:
        expect(parts).to_have_count(1)
        expect(page.locator("#mode")).to_contain_text("one process")
    else:
        expect(parts.locator("td:first-child")).to_have_text(["front", "shard-0", "querier-0"])
        expect(page.locator("#mode")).to_contain_text("1 ingest shard(s), 1 query process(es)")
    expect(parts.locator(".up")).to_have_count(parts.count())
    expect(page.locator("#peers-table tbody tr")).to_contain_text(gateway.dead_peer)
    expect(page.locator("#storage-table")).to_contain_text("wal")
    expect(page.locator("#rules-yaml")).to_contain_text(f"regex: {DROPPED}")
    expect(page.locator("#build-out")).to_contain_text("metricsgw-")


def test_the_advisor_lists_the_unread_metric_and_its_rules_pass_the_checker(page, gateway, tmp_path):
    page.goto("/advisor")
    drops = page.locator("#drops-table tbody tr td:first-child")
    expect(drops.filter(has_text=UNREAD)).to_have_count(1)
    with page.expect_download() as got:
        page.locator("#download").click()
    path = tmp_path / "proposed.yml"
    got.value.save_as(path)
    assert UNREAD in path.read_text()
    check = subprocess.run([sys.executable, "-m", "metricsgw", "check", "relabel", str(path)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_pages_need_credentials_when_the_gateway_has_them(browser, gateway):
    if gateway.auth is None:
        pytest.skip("this gateway runs without a web config")
    context = browser.new_context(base_url=gateway.url)
    try:
        for path in ("/query", "/status", "/static/js/query.js", "/", "/api/v1/status/advise"):
            resp = context.request.get(path, max_redirects=0)
            assert resp.status == 401 and resp.headers["www-authenticate"].startswith("Basic"), path
        with pytest.raises(Exception, match="ERR_INVALID_AUTH_CREDENTIALS"):
            context.new_page().goto("/query")  # the browser is refused the page itself, not only the API
    finally:
        context.close()


def test_a_read_only_user_sees_the_pages_but_cannot_cancel(browser, gateway):
    if gateway.auth is None:
        pytest.skip("this gateway runs without a web config")
    context = browser.new_context(base_url=gateway.url, http_credentials=gateway.credentials(READER))
    try:
        p = context.new_page()
        p.goto("/queries")
        expect(p.locator("#running")).to_be_visible()
        status, body = gateway.get("/api/v1/admin/cancel_query", {"id": "1"}, who=READER, method="POST")
        assert status == 403
    finally:
        context.close()

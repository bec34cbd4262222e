"""propose() on synthetic counts, its YAML through the relabel loader and engine, and the command against a
stand-in of the gateway's API (a thread in this process)."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from metricsgw.advisor.counts import Counts
from metricsgw.advisor.propose import metrics_to_list, propose
from metricsgw.advisor.report import relabel_yaml
from metricsgw.advisor.usage import EVERY_LABEL, expr_usage
from metricsgw.cli import main as cli_main
from metricsgw.model import canonical
from metricsgw.rules import check
from metricsgw.rules.loader import load_rule_file
from tests.shipped import REPO


def _series(metric: str, n: int, **const: str) -> list[dict[str, str]]:
    return [{"__name__": metric, "instance": f"n{i}", "device": f"nvidia{i}", **const} for i in range(n)]


SERIES = {
    "read_total": _series("read_total", 4, job="a"),
    "merged": [{"__name__": "merged", "instance": "n0", "pid": str(p)} for p in range(3)],
    "unread_big": _series("unread_big", 50),
    "unread_small": _series("unread_small", 2),
}
USAGE = (expr_usage("panel A", 'sum by (job) (rate(read_total{instance=~".*"}[5m]))')
         + expr_usage("panel B", "read_total") + expr_usage("panel C", "count(merged)"))


def _counts() -> Counts:
    counts = Counts({m: len(s) for m, s in SERIES.items()})
    for m in metrics_to_list(counts.series, USAGE, 1, 10):
        counts.listed[m] = SERIES[m]
    return counts


def test_propose():
    p = propose(_counts(), USAGE, min_series=10)
    assert p.drops == [("unread_big", 50)] and p.small_unread == 1 and p.dropped_series == 50
    [removal] = p.removals
    assert (removal.metric, removal.labels, removal.values) == ("read_total", ("device",), (4,))
    assert removal.bytes == sum(len("device") + len(f"nvidia{i}") for i in range(4))
    assert removal.queries == ("panel B",)  # panel A sums by job: its output never shows device
    # instance is read (a matcher); job has one value; pid and instance of `merged` are not read, and instance
    # (one value) is left, pid is proved needed: without it the three series would be one
    assert [(u.metric, u.label, u.reason) for u in p.unsafe] == [("merged", "pid", "unsafe: may merge series")]


def test_labels_are_judged_together():
    series = [{"__name__": "m", "a": str(i), "b": str(i)} for i in range(3)]  # a and b each make them distinct
    counts = Counts({"m": 3}, {"m": series})
    p = propose(counts, expr_usage("q", "count(m)"))
    assert [r.labels for r in p.removals] == [("a",)] and [u.label for u in p.unsafe] == ["b"]


def test_a_truncated_listing_proves_nothing():
    counts = Counts({"m": 3}, {}, {"m"})
    p = propose(counts, expr_usage("q", "m"))
    assert not p.removals and p.unsafe[0].metric == "m" and "truncated" in p.unsafe[0].reason


def test_the_yaml_passes_the_checker_and_drops_exactly_the_unread(tmp_path):
    path = tmp_path / "advice.yml"
    text = relabel_yaml(propose(_counts(), USAGE, min_series=1))
    path.write_text(text)
    out = io.StringIO()
    assert check.main([str(path)], out, io.StringIO()) == 0 and "SUCCESS: 1 rules found" in out.getvalue()
    kept = _kept(load_rule_file(str(path)))
    assert not kept["unread_big"] and not kept["unread_small"]
    assert kept["merged"] == SERIES["merged"]
    # removing device changes panel B's output (it shows read_total whole): written, commented out
    assert kept["read_total"] == SERIES["read_total"] and "# Not applied: it changes the output of 1 queries" in text
    path.write_text("\n".join(line[2:] if line.startswith(("# -", "#   ")) else line for line in text.splitlines()))
    kept = _kept(load_rule_file(str(path)))
    assert kept["read_total"] == [{k: v for k, v in s.items() if k != "device"} for s in SERIES["read_total"]]


def _kept(rules) -> dict[str, list[dict[str, str]]]:
    kept = {}
    for metric, series in SERIES.items():
        after = [rules.apply(canonical(s.items())) for s in series]
        kept[metric] = [dict(a) for a in after if a is not None]
    return kept


def test_a_match_on_every_label_reads_every_label():
    usage = expr_usage("q", "sum by (job) (increase(read_total[5m]) + increase(merged[5m]))")
    assert all(EVERY_LABEL in r.labels for r in usage.reads)
    p = propose(_counts(), usage)
    assert not p.removals and ("read_total", "") in {(u.metric, u.label) for u in p.unsafe}
    [a, b] = expr_usage("q", "sum by (job) (rate(read_total[5m])) / sum without (pid) (rate(merged[5m]))").reads
    assert a.labels == {"job"} and b.labels == {"pid", EVERY_LABEL}
    for scalar in ("read_total / 1000", "read_total * scalar(merged)", "2 ^ (1 + 1) > read_total",
                   "sum by (job) (read_total) / on (job) sum by (job) (merged)"):
        assert not any(EVERY_LABEL in r.labels for r in expr_usage("q", scalar).reads), scalar


def test_topk_shows_its_series_whole():
    [read] = expr_usage("q", 'topk by (job) (3, read_total{instance="a"})').reads
    assert read.shows_all and read.labels == {"job", "instance"}
    [read] = expr_usage("q", "sum by (job) (read_total)").reads
    assert not read.shows_all


def test_nothing_to_propose_is_still_a_rule_file(tmp_path):
    path = tmp_path / "none.yml"
    path.write_text(relabel_yaml(propose(Counts({"read_total": 1}), USAGE)))
    assert len(load_rule_file(str(path)).rules) == 0


class _Api(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/api/v1/status/tsdb":
            data = {"seriesCountByMetricName": [{"name": m, "value": len(s)} for m, s in SERIES.items()]}
        else:
            data = SERIES[parse_qs(url.query)["match[]"][0]]
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_the_command(api, tmp_path, capsys):
    log = tmp_path / "query.log"
    log.write_text(json.dumps({"params": {"query": "sum by (job) (read_total)"}}) + "\n")
    out = tmp_path / "advice.yml"
    assert cli_main(["advise", "--url", api, "--dashboards", str(REPO / "dashboards" / "gpu-fleet.json"),
                     "--query-log", str(log), "--min-series", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Drop: 2 unread metrics with >= 3 series, saving 53 series (1 smaller" in text  # merged is unread here
    # the query log's query sums by job: device and instance are unread, but one of them must stay
    assert "read_total: device (4 values);" in text and "read_total instance: unsafe: may merge series" in text
    assert "no query changes" in text
    assert len(load_rule_file(str(out)).rules) == 2  # the drop, and device off read_total

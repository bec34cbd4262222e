"""The soak/attack and big-query tools run end to end on a tiny workload (no figure is judged)."""

from __future__ import annotations

from bench import bigquery, soak


def test_soak_and_attack_report_every_figure():
    res = soak.main(["--nodes", "1", "--duration", "15s", "--history", "30s", "--interval", "5s", "--clients", "1",
                     "--refresh", "5s", "--settle", "0s", "--targets", "metricsgw"])["metricsgw"]
    assert res["exit_code"] == 0, res["log_tail"]
    assert res["backfill"]["samples"] > 0 and res["samples_ok"] > 0
    for key in ("rss_peak_mib", "rss_after_mib", "write_p99_ms", "writes_failed", "ready", "queries", "abuse"):
        assert key in res
    assert res["ready"]["probes"] > 0 and sum(res["queries"].values()) > 0
    res = soak.main(["--mode", "attack", "--nodes", "1", "--duration", "5s", "--history", "30s", "--interval", "5s",
                     "--clients", "2", "--settle", "0s", "--targets", "metricsgw"])["metricsgw"]
    assert res["exit_code"] == 0 and sum(res["queries"].values()) > 0


def test_bigquery_answers_and_measures_memory_before_and_after():
    res = bigquery.main(["--nodes", "2", "--hours", "0.25", "--repeat", "1", "--settle", "0s",
                         "--targets", "metricsgw"])["metricsgw"]
    assert res["load"]["samples"] == 16 * 61 and res["load"]["failed_requests"] == 0
    (run,) = res["runs"]
    assert run["status"] == "200" and run["series"] >= 1
    assert run["rss_peak_mib"] >= run["rss_before_mib"] > 0

"""bench.lifetime end to end on a small workload: churn, Grafana clients, a kill -9 of the gateway's process group
and its restart, then the read-back. Judged only on what does not depend on the machine's speed: nothing
acknowledged lost nor stored twice, the kill and the restart happened, memory was read every minute, churn
made new series."""

from __future__ import annotations

from bench import lifetime


def test_lifetime_loses_nothing_acknowledged_across_churn_and_kill(tmp_path):
    out = lifetime.main(["--nodes", "20", "--duration", "2m", "--churn-every", "30s", "--kill-at", "60s",
                         "--clients", "2", "--pss-every", "2s", "--data-dir", str(tmp_path),
                         "--out", str(tmp_path / "lifetime.json")])
    s = out["summary"]
    assert out["exit_code"] == 0 and not out["stopped"], out["log_tail"]
    kill = s["kill"]
    assert kill["exit_code"] == -9 and kill["processes_killed"] >= 1 and "error" not in kill, kill
    assert kill["downtime_s"] > 0
    check = s["samples"]
    assert check["acknowledged"] > 0 and check["queries_failed"] == 0, check
    assert check["found"] == check["acknowledged"] and check["lost"] == 0 and check["extra"] == 0, check
    assert check["series_missing"] == 0
    assert s["churns"] >= 3 and check["series_found_after_churn"] > 0  # churn's new series were written and kept
    full = [m for m in out["minutes"] if m["seconds"] >= 30]
    assert len(full) >= 2 and all(m["pss_mib"] > 0 for m in full)
    assert s["pss_peak_mib"] > 0 and sum(s["panels"].values()) > 0
    assert "| minute | Pss MiB |" in lifetime.markdown(out)

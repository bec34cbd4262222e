"""The dynamic dashboard checks catch a breaking relabel rule, not only the static contract.

A small metricsgw runs with make serve's relabel rules plus the rule dcgm.yml used to ship (deleting Hostname
from DCGM series). The GPU dashboard's Node variable comes back empty, and with All selected the per-node
panels collapse to one series; the checks that pass on the shipped rules report those panels by name.
"""

from __future__ import annotations

import pytest

from tests.dashboards.grafana import choose_all, load_dashboards, resolve_selections, targets
from tests.dashboards.loading import SmallControlPlaneWorkload
from tests.dashboards.panel_check import label_values_fetcher, target_problems
from tests.served import start_served

GPU = load_dashboards()["gpu-fleet.json"]
BREAKING = ("# Hostname repeats instance (what dcgm.yml used to do)\n"
            '- source_labels: [__name__]\n  regex: "DCGM_FI_.+"\n  target_label: Hostname\n  replacement: ""\n')


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    work = tmp_path_factory.mktemp("broken")
    (work / "breaking.yml").write_text(BREAKING)
    s = start_served(work / "gw", SmallControlPlaneWorkload(3, seed=1), [work / "breaking.yml"])
    try:
        yield s
    finally:
        s.server.stop()


def test_node_variable_comes_back_empty(broken):
    with pytest.raises(LookupError, match=r"variable \$Hostname has no values"):
        resolve_selections(GPU, label_values_fetcher(broken.base_url, broken.end_s), choose_all)


def test_per_node_panels_are_reported_by_name(broken):
    texts = {"Hostname": ".*", "namespace": ".*", "gpu": ".*"}  # what All gives, had the variable resolved
    report = {t.panel: target_problems(broken.base_url, broken.end_s, broken.reference, t, texts)
              for t in targets("gpu-fleet.json", GPU)}
    broken_panels = {panel for panel, problems in report.items() if problems}
    assert {"Mean utilisation by node", "SM clock by node (min)", "Framebuffer used by node",
            "Power draw by node", "Share of node power per GPU", "GPU utilisation per GPU"} <= broken_panels
    assert "1 series, expected 3..3" in "\n".join(report["Mean utilisation by node"])
    # fleet-wide panels still work: the checks blame only what the rule broke
    assert not report["GPUs reporting"] and not report["Fleet power draw"]
    assert not report["Mean utilisation by namespace"]

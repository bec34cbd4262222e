"""What the repo ships together: the relabel rules `make serve` loads, the alert/recording rules, the dashboards.

``make_serve_rule_files()`` asks make itself (``make -n serve``) which ``--rules.file`` flags it passes, so the tests
load the relabel rules exactly as ``make serve`` does. ``alert_rules()`` flattens rules/alerts/*.yml.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RELABEL_DIR = REPO / "rules" / "relabel"
ALERT_DIR = REPO / "rules" / "alerts"
ALERT_TEST_DIR = REPO / "tests" / "alerts"


def make_serve_rule_files() -> list[Path]:
    """The relabel rule files `make serve` passes to metricsgw, in its order (read from `make -n serve`)."""
    out = subprocess.run(["make", "-n", "-s", "serve"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    serve = [line for line in out.splitlines() if " serve " in line and "metricsgw" in line]
    assert len(serve) == 1, f"cannot find the metricsgw command in `make -n serve`:\n{out}"
    prefix = "--rules.file="
    return [REPO / arg[len(prefix):] for arg in shlex.split(serve[0]) if arg.startswith(prefix)]


@dataclass(frozen=True)
class Rule:
    file: str  # relative to the repo, e.g. rules/alerts/gpu.yml
    group: str
    name: str  # the alert name or the recorded series name
    kind: str  # "alert" or "record"
    expr: str
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    for_: str = ""

    @property
    def title(self) -> str:
        return f"{self.file}: {self.kind} {self.name}"


def alert_rule_files() -> list[Path]:
    return sorted(ALERT_DIR.glob("*.yml"))


def alert_rules() -> list[Rule]:
    out = []
    for path in alert_rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for r in group["rules"]:
                kind = "alert" if "alert" in r else "record"
                out.append(Rule(str(path.relative_to(REPO)), group["name"], r[kind], kind, r["expr"],
                                r.get("labels", {}), r.get("annotations", {}), r.get("for", "")))
    return out

"""The docs are checked as code is (as Datasette checks its own): every relative link leads to a file that
exists, and to a heading that exists when it names one; every ``--flag.like-this`` they mention is a flag of
metricsgw's settings (config.py) or one listed below."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from metricsgw.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
        ROOT / "bench" / "RESULTS.md"]

# Flags that are not settings, by what they are.
OTHER_FLAGS = {
    "--config.file": "metricsgw serve: the file the settings are read from",
    "--web.enable-remote-write-receiver": "Prometheus: the receiver the benches and tests write to",
    "--storage.exemplars.exemplars-limit": "Prometheus: its fixed-size exemplar ring, compared with ours",
}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a dotted flag; one ending in "-" is a family written with a star (`--storage.remote.read-*`)
FLAG = re.compile(r"(?<![\w.-])--[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+")


def _anchors(md: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # a '#' comment in a code block is no heading
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _links(md: Path):
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md):
    broken = []
    for link in _links(md):
        path, _, anchor = link.partition("#")
        target = (md.parent / path).resolve() if path else md
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{md.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_mentioned_is_real(md):
    ours = {s.flag for s in SETTINGS}
    unknown = sorted({flag for flag in FLAG.findall(md.read_text())
                      if flag not in ours and flag not in OTHER_FLAGS
                      and not (flag.endswith("-") and any(o.startswith(flag) for o in ours))})
    assert not unknown, f"{md.relative_to(ROOT)} mentions flags that are no setting: {unknown}"


def test_the_checks_see_links_and_flags():
    """The patterns still find what they check (a test that finds nothing passes whatever the docs say)."""
    readme = ROOT / "README.md"
    assert "docs/settings.md" in _links(readme)
    assert "--query.timeout" in FLAG.findall(readme.read_text())
    assert "point-prometheus-at-it" in _anchors(readme)

"""What the Prometheus 3.14 corpus (tests/promql/testdata3/) gives under the default, Prometheus 3 semantics,
per file: evals answered as Prometheus 3 does, and why the others are not, by the kind of failure. The table
in docs/promql-corpus.md is this module's output; tests/promql/test_prom3_corpus.py keeps them in step.

    PYTHONPATH=. .venv/bin/python -m tests.promql.prom3_report          # the table
    PYTHONPATH=. .venv/bin/python -m tests.promql.prom3_report --pin    # list what passes now in passing/
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections import Counter

from metricsgw.promql.engine import Engine
from tests.promql import prom3_corpus

HERE = os.path.join(os.path.dirname(__file__), "testdata3")
SCRIPTS = sorted(glob.glob(os.path.join(HERE, "*.test")))

# (what a failure's message says, the reason shown): first match wins. The reasons name what is missing;
# docs/promql-corpus.md says which of them metricsgw lacks on purpose and which are still to come.
_KINDS = [
    (r"parse error: (invalid promql query|unexpected character inside brackets)", "syntax the parser lacks"),
    (r"not supported: function (start|end|range|step|min_of|max_of)\(\)", "syntax the parser lacks"),
    (r"not supported: function info\(\)", "info()"),
    (r"not supported: function ([a-z_]+)\(\)", r"function \1()"),
    (r"exponential and custom-bucket", "exponential mixed with custom-bucket histograms"),
    (r"not supported: .*(native histograms|float samples)", "a histogram case not evaluated"),
    (r"fill\(\) modifiers", "fill() modifiers"),
    (r"not understood", "runner: syntax not read"),
    (r"engine crashed", "engine crash"),
    (r"invalid label name .*\\\\x", "invalid UTF-8 quoted in an error"),
    (r"want an error|got error", "error or not, as Prometheus 3"),
    (r"(expected|unexpected) (warn|info) annotation", "annotations differ"),
    (r"", "values differ"),
]


# Files testing an experimental Prometheus 3 feature that Prometheus' test engine turns on (promqltest's
# NewTestEngine: EnableDelayedNameRemoval; the __type__/__unit__ labels of type-and-unit-labels; start timestamps)
# and Prometheus 3.14 serves only behind --enable-feature: metricsgw answers as Prometheus 3.14 does with its
# defaults. docs/promql-corpus.md says why each is left out.
_FEATURE_FILES = {"name_label_dropping.test": "delayed name removal",
                  "type_and_unit.test": "type and unit labels",
                  "info.test": "info()",
                  "start_timestamps.test": "start timestamps"}


def kind(problem: str, script: str = "") -> str:
    if script in _FEATURE_FILES and not problem.startswith("not understood"):
        return _FEATURE_FILES[script]
    for pattern, reason in _KINDS:
        m = re.search(pattern, problem)
        if m:
            return m.expand(reason)
    raise AssertionError("unreachable: the last pattern matches everything")


def pinned(name: str) -> set[int]:
    """The script lines of ``name``'s evals pinned as answered as Prometheus 3 does."""
    with open(os.path.join(HERE, "passing", name.replace(".test", ".txt")), encoding="utf-8") as fh:
        return {int(line) for line in fh if line.strip() and not line.startswith("#")}


def _pin(name: str, res: dict[int, str | None]) -> None:
    with open(os.path.join(HERE, "passing", name.replace(".test", ".txt")), "w", encoding="utf-8") as fh:
        fh.write(f"# Lines of {name} whose eval metricsgw answers as Prometheus 3.14 does (test_prom3_corpus.py).\n")
        fh.writelines(f"{line}\n" for line, problem in sorted(res.items()) if problem is None)


def results(path: str) -> dict[int, str | None]:
    return prom3_corpus.run(path, Engine)


def table(all_results: dict[str, dict[int, str | None]]) -> str:
    rows = ["| file | as Prometheus 3 | evals | why the others are not (evals) |", "|---|---|---|---|"]
    total = [0, 0]
    for name, res in sorted(all_results.items()):
        ok = sum(p is None for p in res.values())
        why = Counter(kind(p, name) for p in res.values() if p is not None)
        rows.append(f"| {name} | {ok} | {len(res)} | " + ", ".join(f"{k} ({n})" for k, n in why.most_common()) + " |")
        total[0] += ok
        total[1] += len(res)
    rows.append(f"| all | {total[0]} | {total[1]} | |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    everything = {os.path.basename(p): results(p) for p in SCRIPTS}
    if sys.argv[1:] == ["--pin"]:
        for script, res in everything.items():
            _pin(script, res)
    else:
        print(table(everything), end="")

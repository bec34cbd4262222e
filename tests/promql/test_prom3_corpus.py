"""Prometheus 3.14's PromQL test corpus, run against the engine over MemSource with the default, Prometheus 3
semantics (tests/promql/prom3_corpus.py, prom3_report.py).

tests/promql/testdata3/*.test are Prometheus v3.14.0's promql/promqltest/testdata files taken verbatim (tag
v3.14.0, commit d7598b7141418fa35be2b5ec5d0fefb634199610; Apache-2.0, Copyright The Prometheus Authors), so
their expected values are Prometheus 3's. metricsgw does not answer all of them (docs/promql-corpus.md says
what it lacks and why): the script lines of the evals it answers as Prometheus 3 does are pinned in
testdata3/passing/<file>.txt, so an eval that stops passing fails here, and so does one that starts to (list it:
``python -m tests.promql.prom3_report --pin``). The per-file table of docs/promql-corpus.md is kept current too.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

import pytest

from tests.promql import prom3_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = [os.path.basename(p) for p in prom3_report.SCRIPTS]
# sha256 of each file as it is in prometheus/prometheus at v3.14.0, promql/promqltest/testdata/.
PROMETHEUS_3_14 = {
    "aggregators.test": "d9201ff19258995d2b78fc5e79515a913e62fb60957ff0996a7447ceb1f00d40",
    "at_modifier.test": "e323ea87e4f042e1c3e6b29c7b3cc6ed6169d1a5877dd71427fb827c03287c9b",
    "collision.test": "7d477979b45192d1aa2ba7bc1928e16c69fe8c84babe74e010f2cbc4f4b2c412",
    "duration_expression.test": "b3b177b6792c4a28ee57c605a9fba3c05b4c1e1b81a3bf34014b240cfe550163",
    "extended_vectors.test": "9f5912bb7afef4289073894c05970ce786daf259a08452af3ebcd3d4202f6917",
    "fill-modifier.test": "8de100df12a014f5259c17289187cf24b634d90e82a3d3de0560f1ed780d3a75",
    "functions.test": "fc1629ea89a11372ea56f23b82cb67253a3d7746c9060920cc508b08b504eb0c",
    "histograms.test": "0f8e5029e3dce4465c030fb324eeedd80f05b4a3f26ad359d7945bafc70f9594",
    "info.test": "8ac3b3154306ce2bf15fb36dd8e4f826609ced9c2ecf37ea8e0021d385cec043",
    "limit.test": "b4bc01948bd00644ff52a11e59af3d0e59980bedd7a292d34f96a38ff9416293",
    "literals.test": "0561b22f1d0c89bb8495174f9f4faf9a05b70cc4170454671c26d3e70d84110c",
    "name_label_dropping.test": "8149d92f071f057c7484a8e8409d52bf639a79cb1bfba3ecb7a6a0006e6095c2",
    "native_histograms.test": "dca164981ef933750b21ad62a552e4bfb7015504a35bc828b47c1ac61a5a6393",
    "operators.test": "f1cdbbfee88b9f1f9a35f6ab3936d5b2e0170fb2f6f3f300cf0501074190f074",
    "range_queries.test": "ad22d27d5db2dfe6218ab75526dcca93c189eb5541ea9593e24a73feb772162b",
    "selectors.test": "70a827b6cb133d95d139d7f0433db742f1f310d5bc1dd5e4b138031970ebc43c",
    "staleness.test": "178a655095f05f2ffb9f08f677dcd40f2a34e578099b3d3127ea486a9981f736",
    "start_timestamps.test": "26b944335f713e5c54c150cea46f38509b8a4513af7d169fdaa28ce4c0a2f0c8",
    "subquery.test": "37c4534e7a98e4fe7fdd0e273e9bbf8c59c2fb7b0363c4b4b4af6fcf756f62a6",
    "trig_functions.test": "d9cba332e8b6294276e7fbdeb5bbfb715e11bad6ec6aa568fe01aa82ed802a8f",
    "type_and_unit.test": "23f604731f005563f9c7219c913eb65008f366fbe6999d64e1d9a22614e21426",
}


@functools.cache
def _results(name: str) -> dict[int, str | None]:
    return prom3_report.results(os.path.join(prom3_report.HERE, name))


def test_every_file_of_the_corpus_is_here_verbatim():
    assert sorted(NAMES) == sorted(PROMETHEUS_3_14)
    for name, sha in PROMETHEUS_3_14.items():
        with open(os.path.join(prom3_report.HERE, name), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == sha, f"restore Prometheus v3.14.0's {name} verbatim"


@pytest.mark.parametrize("name", NAMES)
def test_the_evals_answered_as_prometheus_3_are_those_pinned(name: str):
    results = _results(name)
    with open(os.path.join(prom3_report.HERE, name), encoding="utf-8") as fh:
        evals = sum(1 for line in fh if re.match(r"eval(_fail|_warn|_info|_ordered)?\s", line))
    assert len(results) == evals, "the runner did not read every eval of the script"
    pinned = prom3_report.pinned(name)
    regressed = {line: results.get(line, "not run") for line in sorted(pinned) if results.get(line) is not None}
    assert not regressed, "\n".join(f"{name}:{k}: {v}" for k, v in list(regressed.items())[:20])
    newly = sorted(line for line, problem in results.items() if problem is None and line not in pinned)
    assert not newly, f"these evals of {name} now pass: pin them (python -m tests.promql.prom3_report --pin): {newly}"


def test_the_corpus_page_shows_these_numbers():
    with open(os.path.join(ROOT, "docs", "promql-corpus.md"), encoding="utf-8") as fh:
        page = fh.read()
    assert prom3_report.table({name: _results(name) for name in NAMES}) in page, (
        "docs/promql-corpus.md's table is stale: paste `python -m tests.promql.prom3_report`")

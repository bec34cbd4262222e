"""Every in-process implementation of the read seam (metricsgw/storage/seam.py) has each method of the Protocols
it implements, with the Protocol's signature: parameter names, order, kinds, defaults and annotations, and the
return annotation. A method added to the seam and not to every implementation fails here."""

from __future__ import annotations

import inspect

import pytest

from metricsgw.cluster.source import ClusterSource
from metricsgw.promql.batching import FixedSelection
from metricsgw.promql.memsource import MemSource
from metricsgw.storage import seam
from metricsgw.storage.read.recent import RecentView
from metricsgw.storage.store import Storage

IMPLEMENTS = {
    seam.SampleReader: [MemSource, Storage, ClusterSource, RecentView, FixedSelection],
    seam.HistogramReader: [Storage, ClusterSource],
    seam.MetadataReader: [Storage, ClusterSource],
}
CASES = [(protocol, impl) for protocol, impls in IMPLEMENTS.items() for impl in impls]


def seam_methods(protocol) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for klass in protocol.__mro__ if klass.__module__ == seam.__name__
            for name, fn in vars(klass).items() if inspect.isfunction(fn) and not name.startswith("_")}


def signature_problems(want: inspect.Signature, got: inspect.Signature) -> list[str]:
    """How ``got`` differs from ``want``; parameters beyond the seam's are allowed if optional."""
    problems = []
    wp, gp = list(want.parameters.values()), list(got.parameters.values())
    for w, g in zip(wp, gp):
        if (w.name, w.kind, w.default, w.annotation) != (g.name, g.kind, g.default, g.annotation):
            problems.append(f"parameter {g} is not the seam's {w}")
    if len(gp) < len(wp):
        problems.append(f"missing parameters {[str(p) for p in wp[len(gp):]]}")
    problems += [f"extra parameter {p} has no default" for p in gp[len(wp):] if p.default is inspect.Parameter.empty]
    if got.return_annotation != want.return_annotation:
        problems.append(f"returns {got.return_annotation}, the seam {want.return_annotation}")
    return problems


@pytest.mark.parametrize("protocol, impl", CASES, ids=[f"{p.__name__}-{i.__name__}" for p, i in CASES])
def test_implementation_has_the_seam_signatures(protocol, impl):
    problems = []
    for name, want in seam_methods(protocol).items():
        fn = getattr(impl, name, None)
        if fn is None:
            problems.append(f"{name}: missing")
            continue
        problems += [f"{name}: {p}" for p in signature_problems(want, inspect.signature(fn))]
    assert not problems, f"{impl.__name__} as a {protocol.__name__}:\n" + "\n".join(problems)


def test_the_check_sees_a_difference():
    def select_series(self, matchers, start_ms, end_ms, ctx=None):  # no limit, no annotations
        ...

    want = seam_methods(seam.SeriesReader)["select_series"]
    assert len(signature_problems(want, inspect.signature(select_series))) == 6
    assert signature_problems(want, want) == []


def test_every_protocol_is_checked():
    assert set(IMPLEMENTS) | {seam.SeriesReader} == {
        v for v in vars(seam).values() if isinstance(v, type) and v.__module__ == seam.__name__}

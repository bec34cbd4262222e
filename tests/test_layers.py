"""Every import points down a floor (docs/internals.md, "Floors"): a module may import from its own floor and
the floors below it, never above, so each floor can be read and tested with only what is under it. Imports
inside functions count too; imports under ``if TYPE_CHECKING:`` do not (the graph of test_import_cycles.py).

``python -m tests.test_layers`` prints every upward import.
"""

from __future__ import annotations

import ast

from tests.test_import_cycles import imports, modules

# Bottom to top; a module's floor is that of the longest name here it is, or lies under.
FLOORS: list[tuple[str, ...]] = [
    ("metricsgw", "metricsgw.model", "metricsgw.errors", "metricsgw.config", "metricsgw.npsort",
     "metricsgw.appkeys", "metricsgw.telemetry", "metricsgw.malloc", "metricsgw.gcpolicy", "metricsgw.testhooks",
     "metricsgw.cmdline"),
    ("metricsgw.http", "metricsgw.web"),
    ("metricsgw.remote",),
    ("metricsgw.rules", "metricsgw.ruler"),
    ("metricsgw.limits", "metricsgw.querylog"),
    ("metricsgw.storage",),
    ("metricsgw.promql",),
    ("metricsgw.ingest", "metricsgw.compiled", "metricsgw.advisor"),
    ("metricsgw.cluster",),
    ("metricsgw.api",),
    ("metricsgw.app",),
    ("metricsgw.procs",),
    ("metricsgw.cli", "metricsgw.__main__", "metricsgw.advisor.command", "metricsgw.advisor.gateway"),
    ("testkit",),  # the test harness: the tests stand on it, beside bench/, and never import bench/
    ("bench",),
]

# (importer, imported) -> why it still points up. Empty, and it stays so: move the shared piece down instead.
UPWARD: dict[tuple[str, str], str] = {}

# The wire floor serves no HTTP (bytes in, model out), though the HTTP plumbing lies on a floor below it.
WIRE = "metricsgw.remote"
HTTP = ("metricsgw.http", "metricsgw.web")


def floor_of(module: str) -> int:
    best, floor = "", None
    for level, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, floor = name, level
    if floor is None:
        raise KeyError(f"{module} is on no floor: add it to FLOORS (and to docs/internals.md)")
    return floor


def upward(graph: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    return sorted((m, t) for m, edges in graph.items() for t in edges if floor_of(t) > floor_of(m))


def test_no_import_points_up():
    found = [pair for pair in upward(imports(modules())) if pair not in UPWARD]
    assert not found, f"imports from a floor above (move the shared piece down): {found}"


def test_every_allowed_upward_import_still_exists():
    stale = sorted(set(UPWARD) - set(upward(imports(modules()))))
    assert not stale, f"UPWARD lists imports that are gone or no longer point up; remove them: {stale}"


def test_every_module_has_a_floor():
    for module in modules():
        floor_of(module)


def _on(module: str, names: tuple[str, ...]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def test_the_wire_serves_no_http():
    known = modules()
    found = [(m, t) for m, edges in imports(known).items() if _on(m, (WIRE,)) for t in edges if _on(t, HTTP)]
    for module, path in known.items():
        if _on(module, (WIRE,)):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found += [(module, a.name) for a in node.names if _on(a.name, ("aiohttp",))]
                elif isinstance(node, ast.ImportFrom) and not node.level and _on(node.module or "", ("aiohttp",)):
                    found.append((module, node.module))
    assert not found, f"remote/ is wire code only; its HTTP handlers and helpers belong in api/ and http/: {found}"


def test_the_floors_see_an_upward_import():
    assert floor_of("metricsgw.remote.codec") < floor_of("metricsgw.api.remote_write")
    assert upward({"metricsgw.remote.codec": {"metricsgw.api.query": False}}) == [
        ("metricsgw.remote.codec", "metricsgw.api.query")]


if __name__ == "__main__":
    for importer, imported in upward(imports(modules())):
        print(f"{importer} -> {imported}" + ("  (allowed)" if (importer, imported) in UPWARD else ""))

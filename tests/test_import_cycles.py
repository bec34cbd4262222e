"""No import circle among the modules of metricsgw, testkit and bench (a circle means neither can be understood, tested
or moved without the other). Imports inside functions count too, unless listed in LAZY with the reason the
arrow points that way; imports under ``if TYPE_CHECKING:`` do not (they never run).

``python -m tests.test_import_cycles`` prints every circle, lazy imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("metricsgw", "testkit", "bench")

# (importer, imported) -> why the import is inside a function; only these may close a circle.
LAZY: dict[tuple[str, str], str] = {}


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level:
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module
        # `from pkg import mod` imports the module pkg.mod; `from mod import name` the module mod
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
    out = set()
    for name in names:
        while name and name not in known:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or (
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")


def imports(known: dict[str, Path]) -> dict[str, dict[str, bool]]:
    """module -> {imported module: whether only inside functions}."""
    graph: dict[str, dict[str, bool]] = {}
    for module, path in known.items():
        edges: dict[str, bool] = {}

        def visit(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(module, path.name == "__init__.py", child, known):
                        edges[target] = edges.get(target, True) and in_function
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text()), False)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    graph = imports(modules())
    counted = {m: {t for t, lazy in edges.items() if not (lazy and (m, t) in LAZY)} for m, edges in graph.items()}
    assert circles(counted) == [], "import circle: move what both need to a lower module"


def test_every_listed_lazy_import_exists():
    graph = imports(modules())
    stale = [pair for pair in LAZY if not graph.get(pair[0], {}).get(pair[1])]
    assert not stale, f"LAZY lists imports that are gone (or no longer inside a function): {stale}"


def test_the_graph_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = imports(modules())
    assert graph["metricsgw.procs.child"]["metricsgw.cmdline"] is False  # a module-level import, found
    assert graph["metricsgw.cli"]["metricsgw.procs.serve"] is True  # one inside a function, found


if __name__ == "__main__":
    every = {m: set(edges) for m, edges in imports(modules()).items()}
    for circle in circles(every):
        print(" <-> ".join(circle))

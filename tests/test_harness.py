"""The tests' harness is testkit/, not bench/: a bench can then change (or go) without breaking a test, and a
test never runs a bench's code by accident. tests/bench/ is the one exception: it tests the benches themselves.
Imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
BENCH_TESTS = TESTS / "bench"


def _bench_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "bench" or a.name.startswith("bench.")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "bench" or node.module.startswith("bench."):
                found.append(node.module)
    return found


def test_no_test_imports_bench():
    found = {str(p.relative_to(TESTS)): names for p in sorted(TESTS.rglob("*.py"))
             if BENCH_TESTS not in p.parents and (names := _bench_imports(p))}
    assert not found, f"tests import their harness from testkit/, never from bench/ (but tests/bench/): {found}"


def test_the_check_sees_a_bench_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom bench.queries import run\n\ndef f():\n    import bench.soak\n")
    assert _bench_imports(probe) == ["bench.queries", "bench.soak"]

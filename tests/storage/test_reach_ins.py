"""The storage's parts use each other through public methods: the file set (storage/fileset.py) alone holds the swap
lock, and no storage module reads another object's private fields. A lock taken elsewhere, or a field read behind
its owner's back, is how an earlier bug hid history after a restart."""

from __future__ import annotations

import ast
from pathlib import Path

from metricsgw.storage.store import Storage

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "metricsgw" / "storage"


def test_only_the_file_set_holds_the_swap_lock():
    users = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "metricsgw").rglob("*.py"))
             if p.name != "fileset.py" and "_swap_lock" in p.read_text()]
    assert users == []


def _reach_ins(path: Path) -> list[str]:
    """``x._field`` where ``x`` is not self or cls and the module defines no ``_field`` of its own."""
    tree = ast.parse(path.read_text())
    own = {n.attr for n in ast.walk(tree)
           if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return [f"{path.relative_to(ROOT)}:{n.lineno} {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")) and n.attr not in own]


def test_no_storage_module_reads_another_objects_private_fields():
    assert [hit for p in sorted(STORAGE.rglob("*.py")) for hit in _reach_ins(p)] == []


def test_storage_holds_its_parts_rather_than_inheriting_them():
    """Mixins shared one ``self``, so any of them could read or write another's state; parts are separate objects
    (storage.files, storage.book, storage.native, storage.series, ...) that meet only through public methods."""
    assert Storage.__bases__ == (object,)

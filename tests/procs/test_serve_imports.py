"""The front starts its children before it imports its own web part (procs/serve.py): what a restart waits for is
the children, and the storage, the engine and the front's routes cost ~0.9 s of imports before the first spawn
when they came first."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("metricsgw.app", "metricsgw.storage.store", "metricsgw.procs.front", "metricsgw.promql.engine", "duckdb",
         "deltalake")


def test_starting_the_children_imports_neither_the_storage_nor_the_front_web_part(tmp_path):
    """What serve.serve does before ``supervisor.start()``, in a fresh interpreter: parse the flags, resolve the
    layout, look for orphaned WALs (there are none)."""
    code = f"""
import sys
from metricsgw.cmdline import build_parser, config_from_args
from metricsgw.procs.layout import resolve
from metricsgw.procs.orphans import flush_orphans
import metricsgw.cli, metricsgw.procs.serve
cfg = config_from_args(build_parser().parse_args(["serve", "--storage.path={tmp_path}"]))
assert flush_orphans(cfg, resolve(cfg)) == []
print(" ".join(m for m in {HEAVY!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == []

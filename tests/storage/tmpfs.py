"""A small tmpfs of our own, to fill a disk for real (root only; the tests skip with the reason otherwise)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str):
    """Mount a tmpfs of ``size`` (e.g. "16m") at ``where``; skip the test if that is not possible here."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("filling a disk needs a tmpfs of our own: mount -t tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path, chunk: int = 1 << 16) -> int:
    """Write ``path`` until the file system is full (ENOSPC); returns the bytes written."""
    written = 0
    block = b"\xa5" * chunk
    with open(path, "ab", buffering=0) as fh:
        while True:
            try:
                n = fh.write(block)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                if chunk <= 512:
                    return written
                chunk //= 2
                block = block[:chunk]
                continue
            written += n or 0

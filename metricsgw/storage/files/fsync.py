"""Making a directory entry durable: after a create, rename or unlink, the directory itself is fsync'd, or a
crash may forget the name (the WAL's segments and every file of the table depend on it)."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

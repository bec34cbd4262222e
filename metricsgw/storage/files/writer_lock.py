"""One live process per writer id: an exclusive flock on ``wal/<writer id>/lock``.

Two processes with one writer id would append to one WAL and claim each other's files. The lock
is the kernel's: it goes when the process dies (kill -9 included), so no stale lock needs clearing.
"""

from __future__ import annotations

import fcntl
import os


class WriterIdInUse(RuntimeError):
    pass


class WriterLock:
    def __init__(self, path: str, writer_id: str) -> None:
        self.path = path
        self.writer_id = writer_id
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise WriterIdInUse(f"writer id {self.writer_id!r} is in use by another live process (pid {holder}) on "
                                f"{os.path.dirname(os.path.dirname(os.path.dirname(self.path)))}: give each process "
                                "its own --storage.writer-id") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

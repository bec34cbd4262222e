"""Write-ahead log: append + fsync before a write is acknowledged; group commit; fast replay.

A segment is a file of records ``[u32 length][u32 crc32][payload]``. Concurrent appends wait on
one writer thread that writes everything pending and fsyncs once (group commit), so N concurrent
requests cost one fsync. A record torn by a crash fails its CRC; replay stops there and the
segment is truncated (such a record was never acknowledged: the ack comes after fsync).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
_SEGMENT_SUFFIX = ".wal"


def segment_name(seq: int) -> str:
    return f"{seq:08d}{_SEGMENT_SUFFIX}"


def list_segments(wal_dir: str) -> list[int]:
    out = []
    for name in os.listdir(wal_dir):
        if name.endswith(_SEGMENT_SUFFIX) and name[: -len(_SEGMENT_SUFFIX)].isdigit():
            out.append(int(name[: -len(_SEGMENT_SUFFIX)]))
    return sorted(out)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_segment(path: str) -> Iterator[bytes]:
    """Yield intact records; truncate the file at the first torn or corrupt one."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos, end = 0, len(data)
    while pos + _HEADER.size <= end:
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        if start + length > end or zlib.crc32(data[start:start + length]) != crc:
            break
        yield data[start:start + length]
        pos = start + length
    if pos != end:
        log.warning("WAL segment %s: torn record at byte %d of %d, truncating (it was never acknowledged)",
                    path, pos, end)
        with open(path, "r+b") as fh:
            fh.truncate(pos)
            os.fsync(fh.fileno())


@dataclass
class _Pending:
    payload: bytes
    done: Callable[[BaseException | None], None]


class WAL:
    """One writer thread owns the open segment; callers ``await wal.append(payload)``."""

    def __init__(self, wal_dir: str, segment_size: int, on_fsync: Callable[[float, int], None] | None = None):
        self.dir = wal_dir
        os.makedirs(wal_dir, exist_ok=True)
        self.segment_size = segment_size
        self._on_fsync = on_fsync
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._closed = False
        segs = list_segments(wal_dir)
        self._seq = (segs[-1] + 1) if segs else 1
        self._fh = self._open_segment(self._seq)
        self._cut_requested = False
        self._cut_done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-writer", daemon=True)
        self._thread.start()

    @property
    def current_segment(self) -> int:
        return self._seq

    def _open_segment(self, seq: int):
        fh = open(os.path.join(self.dir, segment_name(seq)), "ab", buffering=0)
        fsync_dir(self.dir)
        return fh

    async def append(self, payload: bytes) -> None:
        """Returns once the record is on disk (fsync'd)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def done(err: BaseException | None) -> None:
            def settle() -> None:
                if fut.done():
                    return
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)
            loop.call_soon_threadsafe(settle)

        self.submit(payload, done)
        await fut

    def submit(self, payload: bytes, done: Callable[[BaseException | None], None]) -> None:
        with self._cond:
            if self._closed:
                raise OSError("WAL is closed")
            self._pending.append(_Pending(payload, done))
            self._cond.notify()

    def cut(self) -> int:
        """Start a new segment; returns the number of the last closed one. Records appended before
        this call are in segments <= the returned number."""
        with self._cond:
            if self._closed:
                raise OSError("WAL is closed")
            self._cut_done.clear()
            self._cut_requested = True
            self._cond.notify()
        self._cut_done.wait()
        if self._closed and self._cut_requested:
            raise OSError("WAL closed before the cut")
        return self._seq - 1

    def remove_upto(self, seq: int) -> None:
        for s in list_segments(self.dir):
            if s <= seq and s != self._seq:
                os.remove(os.path.join(self.dir, segment_name(s)))
        fsync_dir(self.dir)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._cut_requested and not self._closed:
                    self._cond.wait()
                batch, self._pending = self._pending, []
                cut, self._cut_requested = self._cut_requested, False
                closing = self._closed
            if batch:
                self._write(batch)
            if cut or (batch and self._fh.tell() >= self.segment_size and not closing):
                self._fh.close()
                self._seq += 1
                self._fh = self._open_segment(self._seq)
                if cut:
                    self._cut_done.set()
            if closing and not batch:
                self._fh.close()
                self._cut_done.set()  # wake a cut() that raced with close()
                return

    def _write(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        err: BaseException | None = None
        start = self._fh.tell()
        try:
            buf = bytearray()
            for p in batch:
                buf += _HEADER.pack(len(p.payload), zlib.crc32(p.payload))
                buf += p.payload
            self._fh.write(buf)
            os.fsync(self._fh.fileno())
        except OSError as e:  # disk full, I/O error: the sender gets a 5xx and retries
            log.error("WAL write failed: %s", e)
            err = e
            try:  # leave no half record behind: a torn record mid-segment would hide later ones
                self._fh.truncate(start)
                self._fh.seek(start)
            except OSError:
                pass
        if self._on_fsync:
            self._on_fsync(time.perf_counter() - t0, len(batch))
        for p in batch:
            p.done(err)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)

"""The time span of what an ingest shard holds in memory, published in a small shared file its query processes read.

A query process reads its shards' heads for every selection (a head read, peers.py), and on this kind of VM
such a round trip costs 1-2.5 ms of wake-ups even when the head holds nothing the query wants. Thanos' querier
skips a store whose time range misses the query's; this is the same for a shard's memory: the shard publishes the
span [min_t, max_t] of every sample, histogram and exemplar it holds in memory (head and snapshots being flushed)
and the samples table version that holds everything it no longer does. A query process whose window misses that
span reads nothing from the shard and reads the table at that version or newer instead, which is what the head
read's answer would have told it (storage/read/recent.py).

Why that is exact: the shard widens the span, under its storage's swap lock, before a write's samples are
acknowledged, and narrows it only after a flush committed the samples it drops, naming that commit's version. So
whatever a reader sees is a span at least as wide as the memory it describes, with a version no older than the
commit of anything outside it.

The file is one 40-byte record written in place (never replaced, so every reader's mapping stays the writer's
file): magic, min_t, max_t, version, and a CRC-32 over them, which a reader checks (a torn read is read again,
and one that stays torn is treated as unknown). A shard writes UNKNOWN (the widest span: never skipped) when it
starts, before its WAL replay, and its real span once ready. A stale file of a killed shard stays a true bound
until its successor acknowledges a write, which it does only after rewriting the file.

After the span, from byte ``LATE_AT``, the shard's late-write log (storage/memory/late_writes.py): which stretches
of time late samples changed, for the query processes' results caches. It is rewritten, again with a CRC, when a
late sample is written (rarely) and once the shard is ready; a new shard's log has a new ``boot``, so what a cache
remembers of its predecessor is void. A reader that finds no valid log caches nothing.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ..storage.memory.late_writes import SLOTS, LateState

_MAGIC = 0x4D47_4558_0001  # "MGEX", format 1
_BODY = struct.Struct("<Qqqq")  # magic, min_t, max_t, version
_CRC = struct.Struct("<I4x")  # CRC-32 of the body's bytes
SIZE = _BODY.size + _CRC.size
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_LATE_MAGIC = 0x4D47_4C41_0001  # "MGLA", format 1
_LATE_HEAD = struct.Struct("<QQQ")  # magic, boot, seq
LATE_AT = 64
_LATE_BODY = _LATE_HEAD.size + SLOTS * 8
FILE_SIZE = LATE_AT + _LATE_BODY + _CRC.size
_READ_TRIES = 3


@dataclass(frozen=True)
class Extent:
    min_t: int
    max_t: int
    version: int  # the samples table version holding every sample of this shard outside [min_t, max_t]

    def misses(self, start_ms: int, end_ms: int) -> bool:
        """Whether nothing held in memory falls in [start_ms, end_ms] (nothing is held: min_t > max_t)."""
        return end_ms < self.min_t or start_ms > self.max_t


UNKNOWN = Extent(_I64_MIN, _I64_MAX, -1)


def path_for(socket_path: str) -> str:
    """The board of the shard listening on ``socket_path`` (beside it, in the gateway's run directory)."""
    base = socket_path.removesuffix(".sock")
    return base + ".extent"


def remove(path: str) -> None:
    """Delete a board once no process maps it (the gateway stopped): a stopped gateway's data directory holds
    its data and nothing of its processes."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _pack(extent: Extent) -> bytes:
    body = _BODY.pack(_MAGIC, extent.min_t, extent.max_t, extent.version)
    return body + _CRC.pack(zlib.crc32(body))


class BoardWriter:
    """The shard's side: ``publish`` is called under the storage's swap lock (one writer at a time)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < FILE_SIZE:
                os.ftruncate(fd, FILE_SIZE)
            self._map = mmap.mmap(fd, FILE_SIZE)
        finally:
            os.close(fd)
        self._last: Extent | None = None
        self._put(UNKNOWN)
        self._map[LATE_AT:FILE_SIZE] = bytes(FILE_SIZE - LATE_AT)  # no log until the shard is ready

    def publish(self, min_t: int, max_t: int, version: int) -> None:
        """Storage's ``extent_sink`` (storage/memory/memory_span.py)."""
        self._put(Extent(min_t, max_t, version))

    def publish_late(self, state: LateState) -> None:
        """Storage's ``late_sink``: called under its swap lock, before the late write is acknowledged."""
        body = _LATE_HEAD.pack(_LATE_MAGIC, state.boot, state.seq) + state.slots.astype("<u8").tobytes()
        self._map[LATE_AT:FILE_SIZE] = body + _CRC.pack(zlib.crc32(body))

    def _put(self, extent: Extent) -> None:
        if extent != self._last:
            self._map[:SIZE] = _pack(extent)
            self._last = extent

    def close(self) -> None:
        self._map.close()


class BoardReader:
    """A query process's side. ``read`` is None when the board is missing or unreadable: read the head then."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._map: mmap.mmap | None = None
        self._inode: tuple[int, int] | None = None

    def read(self) -> Extent | None:
        """Called by query worker threads at once: a map being replaced stays open for a thread still reading it."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if (self._map is None or self._inode != (st.st_dev, st.st_ino)) and not self._open():
            return None
        board = self._map
        for _ in range(_READ_TRIES):
            record = board[:SIZE]  # one copy: the check and the fields are of the same bytes
            body = record[:_BODY.size]
            magic, lo, hi, version = _BODY.unpack(body)
            if magic == _MAGIC and _CRC.unpack_from(record, _BODY.size)[0] == zlib.crc32(body):
                return Extent(lo, hi, version)
        return None

    def read_late(self) -> LateState | None:
        """The shard's late-write log, or None (missing, not ready, or torn each time it was read)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if (self._map is None or self._inode != (st.st_dev, st.st_ino)) and not self._open():
            return None
        board = self._map
        if len(board) < FILE_SIZE:  # a board of a shard older than the log
            return None
        for _ in range(_READ_TRIES):
            record = board[LATE_AT:FILE_SIZE]
            body = record[:_LATE_BODY]
            magic, boot, seq = _LATE_HEAD.unpack_from(body)
            if magic == _LATE_MAGIC and _CRC.unpack_from(record, _LATE_BODY)[0] == zlib.crc32(body):
                return LateState(boot, seq, np.frombuffer(body, "<u8", SLOTS, _LATE_HEAD.size).astype(np.uint64))
        return None

    def _open(self) -> bool:
        """Map the file now at ``path`` (a new shard's, if the run directory was made again)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if st.st_size < SIZE:
                return False
            new = mmap.mmap(fd, min(st.st_size, FILE_SIZE), prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._map, self._inode = new, (st.st_dev, st.st_ino)  # the old map closes when no thread holds it
        return True

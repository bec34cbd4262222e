"""Write-ahead log: append + fsync before a write is acknowledged; group commit; fast replay.

A segment is a file of records ``[u32 length][u32 crc32][payload]``. Concurrent appends wait on
one writer thread that writes everything pending and fsyncs once (group commit), so N concurrent
requests cost one fsync. A record torn by a crash fails its CRC; replay stops there and the
segment is truncated (such a record was never acknowledged: the ack comes after fsync).
Records are encoded on the writer thread by a per-segment encoder (walcodec.py), so a segment
replays on its own; a write that fails abandons its segment (see ``WAL``).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

from ..files.fsync import fsync_dir
from .segment_file import SegmentFile, pwrite_all

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
_SEGMENT_SUFFIX = ".wal"
_PROBE_NAME = "probe.tmp"
_PROBE_BYTES = 64 * 1024
# write_here writes on the caller's thread while a write (fsync included) takes less than this: a local SSD's
# fsync (~0.2 ms) costs about what the hand-offs to the writer thread and back cost; a slower disk is better
# served by the writer's group commit.
INLINE_WRITE_S = 0.001


def segment_name(seq: int) -> str:
    return f"{seq:08d}{_SEGMENT_SUFFIX}"


def list_segments(wal_dir: str) -> list[int]:
    out = []
    for name in os.listdir(wal_dir):
        if name.endswith(_SEGMENT_SUFFIX) and name[: -len(_SEGMENT_SUFFIX)].isdigit():
            out.append(int(name[: -len(_SEGMENT_SUFFIX)]))
    return sorted(out)


def read_segment(path: str) -> Iterator[bytes]:
    """Yield intact records; truncate the file at the first torn or corrupt one, or at the zeros a writer
    that died left after its records (segment_file.py; no record has length 0)."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos, end = 0, len(data)
    while pos + _HEADER.size <= end:
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        if length == 0 or start + length > end or zlib.crc32(data[start:start + length]) != crc:
            break
        yield data[start:start + length]
        pos = start + length
    if pos != end and data.count(0, pos) == end - pos:
        with open(path, "r+b") as fh:  # the zero-filled rest: the records ended cleanly
            fh.truncate(pos)
    elif pos != end:
        log.warning("WAL segment %s: torn record at byte %d of %d, truncating (it was never acknowledged)",
                    path, pos, end)
        with open(path, "r+b") as fh:
            fh.truncate(pos)
            os.fsync(fh.fileno())


@dataclass
class _Pending:
    record: object
    done: Callable[[BaseException | None], None]


class WAL:
    """One writer thread owns the open segment; callers ``submit`` records and are told when
    they are on disk (fsync'd) or failed. ``new_encoder()`` gives the encoder of a new segment
    (its ``encode(record) -> bytes`` runs on the writer thread, in write order).

    ``write_here`` writes a record on the caller's thread instead, when the writer is idle and fsync is quick:
    the two thread hand-offs of ``submit`` (to the writer and back to the caller's event loop) cost about as much
    as an fsync of a local disk. The segment has one writer at a time either way (``_writing``), and records
    stay in submission order (a record is written here only when none is pending).

    Failures have one defined state, never a dead thread: a write, fsync or segment open that
    fails answers its records with the error, abandons the segment (truncated back to its last
    good record where possible; nothing is appended after a record that may be torn), and marks
    the WAL unwritable (``error``). While unwritable the writer probes the disk every
    ``probe_interval_s`` (a new segment must open and a test write must fsync); the first
    success, by a probe or a write, makes it writable again. Segments are opened lazily, so a
    cut never does I/O that could fail and never leaves its caller waiting.
    """

    def __init__(self, wal_dir: str, segment_size: int, new_encoder: Callable[[], object], fsync: bool = True,
                 on_fsync: Callable[[float, int], None] | None = None,
                 on_health: Callable[[BaseException | None, bool], None] | None = None,
                 probe_interval_s: float = 1.0, after_segment: int = 0):
        """``after_segment``: the highest segment number ever cut (the table's committed cut): new segments
        are numbered above it even when a clean shutdown left the directory empty, or a commit covering
        that number would also cover them and a restart after kill -9 would delete them unreplayed.

        ``fsync``: False writes records to the operating system only (--storage.wal-fsync=false): a record is then
        safe from the death of this process, not from the machine's; segments are still synced when closed."""
        self.dir = wal_dir
        os.makedirs(wal_dir, exist_ok=True)
        self.segment_size = segment_size
        self._fsync = fsync
        self._on_fsync = on_fsync
        self._on_health = on_health
        self._new_encoder = new_encoder
        self._probe_interval_s = probe_interval_s
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._closed = False
        self.error: BaseException | None = None  # why the WAL cannot be written now; None = writable
        segs = list_segments(wal_dir)
        self._seq = max(segs[-1] if segs else 0, after_segment) + 1  # the segment the next record goes to
        self._seg: SegmentFile | None = None  # opened at the first write
        self._encoder = None
        self._cut_requested = False
        self._cut_done = threading.Event()
        self._writing = False  # the segment is being written (by the writer thread or by write_here)
        self._write_s = 0.0  # how long the last write took, fsync included: write_here only while it is quick
        self._probe()  # know at once (for /-/ready) whether a restart found the disk full
        self._thread = threading.Thread(target=self._run, name="wal-writer", daemon=True)
        self._thread.start()

    @property
    def current_segment(self) -> int:
        return self._seq

    def _open_segment(self) -> None:
        self._seg = SegmentFile(os.path.join(self.dir, segment_name(self._seq)), self.segment_size)
        self._encoder = self._new_encoder()
        fsync_dir(self.dir)

    def submit(self, record, done: Callable[[BaseException | None], None]) -> None:
        with self._cond:
            if self._closed:
                raise OSError("WAL is closed")
            self._pending.append(_Pending(record, done))
            self._cond.notify()

    def write_here(self, record) -> tuple[BaseException | None] | None:
        """Write and fsync ``record`` now, on this thread: ``(error or None,)``; or None, not written, when the
        writer thread has work or the last write was slow (then ``submit`` it: the writer groups the records
        that come during a slow fsync into one)."""
        with self._cond:
            if (self._writing or self._pending or self._closed or self._cut_requested or self.error is not None
                    or self._write_s > INLINE_WRITE_S):
                return None
            self._writing = True
        result: list[BaseException | None] = []
        try:
            self._write([_Pending(record, result.append)])
            if self._seg is not None and self._seg.size >= self.segment_size:
                self._close_segment()
                self._seq += 1
        finally:
            with self._cond:
                self._writing = False
                # The writer waits for the segment, or must start probing the disk this write found failing;
                # else it sleeps on (waking it for nothing costs a GIL hand-off a request).
                if self._pending or self._cut_requested or self._closed or self.error is not None:
                    self._cond.notify_all()
        return (result[0],)

    def cut(self) -> int:
        """Start a new segment; returns the number of the last closed one. Records appended before
        this call are in segments <= the returned number."""
        with self._cond:
            if self._closed:
                raise OSError("WAL is closed")
            self._cut_done.clear()
            self._cut_requested = True
            self._cond.notify()
        while not self._cut_done.wait(1.0):
            if not self._thread.is_alive():
                raise OSError("WAL writer thread is gone")
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
                while self._writing or (not self._pending and not self._cut_requested and not self._closed):
                    if self._writing or self.error is None:
                        self._cond.wait()
                    elif not self._cond.wait(self._probe_interval_s):
                        break  # idle while unwritable: probe
                batch, self._pending = self._pending, []
                cut, self._cut_requested = self._cut_requested, False
                closing = self._closed
                self._writing = True
            try:
                if batch:
                    self._write(batch)
                elif self.error is not None and not closing:
                    self._probe()
                if cut or (self._seg is not None and self._seg.size >= self.segment_size and not closing):
                    self._close_segment()
                    self._seq += 1
            except Exception:  # a bug, not I/O (handled in _write/_probe): log it, keep the writer alive
                log.exception("WAL writer: unexpected error")
            finally:
                if cut:
                    self._cut_done.set()
            if closing and not batch:
                self._close_segment()
                self._cut_done.set()  # wake a cut() that raced with close()
                return
            with self._cond:
                self._writing = False

    def _write(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        err: BaseException | None = None
        start = None
        try:
            if self._seg is None:
                self._open_segment()
            start = self._seg.size
            buf = bytearray()
            for p in batch:
                payload = self._encoder.encode(p.record)
                buf += _HEADER.pack(len(payload), zlib.crc32(payload))
                buf += payload
            self._seg.append(buf)
            # fdatasync: the records (and the file's new length when they lengthen it), without its times (a third
            # less than fsync here); the segment's directory entry was made durable when it was opened (PostgreSQL's
            # WAL default)
            if self._fsync:
                self._seg.sync()
        except Exception as e:  # disk full, I/O error: the senders get a 5xx and retry
            err = e
            self._abandon_segment(start)
        self._set_health(err, write=True)
        self._write_s = time.perf_counter() - t0
        if self._on_fsync and err is None:
            self._on_fsync(self._write_s, len(batch))
        for p in batch:
            p.done(err)

    def _abandon_segment(self, good_size: int | None) -> None:
        """After a failed write: cut the segment back to its last good record if we can, and
        never append to it again (its tail may be torn; the encoder state counted the failed
        records). The next write opens a new segment."""
        if self._seg is None:
            return
        if good_size is not None:
            try:
                self._seg.truncate(good_size)
            except OSError:
                pass  # replay stops at the torn record, the end of this segment: nothing follows it
        self._close_segment()
        self._seq += 1

    def _close_segment(self) -> None:
        seg, self._seg, self._encoder = self._seg, None, None
        if seg is not None:
            try:
                if not self._fsync:  # its records, written unsynced, reach the disk at the latest here
                    seg.sync()
                seg.close()
            except OSError:
                pass

    def _probe(self) -> None:
        """Can the WAL be written again? A segment must open and a test write must reach the disk."""
        err: BaseException | None = None
        probe = os.path.join(self.dir, _PROBE_NAME)
        try:
            if self._seg is None:
                self._open_segment()
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                pwrite_all(fd, bytes(_PROBE_BYTES), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            err = e
        finally:
            try:
                os.remove(probe)
            except OSError:
                pass
        self._set_health(err, write=False)

    def _set_health(self, err: BaseException | None, write: bool) -> None:
        was = self.error
        self.error = err
        if err is not None and was is None:
            log.error("WAL cannot be written, writes answer 503 until it can: %s", err)
        elif err is None and was is not None:
            log.warning("WAL writable again (it failed with: %s)", was)
        if self._on_health:
            self._on_health(err, write)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)

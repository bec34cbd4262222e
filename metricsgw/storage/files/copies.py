"""This process's copies of other writers' sample files, fetched from the object store when a read needs them and
kept within a byte budget (``--storage.s3.cache-size``), least recently read out first; a copy being read is never
dropped.

Only with a table on a store and a budget: then a snapshot's samples files of other writers are not fetched when the
snapshot is taken (table.py), but here, when a query's plan chose them (storage/read/plan.py keeps only the files
whose add-action min/max of t meet the query's window: the table's statistics prune before anything is fetched).
Side files (series, spans, histograms, exemplars) and this writer's own files are small or written here, and stay
copied whole under --storage.path as before.

The copies are under ``<--storage.path>/cache/<writer id>/``, one directory per process (every process of a gateway
has its own writer id): one process never deletes a copy another is reading. A directory left by an earlier run of
the same writer id is emptied at start (nothing tracks its copies).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from .object_store import ObjectStore


class Copies:
    def __init__(self, store: ObjectStore, root: str, writer_id: str, budget: int, threads: int) -> None:
        self.store = store
        self.root = root  # --storage.path: the table's paths are under it, and their store names relative to it
        self.dir = os.path.join(root, "cache", writer_id)
        self.budget = budget
        self._threads = threads
        self._lock = threading.Lock()
        self._held: OrderedDict[str, int] = OrderedDict()  # table path -> bytes of its copy, least recently read first
        self._reading: Counter[str] = Counter()  # table path -> reads using its copy now
        self._fetching: dict[str, threading.Event] = {}  # table path -> set once its fetch ended
        self.fetched = 0  # files fetched so far (a hint: what the budget and the pruning saved shows in it)

    def open(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def copy_of(self, path: str) -> str:
        return os.path.join(self.dir, os.path.relpath(path, self.root))

    @contextmanager
    def reading(self, paths: list[str]) -> Iterator[list[str]]:
        """The local copies of ``paths`` (table paths of other writers' sample files), fetched where missing, held
        until the block ends."""
        with self._lock:
            self._reading.update(paths)
        try:
            self._fetch([p for p in dict.fromkeys(paths) if self._claim(p)])
            with self._lock:
                for p in paths:
                    self._held.move_to_end(p)
            yield [self.copy_of(p) for p in paths]
        finally:
            with self._lock:
                self._reading.subtract(paths)
                self._reading += Counter()  # drop the zeros
            self.trim()

    def _claim(self, path: str) -> bool:
        """Whether this caller fetches ``path`` (False: it is here, or another read fetches it and is waited for)."""
        while True:
            with self._lock:
                if path in self._held:
                    return False
                pending = self._fetching.get(path)
                if pending is None:
                    self._fetching[path] = threading.Event()
                    return True
            pending.wait()
            with self._lock:
                if path in self._held:
                    return False
            # that fetch failed: try again, as this caller

    def _fetch(self, paths: list[str]) -> None:
        def one(p: str) -> None:
            try:
                copy = self.copy_of(p)
                self.store.get(os.path.relpath(p, self.root), copy)
                with self._lock:
                    self._held[p] = os.path.getsize(copy)
                    self.fetched += 1
            finally:
                with self._lock:
                    self._fetching.pop(p).set()

        if paths:
            with ThreadPoolExecutor(min(self._threads, len(paths))) as pool:
                list(pool.map(one, paths))

    def trim(self) -> None:
        """Drop the least recently read copies no read holds until the rest fit the budget."""
        with self._lock:
            total = sum(self._held.values())
            drop = []
            for p, size in self._held.items():
                if total <= self.budget:
                    break
                if not self._reading[p]:
                    drop.append(p)
                    total -= size
            for p in drop:
                del self._held[p]
        self._remove(drop)

    def forget(self, paths: list[str]) -> None:
        """Files the table no longer lists, once nothing pins them: their copies go now."""
        with self._lock:
            gone = [p for p in paths if self._held.pop(p, None) is not None]
        self._remove(gone)

    def _remove(self, paths: list[str]) -> None:
        for p in paths:
            try:
                os.remove(self.copy_of(p))
            except FileNotFoundError:
                pass

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(self._held.values())

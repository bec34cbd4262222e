"""A query's independent parts (batches of series) evaluated on the process's spare cores.

numpy lets go of the GIL inside its loops, so two threads each evaluating a batch of series
run on two cores for most of a heavy panel's time (``top talkers``: 105 -> 57 ms a query when
two ran at once; docs/processes.md). A query alone on a quiet process therefore uses every core
its process has, as VictoriaMetrics does with ``-search.maxWorkersPerQuery``.

Spare cores are taken, never waited for: a part runs on a helper thread only when one is idle,
otherwise in the query's own thread. Under a dashboard's burst of concurrent queries every
query keeps to its own thread, and no query can queue behind another's parts.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Parts:
    """Evaluates items with ``fn`` on up to ``workers`` cores; results come back in item order."""

    def __init__(self, workers: int, initializer: Callable[[], None] | None = None) -> None:
        self.workers = max(1, int(workers))
        self._spare = threading.Semaphore(self.workers - 1)
        self._pool = (ThreadPoolExecutor(self.workers - 1, thread_name_prefix="query-part", initializer=initializer)
                      if self.workers > 1 else None)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """``fn(item)`` for every item, in order. At most ``workers`` items are in flight at once
        (so at most that many batches are held); the caller's thread evaluates an item whenever no
        helper is idle. A failure is raised in order, after the parts running beside it finish."""
        if self._pool is None:
            yield from map(fn, items)
            return
        pending: deque[Future] = deque()
        try:
            for item in items:
                pending.append(self._start(fn, item))
                while pending and (len(pending) >= self.workers or pending[0].done()):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            # Parts still running charge the query's context: they finish before it is released.
            wait(pending)

    def _start(self, fn: Callable[[T], R], item: T) -> Future:
        if self._spare.acquire(blocking=False):
            try:
                return self._pool.submit(self._on_helper, fn, item)
            except BaseException:
                self._spare.release()
                raise
        done: Future = Future()
        try:
            done.set_result(fn(item))
        except Exception as e:  # raised in order, once the parts before it are taken
            done.set_exception(e)
        return done

    def _on_helper(self, fn: Callable[[T], R], item: T) -> R:
        try:
            return fn(item)
        finally:
            self._spare.release()

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

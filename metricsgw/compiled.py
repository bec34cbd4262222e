"""The compiled (numba) kernels, loaded in the background when a process starts: importing numba and loading
the kernels from its on-disk cache takes ~0.5 s and ~60 MiB (a first compile, a few seconds), better spent at
start (while the WAL replays) than on the first write or query. The write path's kernels load in processes that
take writes, the range query's (promql/window_kernels.py) in processes that evaluate PromQL; the front loads
none and never imports numba."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

_started: set[str] = set()
_starting = threading.Lock()


def start_loading(writes: bool = True, queries: bool = False) -> None:
    """Load the write path's kernels (``writes``) and the range query's (``queries``) in a background thread,
    each once a process: at the process' start, or at the first write that comes (api/remote_write.py, in a
    process that did not load them at start)."""
    with _starting:
        wanted = [part for part, on in (("writes", writes), ("queries", queries)) if on and part not in _started]
        _started.update(wanted)
    if wanted:
        threading.Thread(target=_load, args=(wanted,), name="kernels-load", daemon=True).start()


def _load(parts: list[str]) -> None:
    if "writes" in parts:
        from .ingest import known_series
        from .remote import native_scan, scrape_scan

        try:
            scrape_scan.load()
            native_scan.load()
            known_series.warm()
        except Exception as err:  # the scan falls back to numpy; the table loads (and says why not) at first use
            log.warning("compiled write-path kernels not loaded, the scan takes the numpy path: %s", err)
    if "queries" in parts:
        from .promql import histogram_scalars, window_kernels

        window_kernels.load()  # says itself why not, and the numpy paths answer
        histogram_scalars.load()  # the same

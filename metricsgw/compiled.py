"""The write path's compiled (numba) kernels, loaded in the background when a process that takes writes
starts: importing numba and loading the kernels from its on-disk cache takes ~0.5 s and ~60 MiB (a first
compile, ~3 s), better spent while the WAL replays than on the first write. Processes that take no writes
(the front, query processes) never import numba."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

_started = False
_starting = threading.Lock()


def start_loading() -> None:
    """Load them in a background thread, once a process: at a writer's start, or at the first write that
    comes (api/remote_write.py, in a process that did not load them at start)."""
    global _started
    with _starting:
        if _started:
            return
        _started = True
    threading.Thread(target=_load, name="kernels-load", daemon=True).start()


def _load() -> None:
    from .ingest import known_series
    from .remote import native_scan, scrape_scan

    try:
        scrape_scan.load()
        native_scan.load()
        known_series.warm()
    except Exception as err:  # the scan falls back to numpy; the table loads (and says why not) at first use
        log.warning("compiled write-path kernels not loaded, the scan takes the numpy path: %s", err)

"""Runs a test on the numpy paths of the window search and the rate family instead of the compiled kernels
(promql/window_kernels.py), which the test session loads (tests/conftest.py): the two must answer alike."""

from __future__ import annotations

import contextlib

from metricsgw.promql import window_kernels


@contextlib.contextmanager
def numpy_windows(on: bool = True):
    if not on:
        yield
        return
    window_kernels.unload()
    try:
        yield
    finally:
        assert window_kernels.load()

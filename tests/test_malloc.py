"""malloc.trim_after: a big query is trimmed after at once, small ones once queries stop for a moment."""

import gc
import time
import weakref

import numpy as np
import pytest

from metricsgw import malloc


class _FakeLibc:
    def __init__(self) -> None:
        self.trims: list[float] = []

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(time.monotonic())
        return 1


def _fake(monkeypatch, idle_s: float) -> _FakeLibc:
    for timer in (malloc._idle, malloc._pending):  # left by servers of earlier tests in this process
        if timer is not None:
            timer.cancel()
    lib = _FakeLibc()
    monkeypatch.setattr(malloc, "_libc", lib)
    monkeypatch.setattr(malloc, "IDLE_TRIM_S", idle_s)
    monkeypatch.setattr(malloc, "_last_trim", 0.0)
    monkeypatch.setattr(malloc, "_idle", None)
    monkeypatch.setattr(malloc, "_pending", None)
    return lib


def test_small_queries_are_trimmed_once_they_stop(monkeypatch):
    lib = _fake(monkeypatch, 1.0)
    for _ in range(5):  # a dashboard's panels, back to back: no trim between them
        malloc.trim_after(1 << 20)
        time.sleep(0.05)
    last = time.monotonic()
    malloc.trim_after(1 << 20)
    assert lib.trims == []
    deadline = last + 10
    while not lib.trims and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(lib.trims) == 1 and lib.trims[0] - last >= 1.0  # idle time counted from the last query
    assert malloc._idle is None


def test_a_big_query_is_trimmed_at_once(monkeypatch):
    lib = _fake(monkeypatch, 60.0)
    malloc.trim_after(malloc.TRIM_AFTER_BYTES)
    assert len(lib.trims) == 1
    malloc._idle.cancel()


def _cycle(freed: list) -> None:
    """Garbage only the cycle collector frees: two objects referring to each other."""
    class Node:
        pass

    a, b = Node(), Node()
    a.peer, b.peer = b, a
    weakref.finalize(a, freed.append, "cycle")


def test_trimming_after_a_big_query_frees_cycles_first(monkeypatch):
    """gcpolicy makes collections rare: a cycle a big query left (and the arrays it holds) goes with the trim."""
    lib = _fake(monkeypatch, 60.0)
    freed: list = []
    gc.disable()  # no collection but the one under test
    try:
        _cycle(freed)
        assert freed == []
        malloc.trim_after(malloc.TRIM_AFTER_BYTES)
        assert freed == ["cycle"] and len(lib.trims) == 1
    finally:
        gc.enable()


def test_trimming_collects_only_the_young_generations(monkeypatch):
    """A full collection walks every container a query process holds (its series table: ~1 s at 2.7M series,
    measured in bench.scale), with the GIL held; what a query left behind is young."""
    _fake(monkeypatch, 60.0)
    generations: list = []

    def seen(phase, info):
        if phase == "start":
            generations.append(info["generation"])

    gc.disable()  # no automatic collection (of any generation) but the one under test
    gc.callbacks.append(seen)
    try:
        malloc.trim_after(malloc.TRIM_AFTER_BYTES)
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
    assert generations and max(generations) < 2


def test_a_trim_gives_back_arrows_pool_too(monkeypatch):
    """Arrow's mimalloc pool keeps the pages of freed buffers as glibc's arenas do: a query process that only
    trimmed glibc held ~1 GiB of Pss at 500 nodes under 4 dashboards (malloc_trim gave back 30 MiB of it)."""
    lib = _fake(monkeypatch, 60.0)
    released = []

    class Pool:
        def release_unused(self) -> None:
            released.append(True)

    monkeypatch.setattr(malloc.pa, "default_memory_pool", Pool)
    malloc.trim_after(malloc.TRIM_AFTER_BYTES)
    assert len(lib.trims) == 1 and released == [True]
    malloc._idle.cancel()


def test_heap_bytes_sees_what_is_allocated():
    """/metrics' metricsgw_memory_bytes{part}: 64 MiB allocated show in glibc's figures, and go when freed."""
    if "malloc_in_use" not in malloc.heap_bytes():
        pytest.skip("glibc >= 2.33 only")
    # The figures are the whole process': a thread an earlier test left (a server's, a pool's) may free memory between
    # the two readings, so the allocation is measured again, up to 3 times, until a pair of readings sees it alone.
    for _ in range(3):
        before = malloc.heap_bytes()
        a = np.ones(8 << 20)  # 64 MiB
        held = malloc.heap_bytes()
        grown = (held["malloc_in_use"] + held["malloc_mapped"]) - (before["malloc_in_use"] + before["malloc_mapped"])
        del a
        after = malloc.heap_bytes()
        if grown >= 64 << 20:
            break
    assert grown >= 64 << 20
    assert (after["malloc_in_use"] + after["malloc_mapped"]) - (before["malloc_in_use"] + before["malloc_mapped"]) < 8 << 20
    assert set(after) == {"arrow_pool", "malloc_in_use", "malloc_free", "malloc_mapped"}


def test_restart_env_preloads_jemalloc_once(monkeypatch):
    monkeypatch.setattr(malloc, "_je", False)  # this test process runs on glibc
    monkeypatch.setattr(malloc, "jemalloc_path", lambda: "/usr/lib/x/libjemalloc.so.2")
    env = malloc.restart_env("auto", {"PATH": "/bin", "LD_PRELOAD": "/opt/other.so"})
    assert env["LD_PRELOAD"] == "/usr/lib/x/libjemalloc.so.2 /opt/other.so" and env["PATH"] == "/bin"
    assert env["MALLOC_CONF"] == malloc.JEMALLOC_CONF and env[malloc.EXEC_MARK] == "auto"
    assert malloc.restart_env("jemalloc", {"MALLOC_CONF": "narenas:2"})["MALLOC_CONF"] == "narenas:2"  # the user's
    assert malloc.restart_env("auto", env) is None  # started again already: never a loop
    assert malloc.restart_env("glibc", {}) is None


def test_restart_env_without_jemalloc(monkeypatch):
    monkeypatch.setattr(malloc, "_je", False)
    monkeypatch.setattr(malloc, "jemalloc_path", lambda: None)
    assert malloc.restart_env("auto", {}) is None  # goes on with glibc
    with pytest.raises(ValueError, match="apt-get install libjemalloc2"):
        malloc.restart_env("jemalloc", {})

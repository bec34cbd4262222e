"""Shared by the ingest tests: a real Storage on a fresh directory."""

import pytest

from metricsgw.storage.store import Storage


@pytest.fixture
def storage(tmp_path):
    s = Storage(str(tmp_path / "data"))
    s.open()
    yield s
    s.close(flush=False)

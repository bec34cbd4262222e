"""The writer-id rule (model.py): the id names the table's files, so it is a whole-string rule like the label
and metric name rules beside it, and the setting is checked by it at load."""

from __future__ import annotations

import pytest

from metricsgw.config import load
from metricsgw.model import check_writer_id


@pytest.mark.parametrize("writer_id", ["gw0", "_a", "a-b_C9", "w" * 64])
def test_a_writer_id_of_letters_digits_underscores_and_dashes_passes(writer_id):
    assert check_writer_id(writer_id) == writer_id


@pytest.mark.parametrize("writer_id", ["", "-a", "a.b", "a/b", "w" * 65, "gw0\n"])
def test_any_other_writer_id_is_refused(writer_id):
    with pytest.raises(ValueError, match="--storage.writer-id"):
        check_writer_id(writer_id)


def test_the_setting_is_checked_at_load():
    with pytest.raises(ValueError, match="--storage.writer-id"):
        load({"storage.writer-id": "a/b"})

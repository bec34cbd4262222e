"""A column's values packed and as Arrow: every value a series key can hold comes back the same."""

from __future__ import annotations

import pyarrow as pa
import pytest

from metricsgw.storage.catalog import packed_values

VALUES = ["", "a", "日本語", "é", "x" * 300, "\udcff\udcfebytes that are not UTF-8", "a"[:0] + "z"]


def test_pack_and_unpack_round_trip_including_bytes_that_are_not_utf8():
    arr = packed_values.encode(VALUES)
    assert arr.type == pa.binary() and arr[5].as_py() == b"\xff\xfebytes that are not UTF-8"
    back = packed_values.unpack(packed_values.pack_list(VALUES))
    assert back.equals(arr) and packed_values.decode(back) == VALUES
    assert packed_values.decode(packed_values.unpack(packed_values.pack(arr.slice(2, 3)))) == VALUES[2:5]
    assert packed_values.decode(packed_values.unpack(packed_values.pack_list([]))) == []


def test_positions_of_wanted_values_among_held_ones():
    held = packed_values.encode(["", "a", "b", "日本"])
    wanted = packed_values.encode(["日本", "zz", "", "b"])
    assert packed_values.positions(wanted, held).tolist() == [3, -1, 0, 2]
    assert packed_values.positions(packed_values.encode([]), held).tolist() == []


def test_packed_values_cut_short_are_refused():
    packed = packed_values.pack_list(VALUES)
    import zstandard
    raw = zstandard.ZstdDecompressor().decompress(packed)
    with pytest.raises(ValueError):
        packed_values.unpack(zstandard.ZstdCompressor().compress(raw[:-3]))

"""Many series keys (``model.series_key``: ``name\\xfevalue\\xffname\\xfevalue...``) split into
dictionary-encoded (series, label name, label value) rows at once, with no Python work per series.

Start-up meets every series at once (a million, from the series table and the WAL): turning each
key into a tuple of Python strings cost ~15 s there. Valid UTF-8 never holds the bytes 0xFE and
0xFF, so the separators are found with one numpy scan over all keys joined; the names and values
then become one Arrow binary array (offsets into the joined bytes) that Arrow dictionary-encodes
in C. Python work is left per *distinct* name and value only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import packed_values


@dataclass
class SplitKeys:
    series: np.ndarray  # per label row: index of its key
    name_codes: np.ndarray  # per label row: index into names
    names: list[str]
    value_codes: np.ndarray  # per label row: index into value_bytes
    value_bytes: pa.BinaryArray  # the distinct values, as the keys hold them (packed_values.py)

    def value(self, i: int) -> str:
        return packed_values.decode(self.value_bytes.slice(i, 1))[0]


def split_keys(keys: list[bytes]) -> SplitKeys:
    lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    joined = b"".join(keys)
    buf = np.frombuffer(joined, np.uint8)
    sep = np.flatnonzero(buf >= 0xFE)  # one scan finds both separators
    is_fe = buf[sep] == 0xFE
    fe, ff = sep[is_fe], sep[~is_fe]  # fe: between a name and its value, one per pair; ff: between pairs
    # Each pair holds one 0xFE: it starts after the 0xFF before it (or at its key's start) and
    # ends at the 0xFF after it (or at its key's end).
    if len(fe) != len(ff) + np.count_nonzero(lengths):
        raise ValueError("malformed series keys: every label needs one name/value separator")
    series = np.searchsorted(ends, fe, "right")
    before = np.r_[-1, ff, len(buf)]  # the 0xFF around each 0xFE: before[k] and before[k + 1]
    k = np.flatnonzero(is_fe) - np.arange(len(fe))  # 0xFF bytes before each 0xFE
    pair_start = np.maximum(starts[series], before[k] + 1)
    pair_end = np.minimum(ends[series], before[k + 1])
    # One binary array over the joined bytes with four elements a pair: name, 0xFE, value, gap
    # (0xFF, or nothing between keys); names and values are taken out of it by position.
    npairs = len(fe)
    offsets = np.empty(4 * npairs + 1, np.int64)
    offsets[0:-1:4], offsets[1::4], offsets[2::4], offsets[3::4] = pair_start, fe, fe + 1, pair_end
    offsets[-1] = len(buf)
    parts = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                             [None, pa.py_buffer(offsets), pa.py_buffer(joined)])
    names = pc.dictionary_encode(parts.take(pa.array(np.arange(0, 4 * npairs, 4))))
    values = pc.dictionary_encode(parts.take(pa.array(np.arange(2, 4 * npairs, 4))))
    return SplitKeys(series, names.indices.to_numpy().astype(np.int64), packed_values.decode(names.dictionary),
                     values.indices.to_numpy().astype(np.int64), values.dictionary.cast(pa.binary()))

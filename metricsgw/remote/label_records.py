"""The label records of many v1 series, each distinct record found once.

A scrape's new series repeat their labels: 2,000 series of a GPU cluster hold ~19,000 label records but only
~500 distinct ones (``job``, ``gpu="3"``, ``Hostname``, ``__name__`` ...). Turning every record into two
``str`` objects, a pair and a key piece cost ~300 ns a record in Python (``fastscan.label_strings``). Here the
records are told apart with numpy (each record's bytes as fixed-width words, hashed, grouped, and every
record compared whole with its group's first: the grouping is exact, a hash collision only sends the request
the slower way), and the Python work is done once per distinct record.

Taken for the layout ``fastscan.ascii_label_records`` finds (ASCII, [0x0A len][0x0A n name][0x12 v value]), as
``label_strings`` is; None otherwise (the caller decodes the labels as before). Its pad (256 bytes) keeps the
widest window (136 bytes; a record is at most 129) inside the buffer.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .fastscan import ascii_label_records

_WIDTHS = (16, 32, 64, 136)  # bytes per window: a record goes to the narrowest that holds it
_MULTIPLIERS = np.random.default_rng().integers(1, 2**63, 136 // 8, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


@dataclass
class LabelRecords:
    """``counts[i]`` labels of series i are ``uid[first[i]:first[i] + counts[i]]`` (sender order), each the index
    of a distinct record: its name and value as text, and its piece of ``model.series_key`` (name 0xFE value)."""

    counts: np.ndarray
    uid: np.ndarray
    names: list[str]
    values: list[str]
    pieces: list[bytes]


def distinct_label_records(keys: list[bytes], counts: np.ndarray) -> LabelRecords | None:
    """``keys``: each series' label records as sent; ``counts``: how many each holds."""
    found = ascii_label_records(keys, counts) if int(counts.sum()) else None
    if found is None:
        return None
    flat, buf, used, rec, n, v = found
    uid, firsts = _group(buf, rec, n + v + 6)
    if uid is None:
        return None
    text = flat[:used].decode("ascii")
    at = rec[firsts]
    n_at, v_at = n[firsts], v[firsts]
    names = [sys.intern(text[a + 4:a + 4 + k]) for a, k in zip(at.tolist(), n_at.tolist())]
    values = [text[a + 6 + k:a + 6 + k + j] for a, k, j in zip(at.tolist(), n_at.tolist(), v_at.tolist())]
    pieces = [f"{a}\xfe{b}".encode("latin-1") for a, b in zip(names, values)]  # ASCII: one byte a char
    return LabelRecords(counts, uid, names, values, pieces)


def _group(buf: np.ndarray, rec: np.ndarray, size: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(the distinct record of each record, the first record of each distinct one), exact; (None, _) when two
    different records hashed alike (then the request goes the way that needs no grouping)."""
    uid = np.empty(len(rec), np.int64)
    firsts = []
    base = 0
    lower = 0
    for width in _WIDTHS:
        sel = np.flatnonzero((size > lower) & (size <= width))
        lower = width
        if not len(sel):
            continue
        words = _words(buf, rec[sel], size[sel], width)
        h = (words * _MULTIPLIERS[:width // 8]).sum(axis=1, dtype=np.uint64)
        _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
        if not (words == words[first[inverse]]).all():
            return None, np.empty(0, np.int64)
        uid[sel] = base + inverse.reshape(-1)
        firsts.append(sel[first])
        base += len(first)
    return uid, np.concatenate(firsts)


def _masks(width: int) -> np.ndarray:
    """Row s: the words that keep a record's first s bytes and zero the rest (little-endian)."""
    keep = np.clip(np.arange(width + 1)[:, None] - 8 * np.arange(width // 8), 0, 8).astype(np.uint64)
    partial = (np.uint64(1) << (np.uint64(8) * keep % np.uint64(64))) - np.uint64(1)
    return np.where(keep == 8, np.uint64(0xFFFFFFFFFFFFFFFF), partial)


_MASKS = {w: _masks(w) for w in _WIDTHS}


def _words(buf: np.ndarray, start: np.ndarray, size: np.ndarray, width: int) -> np.ndarray:
    """Each record's bytes, zero-padded to ``width``, as little-endian uint64 words (one row per record)."""
    windows = np.ndarray((len(buf) - width + 1,), f"V{width}", buffer=buf, strides=(1,))
    return windows[start].view("<u8").reshape(len(start), width // 8) & _MASKS[width][size]

"""Prometheus' ``labels.Labels.Hash()``, the hash ``limit_ratio`` samples series by (promql/engine.go,
HashRatioSampler), so that metricsgw keeps the very series Prometheus keeps.

Prometheus 3.14 has three builds of its labels package, with different hashes. Its release binaries (and
``go test``) build the default one, ``stringlabels`` (model/labels/labels_stringlabels.go): the hash is
XXH64 (seed 0, cespare/xxhash's Sum64) of the label set's own encoding, each name and then each value
preceded by its length: one byte below 255, else the byte 255 and the length in 3 bytes, little-endian;
labels sorted by name. (The ``slicelabels`` and ``dedupelabels`` builds hash the names and values separated
by 0xff bytes instead; no release is built so.)
"""

from __future__ import annotations

import numpy as np
import xxhash

from ..model import Labels

# float64(math.MaxUint64) as Go rounds it: 2**64
_MAX_UINT64_F = float(2 ** 64)


def _size(n: int) -> bytes:
    if n < 255:
        return bytes((n,))
    return bytes((255, n & 0xFF, (n >> 8) & 0xFF, (n >> 16) & 0xFF))


def encoding(labels: Labels) -> bytes:
    """The bytes of a label set as the stringlabels build holds them."""
    out = bytearray()
    for name, value in labels:
        for text in (name, value):
            # label strings reach metricsgw as UTF-8 (an undecodable byte kept as a surrogate escape)
            raw = text.encode("utf-8", "surrogateescape")
            out += _size(len(raw))
            out += raw
    return bytes(out)


def labels_hash(labels: Labels) -> int:
    return xxhash.xxh64_intdigest(encoding(labels))


def sample_offsets(labels: list[Labels]) -> np.ndarray:
    """HashRatioSampler.SampleOffset of each label set: float64(hash) / float64(MaxUint64), in [0, 1]."""
    hashes = np.fromiter((labels_hash(lb) for lb in labels), np.uint64, len(labels))
    # uint64 -> float64 rounds to nearest, as Go's conversion does
    return hashes.astype(np.float64) / _MAX_UINT64_F

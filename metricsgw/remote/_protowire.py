"""Protobuf wire reading shared by the compiled kernels (_scrape_kernel.py, _native_kernel.py,
promql/_histogram_kernel.py); imported only by them. numba's on-disk cache keys a kernel on its own file: after
changing this one, clear the kernels' cache (``__pycache__/*.nbi``/``*.nbc``) on a machine that ran them (a fresh
checkout compiles anew)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, boundscheck=True)
def varint(buf, p, end):
    """(value, position after it); position -1 if it runs past ``end`` or over 10 bytes."""
    value = np.uint64(0)
    shift = 0
    while p < end and shift < 70:
        b = buf[p]
        p += 1
        if shift == 63 and b > 1:  # past 64 bits: a malformed varint, as the generated code says
            return value, -1
        value |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            return value, p
        shift += 7
    return value, -1


@njit(cache=True, nogil=True, boundscheck=True)
def zigzag(u):
    """A sint32/sint64's varint, decoded."""
    return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1))


@njit(cache=True, nogil=True, boundscheck=True)
def bucket_span(buf, p, stop):
    """(offset, length, read) of the BucketSpan message ``buf[p:stop]`` (``sint32 offset = 1; uint32 length = 2``);
    read False for anything else in it (another field or wire type, a value over 32 bits, a varint past ``stop``)."""
    offset = np.int64(0)
    length = np.int64(0)
    while p < stop:
        key, p = varint(buf, p, stop)
        if p < 0 or (key & np.uint64(7)) != 0:
            return offset, length, False
        value, p = varint(buf, p, stop)
        if p < 0 or value > np.uint64(0xFFFFFFFF):
            return offset, length, False
        field = key >> np.uint64(3)
        if field == 1:
            offset = zigzag(value)
        elif field == 2:
            length = np.int64(value)
        else:
            return offset, length, False
    return offset, length, True

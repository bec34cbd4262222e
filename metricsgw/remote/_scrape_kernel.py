"""The numba kernel of scrape_scan.py (imported only by its loader: importing numba costs ~0.4 s and ~60 MiB,
which only a process taking writes pays).

The protobuf it reads (remote.proto): WriteRequest { repeated TimeSeries timeseries = 1;
repeated MetricMetadata metadata = 3; } and TimeSeries { repeated Label labels = 1; repeated Sample samples
= 2; ... }, Sample { double value = 1; int64 timestamp = 2; }. A series is taken in the layout every sender
we know writes: its label fields (tag 0x0A) first and contiguous, then one sample field (0x12) ending it,
the Sample as [0x09 f64]? [0x10 varint]?, zero values omitted; or, for a native histogram's series, one
histogram field (``repeated Histogram histograms = 4``, 0x22) ending it, whose bytes native_scan.py checks.
Anything else is NOT_THE_SHAPE.
"""

from __future__ import annotations

import numpy as np
import xxhash._xxhash as _xxhash_extension
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._protowire import varint

# python-xxhash's extension module exports libxxhash's symbols: the kernel calls the very XXH3 that
# xxhash.xxh3_128_digest runs (tests compare them byte for byte).
llvm_binding.load_library_permanently(_xxhash_extension.__file__)


@intrinsic
def _xxh3_128(typingctx, address, length, seed):
    """XXH3_128bits_withSeed(address, length, seed) -> (low64, high64). Declared by hand: it returns a struct
    of two uint64 (in two registers), which numba's external functions cannot express."""
    sig = types.UniTuple(types.uint64, 2)(types.uintp, types.uintp, types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.LiteralStructType([i64, i64]), [i64, i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "XXH3_128bits_withSeed")
        res = builder.call(fn, args)
        return context.make_tuple(builder, signature.return_type,
                                  [builder.extract_value(res, 0), builder.extract_value(res, 1)])

    return sig, codegen


@njit(cache=True, nogil=True, boundscheck=True)
def _count_fields(buf):
    """Top-level fields of the request, or -1 if its framing is broken."""
    n = len(buf)
    p = 0
    count = 0
    while p < n:
        length, p = varint(buf, p + 1, n)
        if p < 0 or length > np.uint64(n - p):
            return -1
        p += np.int64(length)
        count += 1
    return count


@njit(cache=True, nogil=True, boundscheck=True)
def scan(buf, seed):
    """(status, series, starts, label_ends, hash high halves, low halves, t, v, has_metadata, histogram starts,
    histogram ends): a series holding a histogram has its message at [histogram start, end), else -1."""
    n = len(buf)
    fields = _count_fields(buf)
    cap = max(fields, 0)
    starts = np.empty(cap, np.int64)
    label_ends = np.empty(cap, np.int64)
    hi = np.empty(cap, np.uint64)
    lo = np.empty(cap, np.uint64)
    t = np.zeros(cap, np.int64)
    v = np.zeros(cap, np.float64)
    v_bits = v.view(np.uint64)  # a value is stored as its 8 bytes: NaN payloads (stale markers) kept
    h_start = np.full(cap, -1, np.int64)
    h_end = np.full(cap, -1, np.int64)
    base = buf.ctypes.data
    has_metadata = False
    k = 0
    p = 0
    if fields < 0:
        return 0, 0, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
    while p < n:
        tag = buf[p]
        length, p = varint(buf, p + 1, n)
        end = p + np.int64(length)  # framing checked by _count_fields
        if tag == 0x1A:
            has_metadata = True
            p = end
            continue
        if tag != 0x0A:
            return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
        start = p
        while p < end and buf[p] == 0x0A:  # the label fields
            length, p = varint(buf, p + 1, end)
            if p < 0 or length > np.uint64(end - p):
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
            p += np.int64(length)
        label_end = p
        if p < end and buf[p] == 0x22:  # or exactly one histogram field, ending the series
            length, p = varint(buf, p + 1, end)
            if p < 0 or np.uint64(end - p) != length:
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
            h_start[k] = p
            h_end[k] = end
            p = end
        elif p >= end or buf[p] != 0x12:  # then exactly one sample field, ending the series
            return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
        else:
            length, p = varint(buf, p + 1, end)
            if p < 0 or np.uint64(end - p) != length:
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
        if p < end and buf[p] == 0x09:
            if end - p < 9:
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
            bits = np.uint64(0)
            for j in range(8):
                bits |= np.uint64(buf[p + 1 + j]) << np.uint64(8 * j)
            v_bits[k] = bits
            p += 9
        if p < end:
            if buf[p] != 0x10:
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
            stamp, p = varint(buf, p + 1, end)
            if p != end:
                return 0, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end
            t[k] = np.int64(stamp)  # two's complement: a negative timestamp is a 10-byte varint
        starts[k] = start
        label_ends[k] = label_end
        lo[k], hi[k] = _xxh3_128(np.uintp(base + start), np.uintp(label_end - start), seed)
        k += 1
    return 1, k, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end


def compiled_scan():
    """``scan``, compiled (or loaded from numba's cache) for a request's bytes: a first call does it."""
    empty = np.frombuffer(b"", np.uint8)
    scan(empty, np.uint64(0))
    return scan

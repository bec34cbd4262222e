"""The numba kernel of native_scan.py (imported only by its loader, as _scrape_kernel.py).

The message it reads (prometheus types.proto; remote write 2.0's Histogram has the same field numbers and wire
types):

    Histogram { oneof count { uint64 count_int = 1; double count_float = 2; } double sum = 3;
      sint32 schema = 4; double zero_threshold = 5;
      oneof zero_count { uint64 zero_count_int = 6; double zero_count_float = 7; }
      repeated BucketSpan negative_spans = 8; repeated sint64 negative_deltas = 9;
      repeated double negative_counts = 10; repeated BucketSpan positive_spans = 11;
      repeated sint64 positive_deltas = 12; repeated double positive_counts = 13;
      ResetHint reset_hint = 14; int64 timestamp = 15; repeated double custom_values = 16; }
    BucketSpan { sint32 offset = 1; uint32 length = 2; }

A histogram is ACCEPTED only when it is an integer histogram (count_int, zero_count_int, deltas) in the
encoding every sender writes (deltas and custom values packed) and passes every check of
native.histogram_problem; anything else, float histograms included, is LOOK_CLOSER and goes to the protobuf
parser and histogram_problem, which decide and word the refusal. So the kernel can only make the common case
faster, never change an answer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._protowire import bucket_span, varint, zigzag

LOOK_CLOSER = 0
ACCEPTED = 1


@njit(cache=True, nogil=True, boundscheck=True)
def _skip_fixed64(p, end):
    return p + 8 if end - p >= 8 else -1


@njit(cache=True, nogil=True, boundscheck=True)
def _one(buf, p, end):
    """(status, timestamp) of the histogram message ``buf[p:end]``."""
    count = np.int64(0)
    schema = np.int64(0)
    zero_count = np.int64(0)
    t = np.int64(0)
    # per side (negative, positive): buckets the spans need, spans seen, buckets given, the current absolute
    # count while the deltas are added up, and the sum of the absolute counts (wrapping as numpy's does)
    need_n = need_p = seen_n = seen_p = given_n = given_p = 0
    run_n = run_p = tot_n = tot_p = np.int64(0)
    while p < end:
        key, p = varint(buf, p, end)
        if p < 0:
            return LOOK_CLOSER, t
        field = key >> np.uint64(3)
        wire = key & np.uint64(7)
        if wire == 0:
            value, p = varint(buf, p, end)
            if p < 0:
                return LOOK_CLOSER, t
            if field == 1:
                if value >= np.uint64(1) << np.uint64(53):  # beyond exact floats: let the parser judge
                    return LOOK_CLOSER, t
                count = np.int64(value)
            elif field == 4:
                if value > np.uint64(0xFFFFFFFF):
                    return LOOK_CLOSER, t
                schema = zigzag(value)
            elif field == 6:
                if value >= np.uint64(1) << np.uint64(53):
                    return LOOK_CLOSER, t
                zero_count = np.int64(value)
            elif field == 14:
                if value > np.uint64(3):
                    return LOOK_CLOSER, t
            elif field == 15:
                t = np.int64(value)
            else:
                return LOOK_CLOSER, t
        elif wire == 1:
            if field != 3 and field != 5:  # sum, zero_threshold (count_float, zero_count_float: float histograms)
                return LOOK_CLOSER, t
            p = _skip_fixed64(p, end)
            if p < 0:
                return LOOK_CLOSER, t
        elif wire == 2:
            length, p = varint(buf, p, end)
            if p < 0 or length > np.uint64(end - p):
                return LOOK_CLOSER, t
            stop = p + np.int64(length)
            if field == 8 or field == 11:
                side = 1 if field == 11 else 0
                offset, span_length, read = bucket_span(buf, p, stop)
                if not read:
                    return LOOK_CLOSER, t
                if side == 1:
                    if seen_p > 0 and offset < 0:
                        return LOOK_CLOSER, t
                    seen_p += 1
                    need_p += span_length
                else:
                    if seen_n > 0 and offset < 0:
                        return LOOK_CLOSER, t
                    seen_n += 1
                    need_n += span_length
            elif field == 9 or field == 12:
                side = 1 if field == 12 else 0
                q = p
                while q < stop:
                    v2, q = varint(buf, q, stop)
                    if q < 0:
                        return LOOK_CLOSER, t
                    if side == 1:
                        run_p += zigzag(v2)
                        if run_p < 0:
                            return LOOK_CLOSER, t
                        tot_p += run_p
                        given_p += 1
                    else:
                        run_n += zigzag(v2)
                        if run_n < 0:
                            return LOOK_CLOSER, t
                        tot_n += run_n
                        given_n += 1
            elif field == 16:
                if length % np.uint64(8) != 0:
                    return LOOK_CLOSER, t
            else:  # float counts (10, 13): a float histogram
                return LOOK_CLOSER, t
            p = stop
        else:
            return LOOK_CLOSER, t
    if p != end:
        return LOOK_CLOSER, t
    if need_p != given_p or need_n != given_n:
        return LOOK_CLOSER, t
    if np.float64(tot_p) + np.float64(tot_n) > count:  # as histogram_problem adds them
        return LOOK_CLOSER, t
    if schema == -53:
        if seen_n > 0 or zero_count != 0:
            return LOOK_CLOSER, t
    elif schema < -4 or schema > 8:
        return LOOK_CLOSER, t
    return ACCEPTED, t


@njit(cache=True, nogil=True, boundscheck=True)
def check(buf, starts, ends):
    """Histogram i is ``buf[starts[i]:ends[i]]``: (status per histogram, timestamp per histogram)."""
    n = len(starts)
    status = np.zeros(n, np.uint8)
    t = np.zeros(n, np.int64)
    for i in range(n):
        if starts[i] < 0 or ends[i] < starts[i] or ends[i] > len(buf):
            continue  # LOOK_CLOSER
        s, stamp = _one(buf, starts[i], ends[i])
        status[i] = s
        t[i] = stamp
    return status, t


def compiled_check():
    """``check``, compiled (or loaded from numba's cache): a first call does it."""
    check(np.frombuffer(b"", np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return check

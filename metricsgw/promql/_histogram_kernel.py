"""The numba kernels of histogram_scalars.py (imported only by its loader, as window_kernels imports
_window_kernel.py): ``scalars`` for every histogram a selection loaded, ``rows`` for those a histogram rate's
windows hold (native_columns.py).

``scalars`` reads four fields of each stored histogram (prometheus types.proto, the remote-write bytes the table keeps):
``uint64 count_int = 1; double count_float = 2; double sum = 3; ResetHint reset_hint = 14``, and skips the
others by their wire type. A message it cannot walk (a group wire type, a length or varint running past the
message's end) is marked not read, and the loader parses that one with protobuf, which decides.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..remote._protowire import bucket_span, varint, zigzag


@njit(cache=True, nogil=True, boundscheck=True)
def scalars(buf, offsets):
    """Per message ``buf[offsets[i]:offsets[i + 1]]``: (count, sum, reset hint, read). As protobuf's oneof, the
    last of count_int and count_float on the wire is the count; an integer count is made a float64 as Python's
    ``float(int)`` does (rounded to nearest)."""
    n = len(offsets) - 1
    count = np.zeros(n, np.float64)
    total = np.zeros(n, np.float64)
    hint = np.zeros(n, np.int64)
    read = np.ones(n, np.bool_)
    for i in range(n):
        p = offsets[i]
        end = offsets[i + 1]
        while p < end:
            key, p = varint(buf, p, end)
            if p < 0:
                read[i] = False
                break
            field = key >> np.uint64(3)
            wire = key & np.uint64(7)
            if wire == 0:
                value, p = varint(buf, p, end)
                if p < 0:
                    read[i] = False
                    break
                if field == 1:
                    count[i] = np.float64(value)
                elif field == 14:
                    hint[i] = np.int64(value)
            elif wire == 1:
                if end - p < 8:
                    read[i] = False
                    break
                if field == 2:
                    count[i] = buf[p:p + 8].view(np.float64)[0]
                elif field == 3:
                    total[i] = buf[p:p + 8].view(np.float64)[0]
                p += 8
            elif wire == 2:
                length, p = varint(buf, p, end)
                if p < 0 or length > np.uint64(end - p):
                    read[i] = False
                    break
                p += np.int64(length)
            elif wire == 5:
                if end - p < 4:
                    read[i] = False
                    break
                p += 4
            else:
                read[i] = False
                break
    return count, total, hint, read


@njit(cache=True, nogil=True, boundscheck=True)
def _walk(buf, p, end, i, fill, schema, zt, zc, cnt, sm, sizes, starts, span_off, span_len, values, customs):
    """One histogram message: its scalars, and the sizes of its parts (``sizes[i]``: positive spans, negative
    spans, positive values, negative values, custom values, positive counts, negative counts) or, with ``fill``,
    its parts written at ``starts[i]``: spans (positive then negative), absolute bucket counts (positive then
    negative; the running int64 sum of the deltas made float64, as Go's ToFloat, or the float counts), custom
    values. Returns False for a message outside the common encoding (an unpacked repeated field, a wire type
    it does not expect, deltas and counts mixed, values that do not fill the spans)."""
    ps = ns = pv = nv = cv = pc = nc = 0
    run_p = run_n = np.int64(0)
    while p < end:
        key, p = varint(buf, p, end)
        if p < 0:
            return False
        field = key >> np.uint64(3)
        wire = key & np.uint64(7)
        if wire == 0:
            value, p = varint(buf, p, end)
            if p < 0:
                return False
            if field == 1:
                cnt[i] = np.float64(value)
            elif field == 4:
                if value > np.uint64(0xFFFFFFFF):
                    return False
                schema[i] = zigzag(value)
            elif field == 6:
                zc[i] = np.float64(value)
            elif field != 14 and field != 15:
                return False
        elif wire == 1:
            if end - p < 8:
                return False
            x = buf[p:p + 8].view(np.float64)[0]
            p += 8
            if field == 2:
                cnt[i] = x
            elif field == 3:
                sm[i] = x
            elif field == 5:
                zt[i] = x
            elif field == 7:
                zc[i] = x
            else:
                return False
        elif wire == 2:
            length, p = varint(buf, p, end)
            if p < 0 or length > np.uint64(end - p):
                return False
            stop = p + np.int64(length)
            if field == 8 or field == 11:
                offset, span_length, read = bucket_span(buf, p, stop)
                if not read:
                    return False
                if field == 11:
                    if fill:
                        span_off[starts[i, 0] + ps] = offset
                        span_len[starts[i, 0] + ps] = span_length
                    ps += 1
                else:
                    if fill:
                        span_off[starts[i, 0] + sizes[i, 0] + ns] = offset
                        span_len[starts[i, 0] + sizes[i, 0] + ns] = span_length
                    ns += 1
            elif field == 9 or field == 12:  # packed sint64 deltas
                q = p
                while q < stop:
                    v2, q = varint(buf, q, stop)
                    if q < 0:
                        return False
                    if field == 12:
                        run_p += zigzag(v2)
                        if fill:
                            values[starts[i, 1] + pv] = np.float64(run_p)
                        pv += 1
                    else:
                        run_n += zigzag(v2)
                        if fill:
                            values[starts[i, 1] + sizes[i, 2] + nv] = np.float64(run_n)
                        nv += 1
            elif field == 10 or field == 13 or field == 16:  # packed doubles
                if length % np.uint64(8) != np.uint64(0):
                    return False
                for k in range(np.int64(length) // 8):
                    x = buf[p + 8 * k:p + 8 * k + 8].view(np.float64)[0]
                    if field == 13:
                        if fill:
                            values[starts[i, 1] + pc] = x
                        pc += 1
                    elif field == 10:
                        if fill:
                            values[starts[i, 1] + sizes[i, 5] + nc] = x
                        nc += 1
                    else:
                        if fill:
                            customs[starts[i, 2] + cv] = x
                        cv += 1
            else:
                return False
            p = stop
        else:
            return False
    if pc + nc > 0:  # float buckets: counts, and no deltas
        if pv + nv > 0:
            return False
        pv, nv = pc, nc
    if not fill:
        sizes[i, 0] = ps
        sizes[i, 1] = ns
        sizes[i, 2] = pv
        sizes[i, 3] = nv
        sizes[i, 4] = cv
        sizes[i, 5] = pc
        sizes[i, 6] = nc
    return True


@njit(cache=True, nogil=True, boundscheck=True)
def rows(buf, offsets, js):
    """The histograms ``js`` names, as columns (see ``_walk``); ``ok`` False for those it cannot read (and those
    whose values do not fill their spans), which the caller reads otherwise. ``same`` says whether a histogram's
    layout (schema, zero threshold's bits, spans, custom values) is the one before it's, in ``js`` order."""
    n = len(js)
    schema = np.zeros(n, np.int64)
    zt = np.zeros(n, np.float64)
    zc = np.zeros(n, np.float64)
    cnt = np.zeros(n, np.float64)
    sm = np.zeros(n, np.float64)
    sizes = np.zeros((n, 7), np.int64)
    starts = np.zeros((n, 3), np.int64)
    ok = np.ones(n, np.bool_)
    none_i = np.zeros(0, np.int64)
    none_f = np.zeros(0, np.float64)
    for i in range(n):
        j = js[i]
        ok[i] = _walk(buf, offsets[j], offsets[j + 1], i, False, schema, zt, zc, cnt, sm, sizes, starts,
                      none_i, none_i, none_f, none_f)
    total = np.zeros(3, np.int64)
    for i in range(n):
        if ok[i]:
            starts[i, 0] = total[0]
            starts[i, 1] = total[1]
            starts[i, 2] = total[2]
            total[0] += sizes[i, 0] + sizes[i, 1]
            total[1] += sizes[i, 2] + sizes[i, 3]
            total[2] += sizes[i, 4]
    span_off = np.zeros(total[0], np.int64)
    span_len = np.zeros(total[0], np.int64)
    values = np.zeros(total[1], np.float64)
    customs = np.zeros(total[2], np.float64)
    for i in range(n):  # the values must fill the spans: checked once the spans are written
        if ok[i]:
            j = js[i]
            _walk(buf, offsets[j], offsets[j + 1], i, True, schema, zt, zc, cnt, sm, sizes, starts,
                  span_off, span_len, values, customs)
            need_p = np.int64(0)
            for k in range(sizes[i, 0]):
                need_p += span_len[starts[i, 0] + k]
            need_n = np.int64(0)
            for k in range(sizes[i, 1]):
                need_n += span_len[starts[i, 0] + sizes[i, 0] + k]
            if need_p != sizes[i, 2] or need_n != sizes[i, 3]:
                ok[i] = False
    same = np.zeros(n, np.bool_)
    for i in range(1, n):
        a = i - 1
        if not (ok[i] and ok[a]) or schema[i] != schema[a] or sizes[i, 0] != sizes[a, 0] \
                or sizes[i, 1] != sizes[a, 1] or sizes[i, 4] != sizes[a, 4]:
            continue
        if zt[i:i + 1].view(np.int64)[0] != zt[a:a + 1].view(np.int64)[0]:
            continue
        equal = True
        for k in range(sizes[i, 0] + sizes[i, 1]):
            if span_off[starts[i, 0] + k] != span_off[starts[a, 0] + k] \
                    or span_len[starts[i, 0] + k] != span_len[starts[a, 0] + k]:
                equal = False
                break
        if equal:
            for k in range(sizes[i, 4]):
                if customs[starts[i, 2] + k] != customs[starts[a, 2] + k] \
                        or np.isnan(customs[starts[i, 2] + k]):
                    equal = False
                    break
        same[i] = equal
    return schema, zt, zc, cnt, sm, sizes, starts, ok, same, span_off, span_len, values, customs

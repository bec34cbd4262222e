"""The numba kernel of histogram_scalars.py (imported only by its loader, as window_kernels imports
_window_kernel.py).

It reads four fields of each stored histogram (prometheus types.proto, the remote-write bytes the table keeps):
``uint64 count_int = 1; double count_float = 2; double sum = 3; ResetHint reset_hint = 14``, and skips the
others by their wire type. A message it cannot walk (a group wire type, a length or varint running past the
message's end) is marked not read, and the loader parses that one with protobuf, which decides.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..remote._protowire import varint


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

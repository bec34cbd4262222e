"""Remote-write requests encoded once, refilled per scrape: the 7,500-node driver's encoder.

At 7,500 nodes a scrape is 2.7M samples. `testkit.wire.build_requests` builds every request's bytes
again from Python pieces (seconds per scrape); here each request's uncompressed WriteRequest is
laid out once with every sample at a fixed width, and a scrape only writes its values and
timestamps into those bytes with numpy and snappy-compresses them:

    TimeSeries := 0x0a len [labels...] 0x12 0x10 (Sample := 0x09 <8-byte double> 0x10 <6-byte varint>)

The value is written even when it is 0.0 (proto3 encoders omit it; explicit zeros are valid
protobuf and decode to the same sample) and the timestamp is a 6-byte varint, which holds every
millisecond time from 2^35 ms (1971) to 2^42 ms (2109). Series go into requests in workload
order, so request j always holds the same series (`Template.series_range(j)`).
"""

from __future__ import annotations

import numpy as np
import snappy

from testkit.wire import varint

TS_BYTES = 6  # varint width of a millisecond timestamp between 2^35 and 2^42
MIN_TS, MAX_TS = 1 << 35, 1 << 42
_SAMPLE = b"\x12\x10\x09" + b"\x00" * 8 + b"\x10" + b"\x80" * (TS_BYTES - 1) + b"\x01"
_VALUE_AT = 3  # offset of the 8 value bytes inside _SAMPLE; the timestamp starts 9 bytes later
_AR8, _ARTS = np.arange(8), np.arange(TS_BYTES)


def fixed_varint(ts_ms: np.ndarray | int) -> np.ndarray:
    """(n, 6) uint8: each timestamp as a 6-byte varint (the top byte without a continuation bit)."""
    t = np.atleast_1d(np.asarray(ts_ms, np.int64))
    if (t < MIN_TS).any() or (t >= MAX_TS).any():
        raise ValueError("timestamps must lie in [2^35, 2^42) ms for a 6-byte varint")
    shifts = (7 * _ARTS).astype(np.int64)
    out = ((t[:, None] >> shifts) & 0x7F).astype(np.uint8)
    out[:, :-1] |= 0x80
    return out


class Template:
    """Every request's bytes with room for one sample per series, and where each value sits."""

    def __init__(self, label_bytes: list[bytes], series_per_request: int = 2000) -> None:
        self.per_request = series_per_request
        self.num_series = len(label_bytes)
        self.buffers: list[np.ndarray] = []  # uncompressed WriteRequest per request (writable)
        self.value_at: list[np.ndarray] = []  # per request: offset of each series' value bytes
        for s0 in range(0, self.num_series, series_per_request):
            parts, offsets, pos = [], [], 0
            for lb in label_bytes[s0: s0 + series_per_request]:
                head = b"\x0a" + varint(len(lb) + len(_SAMPLE)) + lb
                offsets.append(pos + len(head) + _VALUE_AT)
                parts.append(head + _SAMPLE)
                pos += len(head) + len(_SAMPLE)
            self.buffers.append(np.frombuffer(b"".join(parts), np.uint8).copy())
            self.value_at.append(np.asarray(offsets, np.int64))

    @property
    def num_requests(self) -> int:
        return len(self.buffers)

    def series_range(self, j: int) -> range:
        return range(j * self.per_request, min(self.num_series, (j + 1) * self.per_request))

    def label_span(self, i: int) -> tuple[int, int, int]:
        """(request, start, stop): where series i's label bytes (`encode_labels`) lie in its request's buffer."""
        j, s = divmod(i, self.per_request)
        buf, at = self.buffers[j], self.value_at[j]
        pos = 1 + (0 if s == 0 else int(at[s - 1]) - _VALUE_AT + len(_SAMPLE))  # past the TimeSeries tag
        while buf[pos] & 0x80:  # and its length
            pos += 1
        return j, pos + 1, int(at[s]) - _VALUE_AT

    def labels_of(self, i: int) -> bytes:
        j, start, stop = self.label_span(i)
        return self.buffers[j][start:stop].tobytes()

    def overwrite(self, j: int, at: np.ndarray, chunks: np.ndarray) -> None:
        """Write chunks[n] (equal widths, uint8) at offset at[n] of request j's buffer: label values changed in
        place, keeping their length (bench.lifetime's pod churn)."""
        self.buffers[j][at[:, None] + np.arange(chunks.shape[1])] = chunks

    def raw_bytes(self) -> int:
        return sum(len(b) for b in self.buffers)

    def fill(self, j: int, values: np.ndarray, ts_ms: int) -> bytes:
        """Request j with series value values[i] (all series, workload order) at ts_ms, snappy-compressed."""
        buf, at = self.buffers[j], self.value_at[j]
        r = self.series_range(j)
        vals = np.ascontiguousarray(values[r.start: r.stop], np.float64).view(np.uint8).reshape(-1, 8)
        buf[at[:, None] + _AR8] = vals
        buf[at[:, None] + (9 + _ARTS)] = fixed_varint(ts_ms)
        return snappy.compress(buf.tobytes())

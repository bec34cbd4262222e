"""Prometheus's XOR chunk encoding (tsdb/chunkenc/xor.go, Gorilla-style), bit for bit.

A chunk is a big-endian uint16 sample count followed by a bit stream: the first sample as a
varint timestamp and the 64 raw bits of its value; the second as a uvarint time delta and an
XOR-encoded value; every later one as a delta-of-delta timestamp in one of five bit widths and
an XOR-encoded value that reuses the previous leading/trailing zero counts when it can.

Bit-exact also in one quirk of Prometheus's bit stream: a byte-wise write that ends on a byte
boundary leaves an empty byte appended, so such a chunk ends in one zero byte more than its
bits need (tests/remote/test_xor.py checks this against chunks Prometheus itself produced).

Many chunks are encoded at once: every sample becomes a few bit fields (value, width) computed
with numpy; only the choice of the leading/trailing-zero window, which depends on the samples
before, is a Python loop; the fields are then OR-ed into 64-bit words in one pass.

Pure: numpy arrays in, bytes out. Values are taken by bit pattern (stale NaN stays stale NaN).
"""

from __future__ import annotations

import struct
from typing import Iterator

import numpy as np

# Prometheus's head cuts a chunk at 120 samples (storage/remote reads stream its chunks as they are).
SAMPLES_PER_CHUNK = 120
MAX_SAMPLES = 0xFFFF  # the sample count is a uint16
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_SLOTS = 5  # bit fields per sample: time (2 parts), value header, value bits, padding after a chunk's last


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bit length of each uint64, exactly (float64 holds every 32-bit half exactly)."""
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1]).astype(np.int64)


def _low_bits(x: np.ndarray, width: np.ndarray) -> np.ndarray:
    w = width.astype(np.uint64)
    mask = np.where(width >= 64, _ONES, (np.uint64(1) << np.minimum(w, np.uint64(63))) - np.uint64(1))
    return x & mask


def _varint_fields(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Go's PutUvarint bytes of each uint64 as two bit fields (first <= 8 bytes, the rest)."""
    nbytes = np.ones(len(u), np.int64)
    for k in range(1, 10):
        nbytes += u >= np.uint64(1 << (7 * k))
    first_n = np.minimum(nbytes, 8)
    first = np.zeros(len(u), np.uint64)
    rest = np.zeros(len(u), np.uint64)
    for k in range(10):
        byte = (u >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(nbytes > k + 1, np.uint64(0x80), np.uint64(0))
        if k < 8:
            shift = np.clip(first_n - 1 - k, 0, 7).astype(np.uint64) * np.uint64(8)
            first |= np.where(k < first_n, byte << shift, np.uint64(0))
        else:
            shift = np.clip(nbytes - 1 - k, 0, 7).astype(np.uint64) * np.uint64(8)
            rest |= np.where(k < nbytes, byte << shift, np.uint64(0))
    return first, first_n * 8, rest, (nbytes - first_n) * 8


def _windows(second: np.ndarray, nonzero: np.ndarray, lead: np.ndarray, trail: np.ndarray) -> np.ndarray:
    """Per sample: does its value open a new leading/trailing window (else it reuses the open one)?

    The one sequential rule of the encoding: a changed value reuses the window of the last one
    that opened a window in its chunk when its leading and trailing zeros both fit it. The loop
    visits only chunks' second samples (where the window resets) and changed values."""
    visit = np.flatnonzero(second | nonzero)
    resets = second[visit].tolist()
    changed = nonzero[visit].tolist()
    leads, trails = lead[visit].tolist(), trail[visit].tolist()
    opened = []
    leading = trailing = -1
    for k in range(len(resets)):
        if resets[k]:
            leading = -1  # a chunk's second sample always opens a window
            if not changed[k]:
                continue
        lz, tz = leads[k], trails[k]
        if leading < 0 or lz < leading or tz < trailing:
            leading, trailing = lz, tz
            opened.append(k)
    opens = np.zeros(len(lead), bool)
    opens[visit[opened]] = True
    return opens


def encode_chunks(t: np.ndarray, v: np.ndarray, starts: np.ndarray) -> list[bytes]:
    """XOR chunks of samples t (int64 ms, strictly increasing within a chunk) and v (float64),
    chunk k holding samples [starts[k], starts[k+1]) (the last one up to the end); starts[0] == 0."""
    n = len(t)
    starts = np.asarray(starts, np.int64)
    if n == 0:
        return []
    ends = np.append(starts[1:], n)
    if np.any(ends - starts > MAX_SAMPLES) or np.any(ends <= starts):
        raise ValueError(f"each XOR chunk holds 1 to {MAX_SAMPLES} samples")
    ts = np.asarray(t, np.int64)
    vb = np.ascontiguousarray(v, np.float64).view(np.uint64)
    pos = np.arange(n) - np.repeat(starts, ends - starts)  # index within its chunk
    first, second, later = pos == 0, pos == 1, pos >= 2

    vals = np.zeros((n, _SLOTS), np.uint64)
    widths = np.zeros((n, _SLOTS), np.int64)
    # --- timestamps: varint of the first, uvarint delta of the second, delta-of-delta after that
    dt = np.diff(ts, prepend=ts[0])
    dod = np.diff(dt, prepend=0)
    zigzag = (ts.view(np.uint64) << np.uint64(1)) ^ (ts >> 63).view(np.uint64)
    early = first | second
    vals[early, 0], widths[early, 0], vals[early, 1], widths[early, 1] = _varint_fields(
        np.where(first, zigzag, dt.view(np.uint64))[early])
    d = dod.view(np.uint64)
    cls = np.select([dod == 0, (dod >= -8191) & (dod <= 8192), (dod >= -65535) & (dod <= 65536),
                     (dod >= -524287) & (dod <= 524288)], [0, 1, 2, 3], 4)
    prefix = np.array([0, 0b10, 0b110, 0b1110, 0b1111], np.uint64)[cls]
    plen = np.array([1, 2, 3, 4, 4])[cls]
    dlen = np.array([0, 14, 17, 20, 0])[cls]
    small = later & (cls < 4)
    vals[small, 0] = (prefix[small] << dlen[small].astype(np.uint64)) | _low_bits(d[small], dlen[small])
    widths[small, 0] = plen[small] + dlen[small]
    big = later & (cls == 4)
    vals[big, 0], widths[big, 0], vals[big, 1], widths[big, 1] = 0b1111, 4, d[big], 64
    # --- values: the first raw; later ones XOR-ed with the one before
    vals[first, 3], widths[first, 3] = vb[first], 64
    xors = np.where(first, np.uint64(0), vb ^ np.roll(vb, 1))
    nonzero = xors != 0
    lowest = xors & (~xors + np.uint64(1))
    lead = np.minimum(64 - _bit_length(xors), 31)  # 5 bits hold at most 31
    trail = _bit_length(lowest) - 1
    opens = _windows(second, nonzero, lead, trail)
    # a reused window is the one opened last before it (within the chunk, as _windows guarantees)
    opener = np.maximum.accumulate(np.where(opens, np.arange(n), 0))
    win_lead, win_trail = lead[opener], trail[opener]
    sig = 64 - win_lead - win_trail
    unchanged = ~first & ~nonzero
    widths[unchanged, 2] = 1
    reuse = nonzero & ~opens
    vals[reuse, 2], widths[reuse, 2] = 0b10, 2
    header = (np.uint64(0b11) << np.uint64(11)) | (win_lead.astype(np.uint64) << np.uint64(6)) | (
        sig.astype(np.uint64) & np.uint64(0x3F))  # a width of 64 is written as 0
    vals[opens, 2], widths[opens, 2] = header[opens], 13
    vals[nonzero, 3] = xors[nonzero] >> win_trail[nonzero].astype(np.uint64)
    widths[nonzero, 3] = sig[nonzero]
    # --- pad each chunk to a byte; one empty byte more where Go's last write was a whole byte
    last = ends - 1
    chunk_bits = np.add.reduceat(widths.sum(axis=1), starts)
    byte_write = (widths[last, 3] > 0) & (widths[last, 3] % 8 == 0)
    widths[last, 4] = (-chunk_bits) % 8 + np.where((chunk_bits % 8 == 0) & byte_write, 8, 0)
    return _pack(vals.ravel(), widths.ravel(), ends - starts, (chunk_bits + widths[last, 4]) // 8)


def _pack(vals: np.ndarray, widths: np.ndarray, counts: np.ndarray, chunk_bytes: np.ndarray) -> list[bytes]:
    """OR the bit fields, in order, into big-endian 64-bit words; cut the bytes into chunks."""
    off = np.concatenate(([0], np.cumsum(widths)[:-1]))
    total_bits = int(off[-1] + widths[-1])
    keep = widths > 0
    off, w, x = off[keep], widths[keep], vals[keep]  # every field was built within its width
    words = np.zeros(total_bits // 64 + 2, np.uint64)
    word, s = off >> 6, off & 63
    # Each field's head goes into its word (fields are in offset order, so a word's heads are
    # neighbours: one reduceat); a field that runs past the word's end puts its tail into the
    # next word, which no other tail reaches. The bits are disjoint: adding is OR-ing.
    end = s + w
    fits = end <= 64
    head = np.where(fits, x << (64 - np.minimum(end, 64)).astype(np.uint64),
                    x >> (np.maximum(end, 64) - 64).astype(np.uint64))
    first_of_word = np.flatnonzero(np.diff(word, prepend=-1))
    words[word[first_of_word]] = np.add.reduceat(head, first_of_word)
    split = ~fits
    words[word[split] + 1] += x[split] << (128 - end[split]).astype(np.uint64)
    data = words.astype(">u8").tobytes()
    out, at = [], 0
    for count, size in zip(counts.tolist(), chunk_bytes.tolist()):
        out.append(struct.pack(">H", count) + data[at:at + size])
        at += size
    return out


def encode_chunk(t: np.ndarray, v: np.ndarray) -> bytes:
    """One XOR chunk (an empty one is just the zero count)."""
    if len(t) == 0:
        return b"\x00\x00"
    return encode_chunks(t, v, np.zeros(1, np.int64))[0]


def chunk_starts(n: int, per_chunk: int = SAMPLES_PER_CHUNK) -> np.ndarray:
    return np.arange(0, n, per_chunk, dtype=np.int64)


def chunks(t: np.ndarray, v: np.ndarray, per_chunk: int = SAMPLES_PER_CHUNK) -> Iterator[tuple[int, int, bytes]]:
    """(min_time_ms, max_time_ms, XOR chunk bytes) for consecutive runs of ``per_chunk`` samples."""
    starts = chunk_starts(len(t), per_chunk)
    ends = np.append(starts[1:], len(t)) - 1
    for a, b, data in zip(starts.tolist(), ends.tolist(), encode_chunks(t, v, starts)):
        yield int(t[a]), int(t[b]), data

"""The data model every layer shares: label sets, series ids, matchers, special values."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import re2

# A label set is a tuple of (name, value) pairs sorted by name; it includes __name__.
Labels = tuple[tuple[str, str], ...]

METRIC_NAME = "__name__"

# Prometheus's staleness marker: a NaN with this exact bit pattern (value.StaleNaN).
STALE_NAN_BITS = 0x7FF0000000000002
STALE_NAN = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]


def is_stale(values: np.ndarray) -> np.ndarray:
    """Element-wise: is this float64 the staleness marker (by bit pattern, not by NaN-ness)."""
    return values.view(np.uint64) == np.uint64(STALE_NAN_BITS)


def canonical(pairs: Iterable[tuple[str, str]]) -> Labels:
    """Sorted label tuple; empty values are dropped, as Prometheus treats them as absent."""
    return tuple(sorted((n, v) for n, v in pairs if v != ""))


def series_key(labels: Labels) -> bytes:
    """The byte string a series id is hashed from: name\\xffvalue\\xff... in label order."""
    return b"\xff".join(n.encode() + b"\xfe" + v.encode() for n, v in labels)


def series_id(labels: Labels) -> int:
    """A stable signed 64-bit id of a canonical label set (blake2b; stable across runs)."""
    digest = hashlib.blake2b(series_key(labels), digest_size=8).digest()
    return struct.unpack("<q", digest)[0]


def series_keys(labels_list: list[Labels]) -> list[bytes]:
    """``series_key`` of many label sets at once (identical results).

    The key is built as one str per series with lone surrogates as separators (U+DCFE,
    U+DCFF encode to the bytes 0xFE, 0xFF under surrogateescape), so the per-label work is
    C-level joins. That equals ``series_key`` only when the labels themselves hold no lone
    surrogates; ASCII labels (the usual case) are checked cheaply, others use series_key.
    """
    keys = []
    add = keys.append
    for labels in labels_list:
        s = "\udcff".join(map("\udcfe".join, labels))
        key = s.encode("utf-8", "surrogateescape")
        if len(key) != len(s) or not key.translate(None, b"\xfe\xff").isascii():
            key = series_key(labels)  # non-ASCII content: the exact (strict) encoding
        add(key)
    return keys


def labels_from_key(key: bytes) -> Labels:
    """The inverse of ``series_key`` (valid UTF-8 never contains the bytes 0xFE or 0xFF)."""
    if not key:
        return ()
    text = key.decode("utf-8", "surrogateescape")
    return tuple(tuple(pair.split("\udcfe", 1)) for pair in text.split("\udcff"))


def series_keys_and_ids(labels_list: list[Labels], known: list[bytes | None] | None = None
                        ) -> tuple[list[bytes], np.ndarray]:
    """``series_key`` and ``series_id`` of many label sets at once (identical results). ``known``: keys the
    caller has already (None where it has not), used as they are."""
    if known is None:
        keys = series_keys(labels_list)
    else:
        made = iter(series_keys([lb for lb, k in zip(labels_list, known) if k is None]))
        keys = [k if k is not None else next(made) for k in known]
    digests = b"".join([hashlib.blake2b(k, digest_size=8).digest() for k in keys])
    return keys, np.frombuffer(digests, "<i8").astype(np.int64)


def metric_name(labels: Labels) -> str:
    for n, v in labels:
        if n == METRIC_NAME:
            return v
    return ""


@dataclass(frozen=True)
class Matcher:
    """A PromQL label matcher. op is one of "=", "!=", "=~", "!~".

    Regexes are fully anchored, as in Prometheus; a missing label matches as "".
    """

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"bad matcher op {self.op!r}")

    def compiled(self) -> "re2._Regexp":
        return _compile_anchored(self.value)

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = self.compiled().fullmatch(value) is not None
        return hit if self.op == "=~" else not hit

    def matches_empty(self) -> bool:
        return self.matches("")

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'


_LABEL_NAME = re2.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re2.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def is_label_name(name: str) -> bool:
    """Prometheus's (2.x) rule for a label name, the whole string (a trailing newline is no exception)."""
    return _LABEL_NAME.fullmatch(name) is not None


def is_metric_name(name: str) -> bool:
    """Prometheus's rule for a metric name (colons allowed, for recording rules)."""
    return _METRIC_NAME.fullmatch(name) is not None


_WRITER_ID = re2.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")


def check_writer_id(writer_id: str) -> str:
    """--storage.writer-id names the table's files (storage/files/table.py), so it is a name rule too."""
    if _WRITER_ID.fullmatch(writer_id) is None:
        raise ValueError(f"--storage.writer-id {writer_id!r}: letters, digits, '_' and '-' only (at most 64)")
    return writer_id


def selector_text(matchers: list[Matcher]) -> str:
    """A series selector matching what ``matchers`` match, as PromQL reads it back (values quoted and escaped)."""
    return "{" + ", ".join(f"{m.name}{m.op}{json.dumps(m.value, ensure_ascii=False)}" for m in matchers) + "}"


_RE_CACHE: dict[str, "re2._Regexp"] = {}


def _compile_anchored(pattern: str) -> "re2._Regexp":
    rx = _RE_CACHE.get(pattern)
    if rx is None:
        options = re2.Options()
        options.dot_nl = True  # Prometheus anchors as ^(?s:...)$
        rx = re2.compile(f"(?:{pattern})", options)
        if len(_RE_CACHE) > 10_000:
            _RE_CACHE.clear()
        _RE_CACHE[pattern] = rx
    return rx


def labels_match(labels: Labels, matchers: Iterable[Matcher]) -> bool:
    d = dict(labels)
    return all(m.matches(d.get(m.name, "")) for m in matchers)


RELABEL_DROP = "relabel_drop"
# Drops the operator configured: the series was accepted and discarded on purpose, so the write
# is a success (2xx) and its samples count as written. Everything else not stored is refused
# (400): the sender must be told. relabel_invalid stays a refusal: the rules did not ask for it.
CONFIGURED_DROPS = frozenset({RELABEL_DROP})


@dataclass(frozen=True)
class Rejection:
    """A series of a write that is not stored, and why. Here rather than in ingest/ because the ingest
    limits (limits/ingest.py, a floor below ingest/) make them too."""

    reason: str  # e.g. invalid_labels, duplicate_label_names, relabel_drop, a limit name
    message: str  # names the series and the problem (and the setting, for limits)
    samples: int  # samples of this request not stored because of it

    @property
    def configured(self) -> bool:
        """Dropped by the operator's rules (a success for the sender), not refused."""
        return self.reason in CONFIGURED_DROPS


# Value types that cross layers: the wire decodes into them, storage keeps them, the engine reads them.
@dataclass(frozen=True)
class MetricMetadata:
    metric: str
    type: str  # counter, gauge, histogram, gaugehistogram, summary, info, stateset, unknown
    help: str = ""
    unit: str = ""


@dataclass
class SampleBlock:
    """Samples sorted by (sid, t), one per (sid, t); t in ms; v bit-exact."""

    sid: np.ndarray
    t: np.ndarray
    v: np.ndarray

    def __len__(self) -> int:
        return len(self.sid)

    @classmethod
    def empty(cls) -> "SampleBlock":
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))

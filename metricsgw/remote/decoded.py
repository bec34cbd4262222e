"""One decoded remote-write request, column-wise: what the codec (codec.py) gives the ingest pipeline."""

from __future__ import annotations

import sys

import numpy as np
from google.protobuf.message import DecodeError

from ..model import MetricMetadata
from . import native
from .fastscan import label_strings
from .label_records import LabelRecords, distinct_label_records
from .proto import remote_v1_pb2 as v1pb

RawPairs = list[tuple[bytes, bytes]]


class DecodedWrite:
    """One decoded write request, column-wise.

    Per series i: ``keys[i]`` (a hashable raw label key: the label records' bytes for v1, a
    tuple of name/value symbol bytes for v2; None when the series' labels cannot be
    decoded, see ``problems``), ``counts[i]`` samples stored at ``t``/``v`` in series
    order. ``label_pairs(i)`` decodes series i's labels on demand as raw (name, value)
    bytes in sender order (raises BadData if that series' label bytes are corrupt);
    validation turns them into ``Labels``.

    ``label_counts`` (int64 per series, or None when unknown) says how many labels each key
    holds, so the pipeline can decode the labels of many new series with one parse
    (``bulk_label_strings``) instead of one per series.

    ``sids`` (int64 per series, or None) and ``dropped`` (bool per series, or None: none) are what the
    decoder's ``known`` callback said when it resolved every key (``decode_v1``): the pipeline then skips
    its own cache lookup.
    """

    __slots__ = ("version", "keys", "counts", "t", "v", "histograms", "exemplars", "metadata",
                 "problems", "_pairs", "label_counts", "native", "sids", "dropped")

    def __init__(self, version: int, keys: list, counts: np.ndarray, t: np.ndarray, v: np.ndarray,
                 histograms: int = 0, exemplars: int = 0, metadata: list[MetricMetadata] | None = None,
                 problems: dict[int, str] | None = None, pairs=None,
                 label_counts: np.ndarray | None = None, native: "native.NativeParts | None" = None,
                 sids: np.ndarray | None = None, dropped: np.ndarray | None = None) -> None:
        self.version = version
        self.keys = keys
        self.counts = counts
        self.t = t
        self.v = v
        self.histograms = histograms
        self.exemplars = exemplars
        self.metadata = metadata or []
        self.problems = problems or {}
        self._pairs = pairs
        self.label_counts = label_counts
        self.native = native  # the request's histograms and exemplars, per series (None: it has none)
        self.sids = sids
        self.dropped = dropped

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def samples(self) -> int:
        return len(self.t)

    def label_pairs(self, i: int) -> RawPairs:
        return self._pairs(i)

    def bulk_label_strings(self, idx: list[int]) -> tuple[list[str], list[str], np.ndarray] | None:
        """(names, values, label counts) of series ``idx``, decoded in one go as strict UTF-8,
        in sender order; None if that is not possible (no counts, a problem series, bad bytes
        anywhere): the caller then decodes series by series, which pinpoints the bad one."""
        if not self._bulk_ready(idx):
            return None
        counts = self.label_counts[idx]
        keys = self.keys
        if self.version == 1:
            fast = label_strings([keys[i] for i in idx], counts)
            if fast is not None:
                return list(map(sys.intern, fast[0])), fast[1], counts
            try:
                labels = v1pb.TimeSeries.FromString(b"".join([keys[i] for i in idx])).labels
            except DecodeError:
                return None
            if len(labels) != int(counts.sum()):
                return None
            # Names interned: a few hundred distinct names are then one object each in every label
            # set (values are shared by the pipeline's pair pool, see ingest/bulk.py).
            return list(map(sys.intern, [lb.name for lb in labels])), [lb.value for lb in labels], counts
        flat = [s for i in idx for s in keys[i]]
        try:
            text = {s: s.decode("utf-8") for s in set(flat)}
        except UnicodeDecodeError:
            return None
        strings = list(map(sys.intern, map(text.__getitem__, flat)))
        return strings[0::2], strings[1::2], counts

    def _bulk_ready(self, idx: list[int]) -> bool:
        """Whether series ``idx`` can be decoded in one go at all: label counts known, no problem series."""
        return self.label_counts is not None and not any(i in self.problems for i in idx)

    def bulk_label_records(self, idx: list[int]) -> LabelRecords | None:
        """The labels of series ``idx`` as distinct records (label_records.py), for 1.0 requests laid out as
        every sender we know lays them out; None otherwise (``bulk_label_strings`` then)."""
        if self.version != 1 or not self._bulk_ready(idx):
            return None
        keys = self.keys
        return distinct_label_records([keys[i] for i in idx], self.label_counts[idx])

    def subset(self, samples: np.ndarray) -> "DecodedWrite":
        """This request with only the samples where ``samples`` (bool, per sample) is True; a
        series left with none is dropped, as if it had not been sent (its labels and series
        problems go with it) unless it has histograms or exemplars. Metadata, histogram and exemplar
        counts are kept."""
        n = len(self.keys)
        kept = np.bincount(np.repeat(np.arange(n), self.counts)[samples], minlength=n).astype(self.counts.dtype)
        nat = self.native
        has = kept > 0 if nat is None else (kept > 0) | (nat.hist_counts > 0) | (nat.ex_counts > 0)
        idx = np.flatnonzero(has)
        at = idx.tolist()
        position = {old: new for new, old in enumerate(at)}
        pairs = self._pairs
        return DecodedWrite(self.version, [self.keys[i] for i in at], kept[idx], self.t[samples], self.v[samples],
                            self.histograms, self.exemplars, self.metadata,
                            {position[i]: p for i, p in self.problems.items() if i in position},
                            (lambda j: pairs(at[j])) if pairs is not None else None,
                            self.label_counts[idx] if self.label_counts is not None else None,
                            nat.take(idx) if nat is not None else None,
                            self.sids[idx] if self.sids is not None else None,
                            self.dropped[idx] if self.dropped is not None else None)

    def offsets(self) -> np.ndarray:
        """Start index of each series' samples in ``t``/``v`` (length n+1)."""
        out = np.zeros(len(self.counts) + 1, np.int64)
        np.cumsum(self.counts, out=out[1:])
        return out

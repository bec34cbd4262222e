"""What the ingest pipeline decided of each series it has seen, by the series' key (remote/series_keys.py:
16-byte digests of the raw v1 label bytes, v2 symbol tuples), so that a series' label work is done once.

Entries are one of
  int          the series id; storage has the series (confirmed)
  Admit        labels validated and relabelled, but storage did not have the series when
               last seen (new in a batch that may not have been stored, or refused by a
               limit): the limit check and has_series are repeated until confirmed
  Refuse       rejected for good under the current rules (bad labels, relabel_invalid)
  DROPPED      dropped by the relabel rules (one shared marker): a request whose series are
               all known ints or DROPPED still takes a vectorised path, since with rules such
               as the shipped ones most requests carry some dropped series

A v1 key's final entries (an int, DROPPED) live in ``KnownSeries`` (known_series.py: arrays a compiled
lookup reads, at a fifth of a dict entry's memory); the others, and every v2 key's, in a dict. A key is in
one of the two, never both: this class is the only one that puts entries in either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..model import RELABEL_DROP, Labels
from ..remote.series_keys import halves
from . import known_series
from .known_series import KnownSeries

class Admit(NamedTuple):  # made once per new series: a frozen dataclass's __init__ cost twice as much
    labels: Labels
    sid: int


@dataclass(frozen=True)
class Refuse:
    reason: str
    message: str


DROPPED = Refuse(RELABEL_DROP, "dropped by relabel rules")

_DICT_ENTRY_BYTES = 200
Resolved = tuple[np.ndarray, "np.ndarray | None"]  # (per key its id, which keys are dropped or None: none)


class SeriesCache:
    def __init__(self) -> None:
        self._entries: dict[Any, Any] = {}  # the entries _known does not hold
        self._known = KnownSeries()

    def __len__(self) -> int:
        return len(self._entries) + len(self._known)

    def nbytes(self) -> int:
        """About the bytes held: the known series' table, and the dict's entries at CPython's size (a key, an entry
        object, a slot)."""
        return self._known.nbytes() + len(self._entries) * _DICT_ENTRY_BYTES

    def clear(self) -> None:
        self._entries.clear()
        self._known.clear()

    def admitted(self, key: Any) -> Admit | None:
        """The key's entry if it is an Admit (one waiting for storage to confirm its series)."""
        entry = self._entries.get(key)
        return entry if type(entry) is Admit else None

    def known_halves(self, hi: np.ndarray, lo: np.ndarray) -> Resolved | None:
        """Of v1 keys given as their halves (``series_keys.halves``): ``Resolved`` if every one is a confirmed
        id or dropped by the rules, else None."""
        return self._known.resolve(hi, lo)

    def known(self, keys: list) -> Resolved | None:
        """``known_halves`` of v1 keys as ``cache_keys`` makes them (None also if one is undecodable)."""
        try:
            return self._known.resolve(*halves(keys))
        except (TypeError, ValueError):  # an undecodable series' None key
            return None

    def ids(self, keys: list) -> np.ndarray | None:
        """Every key's id if each is a confirmed id in the dict (v2 keys), else None."""
        try:
            # One C-level pass: an entry that is not an int stops it with a TypeError.
            return np.fromiter(map(self._entries.get, keys), np.int64, len(keys))
        except (TypeError, ValueError, OverflowError):
            return None

    def entries(self, keys: list) -> list:
        """The entry of each key (None: not cached), from the table of known series or the dict."""
        found = list(map(self._entries.get, keys))
        at = [i for i, key in enumerate(keys) if type(key) is bytes]
        if not at or not len(self._known):
            return found
        state, sids = self._known.find([keys[i] for i in at])
        for i, st, sid in zip(at, state.tolist(), sids.tolist()):
            if st == known_series.SID:
                found[i] = sid
            elif st == known_series.DROPPED:
                found[i] = DROPPED
        return found

    def remember(self, pairs: list[tuple[Any, Any]]) -> None:
        """Cache these (key, entry) pairs: a v1 key's final entry in the table of known series, else the dict."""
        ids: list[tuple[Any, int]] = []
        dropped: list[bytes] = []
        for key, entry in pairs:
            if type(entry) is int:
                ids.append((key, entry))
            elif type(key) is bytes and entry is DROPPED:
                self._entries.pop(key, None)
                dropped.append(key)
            else:
                self._entries[key] = entry
        self.remember_ids(ids)
        self._known.add_dropped(dropped)

    def remember_ids(self, pairs: list[tuple[Any, int]]) -> None:
        """These keys' series are stored, as these ids."""
        v1_keys: list[bytes] = []
        v1_sids: list[int] = []
        for key, sid in pairs:
            if type(key) is bytes:
                self._entries.pop(key, None)
                v1_keys.append(key)
                v1_sids.append(sid)
            else:
                self._entries[key] = sid
        self._known.add_ids(v1_keys, v1_sids)

    def forget(self, dropped: np.ndarray, gone: set[int]) -> None:
        """Drop the entries of these series ids (``gone``: the same ids as a set)."""
        if not gone:
            return
        self._entries = {k: v for k, v in self._entries.items()
                         if not (v in gone if type(v) is int else type(v) is Admit and v.sid in gone)}
        self._known.forget(np.asarray(dropped, np.int64))

"""Basic-auth password checks: bcrypt off the event loop, bounded, successful logins remembered.

Follows exporter-toolkit's webHandler: an unknown user is checked against a fixed hash (so a
timing probe cannot tell unknown users from wrong passwords), and a checked (user, hash,
password) is remembered so a sender pays bcrypt once, not per request. Two differences, both so
that a brute force costs the attacker and not the gateway:
- the checks run in a small pool of their own threads (bcrypt releases the GIL), never on the
  event loop; exporter-toolkit's equivalent is its one-at-a-time bcrypt mutex;
- only successful logins are remembered, in a cache of their own: a flood of wrong passwords
  cannot evict a sender's login and push it back into the queue behind the attacker's checks.
The cache keys are SHA-256 digests, so no plaintext password is kept.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import bcrypt

from ..errors import Unavailable

# exporter-toolkit's bcrypt hash of "fakepassword", checked for users that do not exist.
UNKNOWN_USER_HASH = b"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
WAITING_PER_THREAD = 64
BCRYPT_MAX_PASSWORD = 72  # bcrypt only reads this many bytes; Go's bcrypt and htpasswd ignore the rest


def parse_basic_auth(header: str | None) -> tuple[str, bytes] | None:
    """Go's Request.BasicAuth: 'Basic ' (any case) + base64(user:password); None if absent/malformed."""
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        raw = base64.b64decode(header[6:], validate=True)
    except ValueError:
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    return user.decode("utf-8", "surrogateescape"), password


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD], hashed)
    except ValueError:  # a hash bcrypt cannot read: no password matches it
        return False


class PasswordChecker:
    """``await verify(user, password, hashes)``; at most ``max_concurrent`` bcrypt checks at once."""

    def __init__(self, max_concurrent: int, check: Callable[[bytes, bytes], bool] = _bcrypt_matches,
                 cache_size: int = 1000, max_waiting: int | None = None) -> None:
        self.max_concurrent = max_concurrent
        # Checks allowed to wait for a thread; past that a login gets 503 (senders retry it)
        # instead of an ever longer queue of an attacker's connections.
        self.max_waiting = WAITING_PER_THREAD * max_concurrent if max_waiting is None else max_waiting
        self.pending = 0  # checks queued or running
        self.check = check  # the password check itself (bcrypt); tests may wrap it
        self._pool = ThreadPoolExecutor(max_concurrent, thread_name_prefix="bcrypt")
        self._ok: OrderedDict[bytes, None] = OrderedDict()  # LRU of successful logins
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.in_flight = 0       # bcrypt checks running now
        self.peak_in_flight = 0  # the most that ever ran at once (the pool's bound, observable)

    async def verify(self, user: str, password: bytes, hashes: dict[str, bytes]) -> bool:
        hashed = hashes.get(user)
        key = hashlib.sha256(b"\0".join((user.encode("utf-8", "surrogateescape"), hashed or b"", password))).digest()
        if hashed is not None and key in self._ok:
            self._ok.move_to_end(key)
            return True
        if self.pending >= self.max_concurrent + self.max_waiting:
            raise Unavailable("too many password checks waiting; retry later")
        self.pending += 1
        try:  # an unknown user costs the same bcrypt check as a known one with a wrong password
            matched = await asyncio.get_running_loop().run_in_executor(
                self._pool, self._timed_check, password, hashed or UNKNOWN_USER_HASH)
        finally:
            self.pending -= 1
        if not (matched and hashed is not None):
            return False
        self._ok[key] = None
        if len(self._ok) > self._cache_size:
            self._ok.popitem(last=False)
        return True

    def _timed_check(self, password: bytes, hashed: bytes) -> bool:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return self.check(password, hashed)
        finally:
            with self._lock:
                self.in_flight -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

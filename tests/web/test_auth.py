"""PasswordChecker: exporter-toolkit's rules (fixed hash for unknown users, checked logins
remembered) with real bcrypt, counted through the checker's replaceable ``check``."""

from __future__ import annotations

import asyncio

import bcrypt

from metricsgw.web.auth import UNKNOWN_USER_HASH, PasswordChecker, parse_basic_auth
from tests.web.certs import bcrypt_hash

HASHES = {"alice": bcrypt_hash("right").encode()}


def counting_checker(**kw) -> tuple[PasswordChecker, list]:
    checker = PasswordChecker(1, **kw)
    calls: list[tuple[bytes, bytes]] = []
    real = checker.check

    def check(password: bytes, hashed: bytes) -> bool:
        calls.append((password, hashed))
        return real(password, hashed)

    checker.check = check
    return checker, calls


def test_successful_logins_are_remembered_failures_are_not():
    checker, calls = counting_checker()

    async def go():
        assert await checker.verify("alice", b"right", HASHES)
        assert await checker.verify("alice", b"right", HASHES)
        assert not await checker.verify("alice", b"wrong", HASHES)
        assert not await checker.verify("alice", b"wrong", HASHES)
    asyncio.run(go())
    assert len(calls) == 3  # one check for the two good logins, one per bad one
    checker.close()


def test_unknown_user_costs_a_bcrypt_check_against_the_fixed_hash():
    checker, calls = counting_checker()
    assert not asyncio.run(checker.verify("mallory", b"fakepassword", HASHES))  # the fixed hash's own password
    assert calls == [(b"fakepassword", UNKNOWN_USER_HASH)]
    assert bcrypt.checkpw(b"fakepassword", UNKNOWN_USER_HASH)  # so it really was a full, matching bcrypt run
    checker.close()


def test_a_new_hash_for_the_user_forgets_the_old_login():
    checker, calls = counting_checker()

    async def go():
        assert await checker.verify("alice", b"right", HASHES)
        assert not await checker.verify("alice", b"right", {"alice": bcrypt_hash("changed").encode()})
    asyncio.run(go())
    assert len(calls) == 2
    checker.close()


def test_remembered_logins_are_bounded():
    checker, calls = counting_checker(cache_size=2)
    users = {u: bcrypt_hash(u).encode() for u in ("a", "b", "c")}

    async def go():
        for u in ("a", "b", "c", "a"):  # "a" was pushed out by "c"
            assert await checker.verify(u, u.encode(), users)
    asyncio.run(go())
    assert len(calls) == 4
    checker.close()


def test_long_passwords_compare_on_their_first_72_bytes_like_go():
    long = b"x" * 72
    hashes = {"u": bcrypt.hashpw(long, bcrypt.gensalt(4))}
    checker = PasswordChecker(1)
    assert asyncio.run(checker.verify("u", long + b"ignored", hashes))
    checker.close()


def test_parse_basic_auth_like_go():
    assert parse_basic_auth("Basic YTpiOmM=") == ("a", b"b:c")
    assert parse_basic_auth("basic YTpi") == ("a", b"b")
    assert parse_basic_auth("BASIC YTpi") == ("a", b"b")
    for bad in (None, "", "Basic", "Basic YWI=", "Bearer YTpi", "Basic !!!", "BasicYTpi"):
        assert parse_basic_auth(bad) is None, bad


def test_the_queue_of_checks_is_bounded():
    """One check held running, two waiting: the next login is told to come back (503), not queued."""
    import threading

    import pytest

    from metricsgw.errors import Unavailable

    gate, checker = threading.Event(), PasswordChecker(1, max_waiting=2)
    real = checker.check
    checker.check = lambda p, h: gate.wait(30) and real(p, h)

    async def go():
        held = [asyncio.create_task(checker.verify("alice", f"guess{i}".encode(), HASHES)) for i in range(3)]
        while checker.pending < 3:
            await asyncio.sleep(0)
        with pytest.raises(Unavailable):
            await checker.verify("alice", b"right", HASHES)
        gate.set()
        assert await asyncio.gather(*held) == [False] * 3
        assert await checker.verify("alice", b"right", HASHES)  # room again
    try:
        asyncio.run(go())
    finally:
        gate.set()
        checker.close()

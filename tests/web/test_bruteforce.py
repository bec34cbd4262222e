"""A brute force of the login does not hold up ingest, shown by construction (no clock involved).

Every bcrypt check of the brute force is held at a gate inside the check thread. While the
gate is shut, all of the pool's threads are busy and the rest of the bad logins wait. If any
check ran on the event loop, the loop itself would be stuck at the gate and nothing below
could be answered. So: writes from a logged-in sender get 204, /-/healthy and queries answer,
a new login waits its turn behind the attacker (it is queued, not given another thread), and
the number of checks running at once never exceeds the pool. Then the gate opens and every bad
login gets its 401.
"""

from __future__ import annotations

import asyncio
import threading

import aiohttp

from metricsgw.web import PASSWORDS
from tests.web.certs import bcrypt_hash, make_certs
from tests.web.harness import T0_MS, WRITE_HEADERS, basic, client_context, fetch, serving, write_body

POOL = 2
BAD_LOGINS = 24
WRITES = 30
LIVENESS_S = 120  # only a hang guard: a loop blocked at the gate would never get here


def test_bad_logins_wait_in_their_pool_while_ingest_goes_on(tmp_path):
    certs = make_certs(tmp_path / "certs")
    config = (f"tls_server_config:\n  cert_file: {certs.path('server.crt')}\n  key_file: {certs.path('server.key')}\n"
              f"basic_auth_users:\n  sender: {bcrypt_hash('pw')}\n  late: {bcrypt_hash('pw2')}\n")
    gate = threading.Event()

    async def go():
        async with serving(tmp_path, config, {"web.auth.max-concurrent-checks": str(POOL)}) as srv, \
                aiohttp.ClientSession() as s:
            tls, checker = client_context(certs.ca), srv.app[PASSWORDS]
            sender = {**WRITE_HEADERS, **basic("sender", "pw")}
            assert (await fetch(s, "POST", srv.url + "/api/v1/write", ssl=tls, data=write_body(t_ms=T0_MS),
                                headers=sender))[0] == 204  # logged in once: remembered

            real = checker.check

            def held(password: bytes, hashed: bytes) -> bool:
                assert gate.wait(LIVENESS_S), "gate never opened"
                return real(password, hashed)

            checker.check = held
            attack = [asyncio.create_task(fetch(s, "GET", srv.url + "/api/v1/query?query=up", ssl=tls,
                                                headers=basic("sender" if i % 2 else f"guess{i}", f"wrong{i}")))
                      for i in range(BAD_LOGINS)]
            for _ in range(LIVENESS_S * 100):
                if checker.in_flight == POOL:
                    break
                await asyncio.sleep(0.01)
            assert checker.in_flight == POOL  # every check thread is taken by the attacker

            newcomer = asyncio.create_task(fetch(s, "GET", srv.url + "/-/healthy", ssl=tls,
                                                 headers=basic("late", "pw2")))
            writes = [fetch(s, "POST", srv.url + "/api/v1/write", ssl=tls, data=write_body(t_ms=T0_MS + (i + 1) * 1000),
                            headers=sender) for i in range(WRITES)]
            statuses = [r[0] for r in await asyncio.wait_for(asyncio.gather(*writes), LIVENESS_S)]
            assert statuses == [204] * WRITES
            healthy = await asyncio.wait_for(fetch(s, "GET", srv.url + "/-/healthy", ssl=tls, headers=sender),
                                             LIVENESS_S)
            assert healthy[:2] == (200, "metricsgw is Healthy.\n")
            status, body, _ = await fetch(s, "GET", srv.url + f"/api/v1/query?query=count_over_time(up[1h])&time={T0_MS / 1000 + 60}",
                                          ssl=tls, headers=sender)
            assert status == 200 and f'"{WRITES + 1}"' in body  # every write was stored
            assert checker.in_flight == POOL and not any(t.done() for t in attack)
            assert not newcomer.done()  # queued behind the attacker's checks, not given a thread of its own

            gate.set()
            results = await asyncio.wait_for(asyncio.gather(*attack), LIVENESS_S)
            assert [r[:2] for r in results] == [(401, "Unauthorized\n")] * BAD_LOGINS
            assert (await asyncio.wait_for(newcomer, LIVENESS_S))[0] == 200
            assert checker.peak_in_flight == POOL  # never more checks at once than the pool has threads
    try:
        asyncio.run(go())
    finally:
        gate.set()  # never leave a check thread waiting

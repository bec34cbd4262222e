"""What a user is told when a process of the gateway cannot answer (issue 29): the one wording of it.

Every place of the front where a child's failure reaches a client -- a query or write it could not pass on,
``/-/ready``, ``/-/reload``, ``?scope=head``, and a query process's relay back to the front -- words it here,
so that they all say the same thing: the part in plain words ("ingest shard 0", "query process 1"), whether it
is starting or restarting, and, on a refusal, to retry. Never a socket path or an exception's class name: they
mean nothing to whoever reads a dashboard's error, and the log has them (the supervisor says how a child ended).
"""

from __future__ import annotations

import aiohttp

from ..errors import Unavailable
from .layout import Child

_RETRY = "retry in a few seconds"
_ROLES = {"shard": "ingest shard", "querier": "query process"}


def part(child: Child) -> str:
    """The child in plain words: "ingest shard 0", "query process 1"."""
    if child.role == "front":  # the front as a query process's relay sees it (handoff.py)
        return "the gateway's front process"
    return f"{_ROLES[child.role]} {child.index}"


def why(client, err: BaseException | None = None, said: str = "") -> str:
    """Why ``client``'s child (clients.py) cannot answer: "ingest shard 0 is starting", "query process 0 is
    restarting (killed by SIGKILL)", "ingest shard 1 does not accept connections". ``err``: how a call to it
    failed; ``said``: the reason it gave itself (its /-/ready's)."""
    name = part(client.child)
    proc = client.proc
    if proc is not None and not proc.started.is_set():  # its own state says more than how a call failed
        state = "restarting" if proc.restarts else "starting"
        detail = said or proc.last_exit  # "replaying the WAL", "killed by SIGKILL"
        return f"{name} is {state}" + (f" ({detail})" if detail else "")
    if said:
        return f"{name} is not ready: {said}"
    return f"{name} {_failure(err)}"


def refusal_text(reasons: list[str]) -> str:
    """The message of a request refused because of ``reasons`` (``why``'s)."""
    return "; ".join(reasons) + f"; {_RETRY}"


def refusal(reasons: list[str]) -> Unavailable:
    """The 503 (Prometheus's ``unavailable``, with Retry-After) of a request these parts could not answer."""
    return Unavailable(refusal_text(reasons))


def _failure(err: BaseException | None) -> str:
    # TimeoutError first: asyncio's is an OSError too.
    if isinstance(err, TimeoutError):
        return "does not answer in time"
    if isinstance(err, (aiohttp.ClientConnectorError, ConnectionRefusedError, FileNotFoundError)):
        return "does not accept connections"  # it ended a moment ago: the supervisor is about to restart it
    if isinstance(err, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError)):
        return "closed the connection"
    if isinstance(err, (ValueError, KeyError)):
        return "gave an answer that could not be read"
    return "cannot be reached"

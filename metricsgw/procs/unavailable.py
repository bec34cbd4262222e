"""What a user is told when a process of the gateway cannot answer (issue 29): the one wording of it.

Every place of the front where a child's failure reaches a client -- a query or write it could not pass on,
``/-/ready``, ``/-/reload``, and a query process's relay back to the front -- words it here,
so that they all say the same thing: the part in plain words ("ingest shard 0", "query process 1"), whether it
is starting or restarting, and, on a refusal, to retry. Never a socket path or an exception's class name: they
mean nothing to whoever reads a dashboard's error, and the log has them (the supervisor says how a child ended).
How a call failed is cluster/failures.py's to say (the one classifier, the query process's too); what this
module adds is the process's own state, which only the front knows.
"""

from __future__ import annotations

from ..cluster.failures import classify
from ..errors import Unavailable
from .layout import Child

_RETRY = "retry in a few seconds"
_ROLES = {"shard": "ingest shard", "querier": "query process"}


def part(child: Child) -> str:
    """The child in plain words: "ingest shard 0", "query process 1"."""
    if child.role == "front":  # the front as a query process's relay sees it (handoff.py)
        return "the gateway's front process"
    return f"{_ROLES[child.role]} {child.index}"


def not_started(client, said: str = "") -> str | None:
    """Why ``client``'s child (clients.py) cannot take requests by its own state, as a phrase following its name:
    "is starting", "is restarting (killed by SIGKILL)"; None once it has started. ``said``: the reason it gave
    itself (its /-/ready's: "replaying the WAL")."""
    proc = client.proc
    if proc is None or proc.started.is_set():
        return None
    state = "restarting" if proc.restarts else "starting"
    detail = said or proc.last_exit
    return f"is {state}" + (f" ({detail})" if detail else "")


def why(client, err: BaseException | None = None, said: str = "") -> str:
    """Why ``client``'s child cannot answer: "ingest shard 0 is starting", "query process 0 is restarting (killed
    by SIGKILL)", "ingest shard 1 does not accept connections". ``err``: how a call to it failed; ``said``: the
    reason it gave itself (its /-/ready's). Its own state says more than how a call failed."""
    phrase = not_started(client, said) or (f"is not ready: {said}" if said else classify(err).reason)
    return f"{part(client.child)} {phrase}"


def refusal_text(reasons: list[str]) -> str:
    """The message of a request refused because of ``reasons`` (``why``'s)."""
    return "; ".join(reasons) + f"; {_RETRY}"


def refusal(reasons: list[str]) -> Unavailable:
    """The 503 (Prometheus's ``unavailable``, with Retry-After) of a request these parts could not answer."""
    return Unavailable(refusal_text(reasons))

"""What an answer does without a process that did not answer: the one rule, strict or partial.

- An ingest shard of a gateway is a primary: without it the answer lacks samples the gateway acknowledged, so
  there is no answer: 503 ``unavailable`` naming the shard (a query process reading its shards, ``policy``; the
  front reading them for a peer gateway, ``primaries``).
- A peer gateway is a secondary: by default the same (strict), and with ``partial_response`` (as Thanos' query
  API takes it; --query.partial-response sets the default) the answer goes on without the peer's recent
  samples and says so in a warning.
Why a call failed is failures.py's; this module only decides what the answer does about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from ..errors import ForwardedError, LimitExceeded, Unavailable
from ..limits.context import QueryContext
from .failures import Failure

T = TypeVar("T")


@dataclass
class PeerFailure:
    peer: str  # its name: a peer's address (never its credentials), a shard's "shard-<i>"
    failure: Failure


def warning(failed: PeerFailure, what: str) -> str:
    """The warning of an answer given without a peer's recent ``what`` (partial_response)."""
    f = failed.failure
    return (f"partial answer: peer {failed.peer} did not answer ({f.result}: it {_why(f)}); its recent {what}, "
            "not yet in the shared table, are missing")


def policy(peer, failed: PeerFailure, ctx: QueryContext, partial: bool) -> PeerFailure:
    """A query's rule for ``peer`` (peers.Peer) that did not answer: the query's own deadline is its timeout; a
    process whose answer is needed makes the query unavailable (503); a peer, with partial answers allowed, only
    a warning (``failed`` is returned)."""
    ctx.check(f"reading the recent samples of {peer.label}")  # a timeout that was the query's: its own
    f = failed.failure
    if f.status == 422:  # the read crossed the query's memory where it was answered: the query's limit, named there
        raise LimitExceeded(f"reading the recent samples of {peer.label}: {f.said}")
    if peer.primary:
        # a query process does not know its shard's state: a shard that is down is most likely restarting
        hint = " (it is starting or restarting)" if f.result == "down" else ""
        raise unavailable([(peer.label, Failure(f.result, f.reason + hint))])
    if not partial:
        raise Unavailable(f"{peer.label} could not be read: it {_why(f)}; the answer would lack its recent samples, "
                          "so none is given (ask with partial_response=true for an answer without them)")
    return failed


def primaries(answers: list[tuple[str, T | Failure]]) -> list[T]:
    """Every primary's answer (``(label, answer or Failure)``), or none: a request every one of them refused
    alike (4xx but 429: the request is wrong, not the gateway) is refused as the first said; any other failure
    is a 503 naming each part that failed."""
    failed = [(label, got) for label, got in answers if isinstance(got, Failure)]
    if not failed:
        return [got for _, got in answers]
    refused = [f for _, f in failed if f.status is not None and 400 <= f.status < 500 and f.status != 429]
    if len(refused) == len(answers):
        raise ForwardedError(refused[0].status, refused[0].said)
    raise unavailable(failed)


def unavailable(failed: list[tuple[str, Failure]]) -> Unavailable:
    """The 503 of an answer without these primaries (label, why)."""
    parts = "; ".join(f"{label} {f.reason}" for label, f in failed)  # "ingest shard 0 is restarting (...)"
    return Unavailable(f"{parts}; the answer would lack samples this gateway acknowledged, so none is given; "
                       "retry in a few seconds")


def _why(f: Failure) -> str:
    # a peer's wait is --cluster.peer-timeout (a shard's is the query's own, never a peer's warning)
    return f"{f.reason} (--cluster.peer-timeout)" if f.result == "timeout" else f.reason

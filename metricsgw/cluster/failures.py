"""Why a call to another process has no answer, in plain words: the one classifier of a failed call.

Every caller that asks another process of the gateway -- a query process reading its shards (blocking, unix_http.py)
and its peers (aiohttp), the front reading its shards for a peer (gateway_head.py), the front passing a request
to a child (procs/unavailable.py) -- turns its failure into a ``Failure`` here, so a user reads the same words
whichever path failed. The words never hold a socket path or an exception's class name: they mean nothing to
whoever reads a dashboard's error; the debug log has them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import aiohttp

from ..errors import BadData

log = logging.getLogger(__name__)

# Of a refusal's body, what is read, and what of its message a reason quotes.
REFUSAL_BYTES = 2000
_QUOTED = 300


class Refused(Exception):
    """The process answered, but not 200; ``said``: its error message (an error envelope's ``error``)."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.said = status, error_text(body)
        super().__init__(f"HTTP {status}: {self.said[:_QUOTED]}")


# What a failed call raises, whichever client made it (a timeout is an OSError; ValueError/KeyError: a JSON
# answer that is not the envelope). Anything else is a bug and stays one.
CALL_ERRORS = (Refused, BadData, aiohttp.ClientError, OSError, ValueError, KeyError)


@dataclass(frozen=True)
class Failure:
    result: str  # timeout | refused | garbage | down: metricsgw_peer_requests_total's label
    reason: str  # a phrase that follows the process's name: "does not accept connections"
    status: int | None = None  # a refusal's HTTP status
    said: str = ""  # a refusal's own message


def classify(err: BaseException | None, timeout_s: float | None = None) -> Failure:
    """The failure of a call that raised ``err`` (None: it was never made); ``timeout_s``: the time it was given,
    named in the reason when known. TimeoutError is checked first: asyncio's, the socket's and unix_http's are
    all TimeoutError, and an OSError too."""
    if isinstance(err, TimeoutError):
        return Failure("timeout", "does not answer in time" if timeout_s is None
                       else f"did not answer within {timeout_s:g}s")
    if isinstance(err, Refused):
        return Failure("refused", f"answered HTTP {err.status}: {err.said[:_QUOTED]}", err.status, err.said)
    if err is not None:
        log.debug("call failed: %s: %s", type(err).__name__, err)  # the socket or host detail is for operators
    if isinstance(err, BadData):  # our own words on what is wrong with the answer
        return Failure("garbage", f"gave an answer that could not be read ({err})")
    if isinstance(err, (ValueError, KeyError)):
        return Failure("garbage", "gave an answer that could not be read")
    if isinstance(err, (aiohttp.ClientConnectorError, ConnectionRefusedError, FileNotFoundError)):
        return Failure("down", "does not accept connections")  # ended a moment ago, or never listened
    if isinstance(err, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError)):
        return Failure("down", "closed the connection")
    return Failure("down", "cannot be reached")


def error_text(body: bytes) -> str:
    """A refusal's message: an error envelope's ``error``, else the body as text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        return str(json.loads(text)["error"])
    except (ValueError, KeyError, TypeError):
        return text

"""Ask the configured ruler (``--rules.ruler-url``: vmalert or Prometheus) for its rule groups.

Asynchronous and bounded: one GET with a total deadline (``--rules.ruler-timeout``) and a cap on
the answer's size, so a slow or broken ruler costs a request nothing but its own wait, never the
event loop. Every failure becomes ``Unavailable`` (503, errorType "unavailable") naming the ruler
and the setting, because the fix is on the ruler's side and a retry may work.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from ..errors import Unavailable
from .shape import RulerAnswerError, groups_of

MAX_ANSWER_BYTES = 64 * 1024**2  # rule groups are configuration-sized; more is a broken ruler


class RulerClient:
    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def groups(self) -> list[dict]:
        """The ruler's rule groups in Prometheus's shape (shape.groups_of)."""
        url = f"{self.base_url}/api/v1/rules"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._client().get(url, headers={"Accept": "application/json"}) as resp:
                    body = await _read_capped(resp)
                    if resp.status != 200:
                        raise RulerAnswerError(f"HTTP {resp.status}: {body[:200].decode(errors='replace')}")
            return groups_of(json.loads(body))
        except TimeoutError:
            raise self._unavailable(f"no answer within {self.timeout_s:g}s (--rules.ruler-timeout)") from None
        except aiohttp.ClientError as err:
            raise self._unavailable(f"{type(err).__name__}: {err}") from None
        except (RulerAnswerError, ValueError) as err:  # ValueError: not JSON
            raise self._unavailable(f"unexpected answer: {err}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created on first use, inside the running loop
            self._session = aiohttp.ClientSession()
        return self._session

    def _unavailable(self, why: str) -> Unavailable:
        return Unavailable(f"the ruler at {self.base_url} (--rules.ruler-url) is unavailable: {why}")


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    if resp.content_length is not None and resp.content_length > MAX_ANSWER_BYTES:
        raise RulerAnswerError(f"answer of {resp.content_length} bytes is over {MAX_ANSWER_BYTES}")
    chunks, total = [], 0
    async for chunk in resp.content.iter_chunked(256 * 1024):
        total += len(chunk)
        if total > MAX_ANSWER_BYTES:
            raise RulerAnswerError(f"answer is over {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

"""Identical requests in flight share one evaluation (as Thanos' and Mimir's query-frontends do).

Four Grafana screens on one dashboard ask the same range queries at the same moments; the first evaluates, the
others wait for its answer. A waiter keeps its own deadline; if the evaluation it waits for fails (its client
left, its own timeout), the waiter evaluates for itself rather than inherit another request's failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from ..errors import QueryTimeout

T = TypeVar("T")


class Flights:
    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future] = {}

    async def run(self, key: Hashable, timeout_s: float, evaluate: Callable[[], Awaitable[T]]) -> T:
        running = self._running.get(key)
        if running is not None:
            try:
                return await asyncio.wait_for(asyncio.shield(running), max(timeout_s, 0.0))
            except asyncio.TimeoutError:
                raise QueryTimeout("query timed out waiting for the same query's evaluation "
                                   "(limit --query.timeout or the request's timeout)") from None
            except asyncio.CancelledError:
                if running.cancelled():  # the evaluation's request went away: evaluate for this one
                    return await evaluate()
                raise  # this request went away
            except Exception:
                return await evaluate()
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)
        self._running[key] = fut
        try:
            answer = await evaluate()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as err:
            fut.set_exception(err)
            raise
        else:
            fut.set_result(answer)
            return answer
        finally:
            if self._running.get(key) is fut:
                del self._running[key]


def _retrieve(fut: asyncio.Future) -> None:
    """A failure nobody waited for is not an error to log: its own request answered it."""
    if not fut.cancelled():
        fut.exception()

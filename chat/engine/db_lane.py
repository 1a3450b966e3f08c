"""The database thread's priority lane: a turn's database work, most urgent
first.

Channels runs a process's database calls on one thread, in the order they
were asked. Under load a turn's start, which the visitor's first character
waits for, queued there behind other turns' ends and tool rounds (at 100
back-to-back visitors on this project's 2-core machine, a start waited
about a second, for about 4 ms of work). Turns' work goes through here
instead. At most two jobs at a time are handed to the database thread (so
that it never waits for the loop to hand it the next); the others wait
here, earliest deadline first, a job's deadline being when it was asked
plus the slack of its kind:

- URGENT, a turn's start: the first character waits for it;
- SOON, a tool round's record: the answer's next round waits for it;
- LATER, a turn's end: the visitor has read the answer already.

So starts go first, and an end waits at most its slack (a second) longer
than it would have in order: never for ever, however many starts arrive.
A turn's own jobs still run one after another (each awaits the one before),
and on the same thread as every other call, in the order handed to it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from channels.db import database_sync_to_async

T = TypeVar("T")

URGENT = 0.0
SOON = 0.1
LATER = 1.0


class Lane:
    """Runs sync database functions from the event loop, `width` at a time,
    earliest deadline first."""

    def __init__(self, width: int, call: Callable[..., Any]) -> None:
        self.width = width
        self.running = 0
        self._call = call
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, ticket in self._waiting if not ticket.done())

    async def run(self, slack: float, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.running < self.width and not self._waiting:
            self.running += 1
        else:
            loop = asyncio.get_running_loop()
            ticket: asyncio.Future[None] = loop.create_future()
            heapq.heappush(self._waiting, (loop.time() + slack, next(self._order), ticket))
            try:
                await ticket  # the slot of the job that ended is handed over with it
            except asyncio.CancelledError:
                if ticket.done() and not ticket.cancelled():
                    self._next()  # handed over, and not taken: to the next one
                raise
        try:
            result: T = await self._call(function)(*args, **kwargs)
            return result
        finally:
            self._next()

    def _next(self) -> None:
        while self._waiting:
            _, _, ticket = heapq.heappop(self._waiting)
            if not ticket.done():
                ticket.set_result(None)
                return
        self.running -= 1


# One lane per event loop: its futures belong to the loop (daphne has one;
# each async test has its own).
_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Lane] = weakref.WeakKeyDictionary()


def lane() -> Lane:
    loop = asyncio.get_running_loop()
    found = _lanes.get(loop)
    if found is None:
        found = _lanes[loop] = Lane(2, database_sync_to_async)
    return found


async def run(slack: float, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function(*args, **kwargs)` on a database thread, when its turn
    comes: URGENT, SOON or LATER."""
    return await lane().run(slack, function, *args, **kwargs)

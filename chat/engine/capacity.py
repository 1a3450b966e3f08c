"""Whether this process can take another visitor: a process whose event
loop runs too late to finish handshakes in time refuses at the door.

Past that point a browser's handshake would time out, and it would try
again blindly. Such a process refuses new sockets instead, at once, with
close code 4503 (after accepting the handshake: a browser cannot read a
refused handshake's status). The page says it is busy and tries again with
backoff (2 s, doubling to 30 s, with jitter), which behind a balancer may
land on a process with room.

Late means: a tick asked for every 100 ms comes more than
KOOKEE_SATURATION_MS late (its last second's worst).

Not the turns' database work running late (chat/engine/db_lane.py):
that was a signal too, and measured worse than none. Its queue is made by
the visitors already here, asking back to back; refusing newcomers sheds
none of it, so at 500 visitors on one process it refused 1,310 sockets in
20 s, whose retries took the database thread from the turns: 267 turns
against 536 without it (docs/benchmarks.md, "Concurrency").
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque

from django.conf import settings

from chat.ops import metrics

TICK_SECONDS = 0.1
WINDOW = 10  # ticks: the last second


class LoopLag:
    """How late this event loop runs its callbacks, measured with a tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lags: deque[float] = deque(maxlen=WINDOW)
        self.expected = loop.time() + TICK_SECONDS
        self.handle = loop.call_at(self.expected, self.tick)

    def tick(self) -> None:
        now = self.loop.time()
        self.lags.append(now - self.expected)
        self.expected = now + TICK_SECONDS
        self.handle = self.loop.call_at(self.expected, self.tick)

    def worst(self) -> float:
        # A tick not come yet counts as late as it is now.
        return max([*self.lags, self.loop.time() - self.expected, 0.0])


_lags: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag] = weakref.WeakKeyDictionary()


def start() -> None:
    """Starts measuring this event loop's lag (once per loop)."""
    loop = asyncio.get_running_loop()
    if loop not in _lags:
        _lags[loop] = LoopLag(loop)


def saturated() -> bool:
    """Whether a new visitor should be refused now (and counts it if so)."""
    limit = settings.KOOKEE_SATURATION_MS / 1000
    if limit <= 0:
        return False
    start()
    behind = _lags[asyncio.get_running_loop()].worst()
    if behind <= limit:
        return False
    metrics.refused_saturated()
    return True

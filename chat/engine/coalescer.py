"""Deltas to the visitor, at most one per window.

Every frame to the visitor costs the same whatever it carries: the hub's
hop, a JSON encoding and a socket write per tab. A model that streams a
word every 25 ms would cost one of each per word; gathered for a short
window, the same text costs a half or a third as many, and reads the same.

The first text goes at once (and so does text after a pause longer than the
window): only what arrives while a window runs waits, at most until the
window ends. Nothing of Django here; the round loop owns one per turn.

A provider's stream read through our own connections is paced to the same
window instead (provider.Stream.paced): each read is then a window's text,
and goes out as it is read. The coalescer gathers what is read as it comes
(the offline model's stream).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Coalescer:
    """Text handed to `put` goes to `send` in order, gathered per window.

    Sending happens in a task of its own, so the provider's stream is read
    meanwhile; `drain` sends what is gathered now and waits for it (before
    a tool frame, and at a round's or turn's end), `close` drops it (Stop).
    An exception from `send` comes out of the next `put` or `drain`.
    """

    def __init__(self, send: Callable[[str], Awaitable[None]], window: float) -> None:
        self._send = send
        self.window = window
        self._parts: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._hurry = False
        self._error: Exception | None = None

    def put(self, text: str) -> None:
        self._raise_error()
        self._parts.append(text)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def drain(self) -> None:
        """Sends what is gathered without waiting for its window."""
        if self._task is not None:
            self._hurry = True
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)
            try:
                # Cancelling the drain (a Stop) cancels the send: what was
                # gathered and not sent was never seen.
                await self._task
            finally:
                self._hurry = False
        self._raise_error()

    def close(self) -> None:
        """Drops what is gathered and not sent (the turn was stopped)."""
        self._parts.clear()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._parts:
                text = "".join(self._parts)
                self._parts.clear()
                await self._send(text)
                if self._hurry:
                    continue
                # The window: what arrives meanwhile goes out with its end.
                self._wake = wake = loop.create_future()
                timer = loop.call_later(self.window, _set, wake)
                try:
                    await wake
                finally:
                    timer.cancel()
                    self._wake = None
        except Exception as exc:
            self._parts.clear()
            self._error = exc
        finally:
            self._task = None

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

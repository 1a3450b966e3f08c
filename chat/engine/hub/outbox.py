"""Messages from this process's hub to another process, in order, one send
at a time (chat/engine/hub_protocol.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer

from chat.engine import hub_protocol
from chat.engine.hub_protocol import HubMessage

logger = logging.getLogger("kookee.hub")

# How long a message to another process waits for room in its channel.
FULL_WAIT_SECONDS = 10


class Outbox:
    """Messages for one other process, sent one at a time, in order; frames
    of a turn that queue up behind a send in flight go as one message."""

    def __init__(self, layer: BaseChannelLayer, channel: str, on_idle: Callable[[Outbox], None]) -> None:
        self.layer = layer
        self.channel = channel
        self.on_idle = on_idle
        self.queue: list[HubMessage] = []
        self.sender: asyncio.Task[None] | None = None

    def put(self, message: HubMessage) -> None:
        last = self.queue[-1] if self.queue else None
        if (
            last is not None
            and message["type"] == last["type"] == hub_protocol.FRAMES
            and message["turn_id"] == last["turn_id"]
        ):
            last["frames"] = [*last["frames"], *message["frames"]]
        else:
            self.queue.append(message)
        if self.sender is None or self.sender.done():
            self.sender = asyncio.ensure_future(self._send_all())
            self.sender.add_done_callback(lambda _: self.on_idle(self))

    async def _send_all(self) -> None:
        while self.queue:
            # Out of the queue first: nothing merges into a message in flight.
            message = self.queue.pop(0)
            try:
                await self._send_patiently(message)
            except ChannelFull:
                # Gone: its tabs see the gap in seq and ask for a resume.
                logger.warning("process channel %s stayed full: a %s was dropped", self.channel, message["type"])
            except Exception:
                logger.exception("could not send %s to %s", message["type"], self.channel)

    async def _send_patiently(self, message: HubMessage) -> None:
        """Sends, waiting out a full channel (its reader is busy) for up to
        FULL_WAIT_SECONDS: frames that arrive meanwhile merge into the
        message queued behind, so the wait costs no more messages."""
        delay, waited = 0.01, 0.0
        while True:
            try:
                await self.layer.send(self.channel, message)
                return
            except ChannelFull:
                if waited >= FULL_WAIT_SECONDS:
                    raise
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 0.5)

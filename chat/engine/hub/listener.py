"""What this process's hub hears from the others, on its channel: each
message of chat/engine/hub_protocol.py handled by the method of its type's
name (`hub.watch` -> `hub_watch`), as channels' consumers dispatch; and the
health check's round trip through that channel."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async

from chat.engine import frames, hub_protocol, records
from chat.engine.hub.registry import Registry, Remote, Watched, deliver_quietly
from chat.engine.hub_protocol import HubMessage
from chat.support import replies
from chat.vocabulary import StopReason

logger = logging.getLogger("kookee.hub")


class Hub(Registry):
    """A visitor's tabs across server processes (chat/engine/hub/__init__.py)."""

    def __init__(self) -> None:
        super().__init__()
        self._pings: dict[str, asyncio.Future[None]] = {}

    async def _listen(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the channel layer failed; listening again in a second")
                await asyncio.sleep(1)
                continue
            kind = message.get("type")
            if kind == hub_protocol.CLOSE:
                return
            handler = self._handler(kind)
            if handler is None:
                logger.warning("unknown hub message %r", kind)
                continue
            try:
                await handler(message)
            except Exception:
                logger.exception("hub message %s failed", kind)

    def _handler(self, kind: object) -> Callable[[HubMessage], Awaitable[None]] | None:
        if not isinstance(kind, str) or not kind.startswith("hub."):
            return None
        handler: Callable[[HubMessage], Awaitable[None]] | None = getattr(self, hub_protocol.handler_name(kind), None)
        return handler

    async def close(self) -> None:
        """Ends the listener with a message it understands (a receive
        cancelled on channels-redis leaves the channel stalled), after what
        is queued for other processes has gone."""
        await self.drain()
        if self._listener and not self._listener.done():
            await self.layer.send(self.channel, hub_protocol.close())
            await asyncio.wait({self._listener}, timeout=10)

    async def check(self, timeout: float = 2.0) -> None:
        """Round-trips a message through this process's channel: raises
        unless the channel layer and this hub's listener answer in time."""
        channel = await asyncio.wait_for(self.start(), timeout)
        token = uuid.uuid4().hex
        answered = asyncio.get_running_loop().create_future()
        self._pings[token] = answered
        try:
            await asyncio.wait_for(self.layer.send(channel, hub_protocol.ping(token)), timeout)
            # Only the wait is cancelled on a timeout, never the receive.
            await asyncio.wait_for(answered, timeout)
        finally:
            self._pings.pop(token, None)

    # --- one method per message type -----------------------------------------------------

    async def hub_ping(self, message: HubMessage) -> None:
        answered = self._pings.get(message.get("token", ""))
        if answered and not answered.done():
            answered.set_result(None)

    async def hub_started(self, message: HubMessage) -> None:
        visitor, turn_id, owner = message["visitor"], message["turn_id"], message["owner"]
        tabs = list(self.tabs.get(visitor, ()))
        if owner == self.channel or not tabs or turn_id <= self._ended.get(visitor, 0):
            return
        self.remote[visitor] = Remote(turn_id, owner)
        for tab in tabs:
            watched = self.watched.get(tab)
            if watched is not None and watched.turn_id == turn_id:
                continue  # it asked already, having found the turn stored
            self.watched[tab] = Watched(turn_id, 0)
            await deliver_quietly(tab, frames.turn_started(turn_id))
        self._post(owner, self._watch(visitor, turn_id, tabs))

    async def hub_watch(self, message: HubMessage) -> None:
        broadcast = self.owned.get(message["visitor"])
        process = message["process"]
        if broadcast is None or broadcast.turn_id != message["turn_id"]:
            # Ended meanwhile: the watcher reads its end from the database.
            self._post(process, hub_protocol.gone(message))
            return
        broadcast.remote.setdefault(process, set()).update(message["tabs"])
        if broadcast.grace:
            broadcast.grace.cancel()
            broadcast.grace = None
        self._post(
            process,
            hub_protocol.resume(broadcast.visitor, broadcast.turn_id, broadcast.seq, broadcast.text, message["tabs"]),
        )
        if broadcast.asking:
            # Questions still open: the tabs there show each once (by call id).
            asked = [frame for _answer, frame in broadcast.asking.values()]
            self._post(process, hub_protocol.frames_of(broadcast.visitor, broadcast.turn_id, list(asked)))

    async def hub_unwatch(self, message: HubMessage) -> None:
        for broadcast in self.owned.values():
            if broadcast.turn_id == message["turn_id"]:
                tabs = broadcast.remote.get(message["process"], set())
                tabs.difference_update(message["tabs"])
                if not tabs:
                    broadcast.remote.pop(message["process"], None)
                self._maybe_grace(broadcast)
                return

    async def hub_stop(self, message: HubMessage) -> None:
        for broadcast in self.owned.values():
            if broadcast.turn_id == message["turn_id"]:
                broadcast.stop(StopReason.STOPPED, message.get("tab", ""))
                return

    async def hub_answer(self, message: HubMessage) -> None:
        for broadcast in self.owned.values():
            if broadcast.turn_id == message["turn_id"]:
                broadcast.answer(message["call_id"], message["approve"])
                return

    async def hub_resume(self, message: HubMessage) -> None:
        visitor, turn_id = message["visitor"], message["turn_id"]
        if turn_id <= self._ended.get(visitor, 0):
            return  # late: the tabs here saw its end, or a later turn's
        wanted = set(message["tabs"])
        for tab in list(self.tabs.get(visitor, ())):
            watched = self.watched.get(tab)
            if watched is not None and watched.turn_id > turn_id:
                # Late: the tab read this turn's end from the database and
                # follows the next one (turn ids only grow).
                continue
            if tab.tab_id in wanted:
                await self._resume(tab, turn_id, message["seq"], message["text"])

    async def hub_frames(self, message: HubMessage) -> None:
        visitor, turn_id = message["visitor"], message["turn_id"]
        for frame in message["frames"]:
            for tab in list(self.tabs.get(visitor, ())):
                await self._deliver(tab, visitor, turn_id, frame)
            if frame["type"] == "turn.ended":
                self._forget_remote(visitor, turn_id)

    async def hub_ended(self, message: HubMessage) -> None:
        """A turn closed by the sweeper: its process died."""
        visitor, turn_id = message["visitor"], message["turn_id"]
        for tab in list(self.tabs.get(visitor, ())):
            await self._deliver(tab, visitor, turn_id, message["frame"])
        self._forget_remote(visitor, turn_id)

    async def hub_tell(self, message: HubMessage) -> None:
        """A frame for every tab of a visitor here (hub_protocol.tell_visitor). A
        reply of Support's shown in a tab is seen: no email for it."""
        tabs = list(self.tabs.get(message["visitor"], ()))
        frame = message["frame"]
        for tab in tabs:
            await deliver_quietly(tab, frame)
        if tabs and frame["type"] == "agent.message":
            await database_sync_to_async(replies.mark_seen)([frame["id"]])

    async def hub_gone(self, message: HubMessage) -> None:
        """The turn had ended when its owner heard of our tabs."""
        visitor, turn_id = message["visitor"], message["turn_id"]
        if not any(w.turn_id == turn_id for w in self.watched.values()):
            return
        frame = await database_sync_to_async(records.ended_frame)(turn_id)
        if frame is not None:
            await self.hub_ended(hub_protocol.ended(visitor, turn_id, frame))

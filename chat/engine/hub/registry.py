"""This process's side of the hub: the tabs connected here, by visitor, the
turns this process owns and those owned elsewhere that its tabs watch; what
it sends other processes (chat/engine/hub_protocol.py). What it hears from
them is chat/engine/hub/listener.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from channels.db import database_sync_to_async
from django.conf import settings

from chat.engine import frames, hub_protocol, records
from chat.engine.hub.outbox import Outbox
from chat.engine.hub_protocol import HubMessage
from chat.vocabulary import StopReason

logger = logging.getLogger("kookee.hub")


class Tab(Protocol):
    """A socket of a conversation (the consumer)."""

    tab_id: str

    async def deliver(self, frame: frames.Frame) -> None: ...


@dataclass(eq=False)
class Broadcast:
    """A turn owned by this process: its frames so far, numbered, and who
    watches it from other processes."""

    turn_id: int
    visitor: str
    task: asyncio.Task[None] | None = None
    seq: int = 0
    parts: list[str] = field(default_factory=list)
    # Process channel -> the ids of its tabs that watch this turn.
    remote: dict[str, set[str]] = field(default_factory=dict)
    stop_reason: str = ""
    stopped_by: str = ""
    stop_asked_at: float | None = None
    grace: asyncio.TimerHandle | None = None
    # Actions waiting for the visitor's yes, by call id: the answer to give,
    # and the action.confirm frame (sent again to a tab that comes in).
    asking: dict[str, tuple[asyncio.Future[bool], frames.ActionConfirm]] = field(default_factory=dict)

    def answer(self, call_id: str, approve: bool) -> bool:
        """The visitor's answer to an action.confirm; False when it waits for none (answered, or over)."""
        waiting = self.asking.get(call_id)
        if waiting is None or waiting[0].done():
            return False
        waiting[0].set_result(approve)
        return True

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def stop(self, reason: str, by: str = "") -> None:
        """Stops the turn (its task saves and bills it). The first reason
        given is the one kept."""
        if self.grace:
            self.grace.cancel()
            self.grace = None
        if self.task is None or self.task.done():
            return
        if not self.stop_reason:
            self.stop_reason, self.stopped_by = reason, by
            self.stop_asked_at = asyncio.get_running_loop().time()
        self.task.cancel()


@dataclass
class Watched:
    """A tab's place in a turn: the last seq it was sent; -1 while it waits
    for its resume."""

    turn_id: int
    seq: int


@dataclass
class Remote:
    """A turn owned by another process that tabs here watch."""

    turn_id: int
    owner: str


class Registry:
    """The tabs and turns of this process. Its channel is listened to by the
    subclass that handles other processes' messages (listener.Hub)."""

    def __init__(self) -> None:
        self.layer = hub_protocol.layer()
        self.channel = ""
        self.closing = False  # shutting down: no new turns (turns.start)
        self._listener: asyncio.Task[None] | None = None
        self._starting: asyncio.Future[str] | None = None
        self.tabs: dict[str, set[Tab]] = {}
        self.watched: dict[Tab, Watched] = {}
        self.owned: dict[str, Broadcast] = {}
        self.remote: dict[str, Remote] = {}
        self._outboxes: dict[str, Outbox] = {}
        # The latest turn of each visitor with tabs here that has ended: an
        # announcement arriving after its turn's end (read meanwhile from the
        # database) must not start it again in the tabs. Turn ids only grow.
        self._ended: dict[str, int] = {}
        self._background: set[asyncio.Task[Any]] = set()
        # Group discards under way, by visitor: a tab that comes back (a
        # reload) waits for its visitor's, or the discard could land after
        # its group_add and leave this process deaf to their turns.
        self._leaving: dict[str, asyncio.Task[None]] = {}

    # --- the process's channel ----------------------------------------------------------

    async def start(self) -> str:
        """This process's channel, listened to from the first call on."""
        if self.channel:
            return self.channel
        if self._starting is None:
            self._starting = asyncio.ensure_future(self.layer.new_channel())
        channel = await asyncio.shield(self._starting)
        if not self.channel:
            self.channel = channel
            self._listener = asyncio.create_task(self._listen())
        return self.channel

    async def _listen(self) -> None:
        raise NotImplementedError  # listener.Hub

    async def drain(self, timeout: float = 5) -> None:
        senders = [outbox.sender for outbox in self._outboxes.values() if outbox.sender and not outbox.sender.done()]
        if senders:
            await asyncio.wait(senders, timeout=timeout)

    def _post(self, channel: str, message: HubMessage) -> None:
        """Queues a message for another process: sent in order, consecutive
        frames of a turn merged while a send is in flight."""
        outbox = self._outboxes.get(channel)
        if outbox is None:
            outbox = self._outboxes[channel] = Outbox(self.layer, channel, self._outbox_idle)
        outbox.put(message)

    def _outbox_idle(self, outbox: Outbox) -> None:
        # Processes come and go (every restart is a new channel): keep no
        # outbox that has nothing to send.
        if not outbox.queue and self._outboxes.get(outbox.channel) is outbox:
            del self._outboxes[outbox.channel]

    def _spawn(self, work: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _discard(self, visitor: str) -> None:
        try:
            await self.layer.group_discard(hub_protocol.group(visitor), self.channel)
        except Exception:
            # Harmless: announcements for a visitor with no tab here are ignored.
            logger.exception("could not leave a visitor's group")
        finally:
            if self._leaving.get(visitor) is asyncio.current_task():
                del self._leaving[visitor]

    async def announce(self, visitor: str, message: HubMessage) -> None:
        """A message to every process with tabs of the visitor."""
        try:
            await self.layer.group_send(hub_protocol.group(visitor), message)
        except Exception:
            logger.exception("could not announce %s", message["type"])

    def _watch(self, visitor: str, turn_id: int, tabs: list[Tab]) -> HubMessage:
        return hub_protocol.watch(visitor, turn_id, self.channel, [tab.tab_id for tab in tabs])

    # --- tabs ----------------------------------------------------------------------------

    async def join(self, tab: Tab, visitor: str, running: tuple[int, str] | None) -> None:
        """A tab of the conversation connects (or its conversation became
        known); `running` is the conversation's running turn as stored: its
        id and its owner's channel. A turn running is resumed in this tab."""
        await self.start()
        tabs = self.tabs.setdefault(visitor, set())
        if tab in tabs:
            return
        tabs.add(tab)
        broadcast = self.owned.get(visitor)
        if broadcast is not None and broadcast.grace:
            # Before any await: the grace period must not end while this tab comes in.
            broadcast.grace.cancel()
            broadcast.grace = None
        if len(tabs) == 1:
            leaving = self._leaving.pop(visitor, None)
            if leaving is not None:
                await asyncio.wait({leaving})
            await self.layer.group_add(hub_protocol.group(visitor), self.channel)
            if running is None:
                # Read before this process was in the visitor's group: a turn
                # that started elsewhere meanwhile was announced to nobody here.
                running = await database_sync_to_async(records.running_turn)(visitor)
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            await self._resume(tab, broadcast.turn_id, broadcast.seq, broadcast.text)
            for _answer, asked in list(broadcast.asking.values()):
                await deliver_quietly(tab, asked)  # the question is still open
            return
        remote = self.remote.get(visitor)
        if remote is None and running is not None and running[1] != self.channel:
            remote = self.remote[visitor] = Remote(*running)
        watched = self.watched.get(tab)
        if remote is not None and (watched is None or watched.turn_id != remote.turn_id):
            self.watched[tab] = Watched(remote.turn_id, -1)
            self._post(remote.owner, self._watch(visitor, remote.turn_id, [tab]))

    async def leave(self, tab: Tab, visitor: str) -> None:
        """A tab closes. The last tab of the visitor to leave starts their
        running turn's grace period."""
        watched = self.watched.pop(tab, None)
        tabs = self.tabs.get(visitor)
        if not tabs or tab not in tabs:
            return
        tabs.discard(tab)
        if not tabs:
            del self.tabs[visitor]
            self._ended.pop(visitor, None)
            self._leaving[visitor] = self._spawn(self._discard(visitor))
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            self._maybe_grace(broadcast)
            return
        remote = self.remote.get(visitor)
        if remote is not None and watched is not None and watched.turn_id == remote.turn_id:
            self._post(remote.owner, hub_protocol.unwatch(remote.turn_id, self.channel, [tab.tab_id]))
        if not tabs:
            self.remote.pop(visitor, None)

    def running(self, visitor: str) -> bool:
        """Whether this process knows of a turn of the visitor running."""
        return visitor in self.owned or visitor in self.remote

    async def busy(self, visitor: str) -> bool:
        """Whether a turn of the visitor runs, for a new message: one run
        here, as this process knows; one run elsewhere, as the database says.
        What this process heard of another's turn lags its end by a round
        trip through the channel layer: a tab that connected as it ended
        reads it ended in its history, and may ask again before the owner's
        answer (`hub.gone`) arrives."""
        if visitor in self.owned:
            return True
        remote = self.remote.get(visitor)
        if remote is None:
            return False
        running = await database_sync_to_async(records.running_turn)(visitor)
        if running is None:
            self._forget_remote(visitor, remote.turn_id)
            return False
        return True

    async def stop(self, tab: Tab, visitor: str) -> asyncio.Task[None] | None:
        """A tab's Stop, for the visitor's running turn wherever it runs.
        Returns the turn's task when it runs here."""
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            broadcast.stop(StopReason.STOPPED, tab.tab_id)
            return broadcast.task
        remote = self.remote.get(visitor)
        if remote is None:
            running = await database_sync_to_async(records.running_turn)(visitor)
            if running is None or running[1] == self.channel:
                return None
            remote = Remote(*running)
        self._post(remote.owner, hub_protocol.stop(remote.turn_id, tab.tab_id))
        return None

    async def answer(self, tab: Tab, visitor: str, call_id: str, approve: bool) -> bool:
        """A tab's answer to an action.confirm, for the visitor's running
        turn wherever it runs. False when the turn runs here and asks no
        such question (any more)."""
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            return broadcast.answer(call_id, approve)
        remote = self.remote.get(visitor)
        if remote is None:
            running = await database_sync_to_async(records.running_turn)(visitor)
            if running is None or running[1] == self.channel:
                return False
            remote = Remote(*running)
        self._post(remote.owner, hub_protocol.answer(remote.turn_id, call_id, approve))
        return True

    # --- turns owned here ----------------------------------------------------------------

    async def own(self, turn_id: int, visitor: str) -> Broadcast:
        """A turn this process starts: the visitor's tabs here follow it from
        the start, and the processes with other tabs of theirs are told."""
        await self.start()
        broadcast = self.owned[visitor] = Broadcast(turn_id, visitor)
        self.remote.pop(visitor, None)
        for tab in self.tabs.get(visitor, ()):
            self.watched[tab] = Watched(turn_id, 0)
        self._spawn(self.announce(visitor, hub_protocol.started(visitor, turn_id, self.channel)))
        return broadcast

    async def publish(self, broadcast: Broadcast, frame: frames.TurnFrame) -> None:
        """Sends a frame of an owned turn to every tab that watches it."""
        if frame["type"] == "turn.ended":
            # From now on a tab that comes in, here or elsewhere, reads the
            # turn's end from the database (saved before this frame) rather
            # than being resumed into a turn that has ended.
            self.disown(broadcast)
        elif frame["type"] == "delta":
            broadcast.seq += 1
            frame["seq"] = broadcast.seq
            broadcast.parts.append(frame["text"])
        elif frame["type"] == "tool":
            broadcast.seq += 1
            frame["seq"] = broadcast.seq
        for process in broadcast.remote:
            self._post(process, hub_protocol.frames_of(broadcast.visitor, broadcast.turn_id, [frame]))
        for tab in list(self.tabs.get(broadcast.visitor, ())):
            await self._deliver(tab, broadcast.visitor, broadcast.turn_id, frame)

    def disown(self, broadcast: Broadcast) -> None:
        """The owned turn has ended (its turn.ended published)."""
        if broadcast.grace:
            broadcast.grace.cancel()
        if self.owned.get(broadcast.visitor) is broadcast:
            del self.owned[broadcast.visitor]

    def _maybe_grace(self, broadcast: Broadcast) -> None:
        """With nobody watching any more, the turn runs on for the grace
        period, then stops."""
        if self.tabs.get(broadcast.visitor) or any(broadcast.remote.values()):
            return
        if broadcast.grace or broadcast.stop_reason:
            return
        grace = settings.KOOKEE_RESUME_GRACE_SECONDS
        if grace <= 0:
            broadcast.stop(StopReason.LEFT)
        else:
            broadcast.grace = asyncio.get_running_loop().call_later(grace, broadcast.stop, StopReason.LEFT)

    def stop_all(self, reason: str) -> list[asyncio.Task[None]]:
        """Stops every turn this process owns, and starts no more (shutdown)."""
        self.closing = True
        tasks = []
        for broadcast in list(self.owned.values()):
            broadcast.stop(reason)
            if broadcast.task:
                tasks.append(broadcast.task)
        return tasks

    def _forget_remote(self, visitor: str, turn_id: int) -> None:
        remote = self.remote.get(visitor)
        if remote is not None and remote.turn_id == turn_id:
            del self.remote[visitor]

    # --- frames to one tab ---------------------------------------------------------------

    async def _resume(self, tab: Tab, turn_id: int, seq: int, text: str) -> None:
        watched = self.watched.get(tab)
        if watched is not None and watched.turn_id == turn_id and watched.seq >= seq:
            return  # it has seen all that already (it followed from the start)
        self.watched[tab] = Watched(turn_id, seq)
        await deliver_quietly(tab, frames.turn_resume(turn_id, seq, text))

    async def _deliver(self, tab: Tab, visitor: str, turn_id: int, frame: frames.TurnFrame) -> None:
        watched = self.watched.get(tab)
        if watched is None or watched.turn_id != turn_id:
            return  # not following this turn
        if frame["type"] == "turn.ended":
            del self.watched[tab]
            self._ended[visitor] = max(self._ended.get(visitor, 0), turn_id)
        elif watched.seq < 0:
            return  # its resume is on its way, and covers this frame
        elif frame["type"] == "delta" or frame["type"] == "tool":
            seq = frame.get("seq")
            if seq is not None:
                if seq <= watched.seq:
                    return  # sent already
                if seq > watched.seq + 1:
                    # A message was lost (the layer drops past capacity): ask
                    # the owner for the text so far again.
                    remote = self.remote.get(visitor)
                    if remote is not None:
                        watched.seq = -1
                        self._post(remote.owner, self._watch(visitor, turn_id, [tab]))
                    return
                watched.seq = seq
        await deliver_quietly(tab, frame)


async def deliver_quietly(tab: Tab, frame: frames.Frame) -> None:
    # A tab that closed meanwhile misses the frame; the others must not.
    try:
        await tab.deliver(frame)
    except Exception:
        logger.debug("a %s frame was not delivered to a closing tab", frame["type"])

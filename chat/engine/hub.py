"""A visitor's tabs across server processes.

A turn runs in one process, its owner, which holds the provider request.
Every tab of the visitor (all show their conversation), connected to any
process, receives the turn's frames; a `stop` from any tab reaches the owner; a tab that connects while
the turn runs is resumed from the text so far (`turn.resume`), then follows
live; when the last tab leaves, the turn runs on for
KOOKEE_RESUME_GRACE_SECONDS, then stops.

Across processes this goes through the channel layer, with one channel per
process, not one per socket:

- The owner's channel is stored on the turn (`Turn.owner`), so a tab that
  connects elsewhere knows whom to ask (`hub.watch`). The owner answers with
  `hub.resume`, then sends that process the turn's frames (`hub.frames`),
  batched while a send is in flight: never a message per token, and no
  message at all when no other process watches.
- Each process with tabs of a visitor is in the visitor's group, so that a
  turn starting anywhere is announced to them (`hub.started`, once per turn), and
  a turn the sweeper closed for a dead process reaches them (`hub.ended`).
- A tab's frames are filtered by `seq`: a repeat is dropped, a gap (a
  message lost past the layer's capacity) asks the owner for a fresh resume.

One process on the in-memory layer runs the same code; its messages never
leave the process.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings

from chat.engine import frames, records
from chat.support import replies
from chat.vocabulary import StopReason

logger = logging.getLogger("kookee.hub")


class Tab(Protocol):
    """A socket of a conversation (the consumer)."""

    tab_id: str

    async def deliver(self, frame: dict[str, Any]) -> None: ...


@dataclass(eq=False)
class Broadcast:
    """A turn owned by this process: its frames so far, numbered, and who
    watches it from other processes."""

    turn_id: int
    visitor: str
    task: asyncio.Task | None = None
    seq: int = 0
    parts: list[str] = field(default_factory=list)
    # Process channel -> the ids of its tabs that watch this turn.
    remote: dict[str, set[str]] = field(default_factory=dict)
    stop_reason: str = ""
    stopped_by: str = ""
    stop_asked_at: float | None = None
    grace: asyncio.TimerHandle | None = None

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
class _Watched:
    """A tab's place in a turn: the last seq it was sent; -1 while it waits
    for its resume."""

    turn_id: int
    seq: int


@dataclass
class _Remote:
    """A turn owned by another process that tabs here watch."""

    turn_id: int
    owner: str


class Hub:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.channel = ""
        self.closing = False  # shutting down: no new turns (turns.start)
        self._listener: asyncio.Task | None = None
        self._starting: asyncio.Future | None = None
        self.tabs: dict[str, set[Tab]] = {}
        self.watched: dict[Tab, _Watched] = {}
        self.owned: dict[str, Broadcast] = {}
        self.remote: dict[str, _Remote] = {}
        self._outboxes: dict[str, _Outbox] = {}
        # The latest turn of each visitor with tabs here that has ended: an
        # announcement arriving after its turn's end (read meanwhile from the
        # database) must not start it again in the tabs. Turn ids only grow.
        self._ended: dict[str, int] = {}
        self._pings: dict[str, asyncio.Future] = {}
        self._background: set[asyncio.Task] = set()
        # Group discards under way, by visitor: a tab that comes back (a
        # reload) waits for its visitor's, or the discard could land after
        # its group_add and leave this process deaf to their turns.
        self._leaving: dict[str, asyncio.Task] = {}

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

    async def close(self) -> None:
        """Ends the listener with a message it understands (a receive
        cancelled on channels-redis leaves the channel stalled), after what
        is queued for other processes has gone."""
        await self.drain()
        if self._listener and not self._listener.done():
            await self.layer.send(self.channel, {"type": "hub.close"})
            await asyncio.wait({self._listener}, timeout=10)

    async def drain(self, timeout: float = 5) -> None:
        senders = [outbox.sender for outbox in self._outboxes.values() if outbox.sender and not outbox.sender.done()]
        if senders:
            await asyncio.wait(senders, timeout=timeout)

    async def check(self, timeout: float = 2.0) -> None:
        """Round-trips a message through this process's channel: raises
        unless the channel layer and this hub's listener answer in time."""
        channel = await asyncio.wait_for(self.start(), timeout)
        token = uuid.uuid4().hex
        answered = asyncio.get_running_loop().create_future()
        self._pings[token] = answered
        try:
            await asyncio.wait_for(self.layer.send(channel, {"type": "hub.ping", "token": token}), timeout)
            # Only the wait is cancelled on a timeout, never the receive.
            await asyncio.wait_for(answered, timeout)
        finally:
            self._pings.pop(token, None)

    async def _listen(self) -> None:
        handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "hub.started": self._on_started,
            "hub.watch": self._on_watch,
            "hub.unwatch": self._on_unwatch,
            "hub.stop": self._on_stop,
            "hub.resume": self._on_resume,
            "hub.frames": self._on_frames,
            "hub.ended": self._on_ended,
            "hub.gone": self._on_gone,
            "hub.tell": self._on_tell,
        }
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
            if kind == "hub.close":
                return
            if kind == "hub.ping":
                answered = self._pings.get(message.get("token"))
                if answered and not answered.done():
                    answered.set_result(None)
                continue
            handler = handlers.get(kind)
            if handler is None:
                logger.warning("unknown hub message %r", kind)
                continue
            try:
                await handler(message)
            except Exception:
                logger.exception("hub message %s failed", kind)

    def _post(self, channel: str, message: dict[str, Any]) -> None:
        """Queues a message for another process: sent in order, consecutive
        frames of a turn merged while a send is in flight."""
        outbox = self._outboxes.get(channel)
        if outbox is None:
            outbox = self._outboxes[channel] = _Outbox(self.layer, channel, self._outbox_idle)
        outbox.put(message)

    def _outbox_idle(self, outbox: _Outbox) -> None:
        # Processes come and go (every restart is a new channel): keep no
        # outbox that has nothing to send.
        if not outbox.queue and self._outboxes.get(outbox.channel) is outbox:
            del self._outboxes[outbox.channel]

    def _spawn(self, work: Awaitable[Any]) -> asyncio.Task:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _discard(self, visitor: str) -> None:
        try:
            await self.layer.group_discard(_group(visitor), self.channel)
        except Exception:
            # Harmless: announcements for a visitor with no tab here are ignored.
            logger.exception("could not leave a visitor's group")
        finally:
            if self._leaving.get(visitor) is asyncio.current_task():
                del self._leaving[visitor]

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
            await self.layer.group_add(_group(visitor), self.channel)
            if running is None:
                # Read before this process was in the visitor's group: a turn
                # that started elsewhere meanwhile was announced to nobody here.
                running = await database_sync_to_async(records.running_turn)(visitor)
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            await self._resume(tab, broadcast.turn_id, broadcast.seq, broadcast.text)
            return
        remote = self.remote.get(visitor)
        if remote is None and running is not None and running[1] != self.channel:
            remote = self.remote[visitor] = _Remote(*running)
        watched = self.watched.get(tab)
        if remote is not None and (watched is None or watched.turn_id != remote.turn_id):
            self.watched[tab] = _Watched(remote.turn_id, -1)
            self._post(remote.owner, self._watch(visitor, remote.turn_id, [tab]))

    async def leave(self, tab: Tab, visitor: str | None) -> None:
        """A tab closes. The last tab of the visitor to leave starts their
        running turn's grace period."""
        watched = self.watched.pop(tab, None)
        tabs = self.tabs.get(visitor) if visitor is not None else None
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
            self._post(
                remote.owner,
                {"type": "hub.unwatch", "turn_id": remote.turn_id, "process": self.channel, "tabs": [tab.tab_id]},
            )
        if not tabs:
            self.remote.pop(visitor, None)

    def running(self, visitor: str | None) -> bool:
        """Whether this process knows of a turn of the visitor running."""
        return visitor in self.owned or visitor in self.remote

    async def busy(self, visitor: str | None) -> bool:
        """Whether a turn of the visitor runs, for a new message: one run
        here, as this process knows; one run elsewhere, as the database says.
        What this process heard of another's turn lags its end by a round
        trip through the channel layer: a tab that connected as it ended
        reads it ended in its history, and may ask again before the owner's
        answer (`hub.gone`) arrives."""
        if visitor is None:
            return False
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

    async def stop(self, tab: Tab, visitor: str | None) -> asyncio.Task | None:
        """A tab's Stop, for the visitor's running turn wherever it runs.
        Returns the turn's task when it runs here."""
        if visitor is None:
            return None
        broadcast = self.owned.get(visitor)
        if broadcast is not None:
            broadcast.stop(StopReason.STOPPED, tab.tab_id)
            return broadcast.task
        remote = self.remote.get(visitor)
        if remote is None:
            running = await database_sync_to_async(records.running_turn)(visitor)
            if running is None or running[1] == self.channel:
                return None
            remote = _Remote(*running)
        self._post(remote.owner, {"type": "hub.stop", "turn_id": remote.turn_id, "tab": tab.tab_id})
        return None

    # --- turns owned here ----------------------------------------------------------------

    async def own(self, turn_id: int, visitor: str) -> Broadcast:
        """A turn this process starts: the visitor's tabs here follow it from
        the start, and the processes with other tabs of theirs are told."""
        await self.start()
        broadcast = self.owned[visitor] = Broadcast(turn_id, visitor)
        self.remote.pop(visitor, None)
        for tab in self.tabs.get(visitor, ()):
            self.watched[tab] = _Watched(turn_id, 0)
        self._spawn(
            self._announce(
                visitor,
                {"type": "hub.started", "visitor": visitor, "turn_id": turn_id, "owner": self.channel},
            )
        )
        return broadcast

    async def _announce(self, visitor: str, message: dict[str, Any]) -> None:
        try:
            await self.layer.group_send(_group(visitor), message)
        except Exception:
            logger.exception("could not announce %s", message["type"])

    async def publish(self, broadcast: Broadcast, frame: dict[str, Any]) -> None:
        """Sends a frame of an owned turn to every tab that watches it."""
        if frame["type"] == "turn.ended":
            # From now on a tab that comes in, here or elsewhere, reads the
            # turn's end from the database (saved before this frame) rather
            # than being resumed into a turn that has ended.
            self.disown(broadcast)
        elif frame["type"] in ("delta", "tool"):
            broadcast.seq += 1
            frame["seq"] = broadcast.seq
            if frame["type"] == "delta":
                broadcast.parts.append(frame["text"])
        for process in broadcast.remote:
            self._post(
                process,
                {
                    "type": "hub.frames",
                    "visitor": broadcast.visitor,
                    "turn_id": broadcast.turn_id,
                    "frames": [frame],
                },
            )
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

    def stop_all(self, reason: str) -> list[asyncio.Task]:
        """Stops every turn this process owns, and starts no more (shutdown)."""
        self.closing = True
        tasks = []
        for broadcast in list(self.owned.values()):
            broadcast.stop(reason)
            if broadcast.task:
                tasks.append(broadcast.task)
        return tasks

    # --- messages from other processes ---------------------------------------------------

    def _watch(self, visitor: str, turn_id: int, tabs: list[Tab]) -> dict[str, Any]:
        return {
            "type": "hub.watch",
            "visitor": visitor,
            "turn_id": turn_id,
            "process": self.channel,
            "tabs": [tab.tab_id for tab in tabs],
        }

    async def _on_started(self, message: dict[str, Any]) -> None:
        visitor, turn_id, owner = message["visitor"], message["turn_id"], message["owner"]
        tabs = list(self.tabs.get(visitor, ()))
        if owner == self.channel or not tabs or turn_id <= self._ended.get(visitor, 0):
            return
        self.remote[visitor] = _Remote(turn_id, owner)
        for tab in tabs:
            watched = self.watched.get(tab)
            if watched is not None and watched.turn_id == turn_id:
                continue  # it asked already, having found the turn stored
            self.watched[tab] = _Watched(turn_id, 0)
            await _quietly(tab, frames.turn_started(turn_id))
        self._post(owner, self._watch(visitor, turn_id, tabs))

    async def _on_watch(self, message: dict[str, Any]) -> None:
        broadcast = self.owned.get(message["visitor"])
        process = message["process"]
        if broadcast is None or broadcast.turn_id != message["turn_id"]:
            # Ended meanwhile: the watcher reads its end from the database.
            self._post(process, {**message, "type": "hub.gone"})
            return
        broadcast.remote.setdefault(process, set()).update(message["tabs"])
        if broadcast.grace:
            broadcast.grace.cancel()
            broadcast.grace = None
        self._post(
            process,
            {
                "type": "hub.resume",
                "visitor": broadcast.visitor,
                "turn_id": broadcast.turn_id,
                "seq": broadcast.seq,
                "text": broadcast.text,
                "tabs": message["tabs"],
            },
        )

    async def _on_unwatch(self, message: dict[str, Any]) -> None:
        for broadcast in self.owned.values():
            if broadcast.turn_id == message["turn_id"]:
                tabs = broadcast.remote.get(message["process"], set())
                tabs.difference_update(message["tabs"])
                if not tabs:
                    broadcast.remote.pop(message["process"], None)
                self._maybe_grace(broadcast)
                return

    async def _on_stop(self, message: dict[str, Any]) -> None:
        for broadcast in self.owned.values():
            if broadcast.turn_id == message["turn_id"]:
                broadcast.stop(StopReason.STOPPED, message.get("tab", ""))
                return

    async def _on_resume(self, message: dict[str, Any]) -> None:
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

    async def _on_frames(self, message: dict[str, Any]) -> None:
        visitor, turn_id = message["visitor"], message["turn_id"]
        for frame in message["frames"]:
            for tab in list(self.tabs.get(visitor, ())):
                await self._deliver(tab, visitor, turn_id, frame)
            if frame["type"] == "turn.ended":
                self._forget_remote(visitor, turn_id)

    async def _on_ended(self, message: dict[str, Any]) -> None:
        """A turn closed by the sweeper: its process died."""
        visitor, turn_id = message["visitor"], message["turn_id"]
        for tab in list(self.tabs.get(visitor, ())):
            await self._deliver(tab, visitor, turn_id, message["frame"])
        self._forget_remote(visitor, turn_id)

    async def _on_tell(self, message: dict[str, Any]) -> None:
        """A frame from Support (chat/support/replies.py) for every tab of a
        visitor here. A reply shown in a tab is seen: no email for it."""
        tabs = list(self.tabs.get(message["visitor"], ()))
        frame = message["frame"]
        for tab in tabs:
            await _quietly(tab, frame)
        if tabs and frame["type"] == "agent.message":
            await database_sync_to_async(replies.seen)([frame["id"]])

    async def _on_gone(self, message: dict[str, Any]) -> None:
        """The turn had ended when its owner heard of our tabs."""
        visitor, turn_id = message["visitor"], message["turn_id"]
        if not any(w.turn_id == turn_id for w in self.watched.values()):
            return
        frame = await database_sync_to_async(records.ended_frame)(turn_id)
        if frame is not None:
            await self._on_ended({"visitor": visitor, "turn_id": turn_id, "frame": frame})

    def _forget_remote(self, visitor: str, turn_id: int) -> None:
        remote = self.remote.get(visitor)
        if remote is not None and remote.turn_id == turn_id:
            del self.remote[visitor]

    # --- frames to one tab ---------------------------------------------------------------

    async def _resume(self, tab: Tab, turn_id: int, seq: int, text: str) -> None:
        watched = self.watched.get(tab)
        if watched is not None and watched.turn_id == turn_id and watched.seq >= seq:
            return  # it has seen all that already (it followed from the start)
        self.watched[tab] = _Watched(turn_id, seq)
        await _quietly(tab, {"type": "turn.resume", "turn_id": turn_id, "seq": seq, "text": text})

    async def _deliver(self, tab: Tab, visitor: str, turn_id: int, frame: dict[str, Any]) -> None:
        watched = self.watched.get(tab)
        if watched is None or watched.turn_id != turn_id:
            return  # not following this turn
        seq = frame.get("seq")
        if frame["type"] == "turn.ended":
            del self.watched[tab]
            self._ended[visitor] = max(self._ended.get(visitor, 0), turn_id)
        elif watched.seq < 0:
            return  # its resume is on its way, and covers this frame
        elif seq is not None:
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
        await _quietly(tab, frame)


# How long a message to another process waits for room in its channel.
FULL_WAIT_SECONDS = 10


class _Outbox:
    """Messages for one other process, sent one at a time, in order; frames
    of a turn that queue up behind a send in flight go as one message."""

    def __init__(self, layer: Any, channel: str, on_idle: Callable[[_Outbox], None]) -> None:
        self.layer = layer
        self.channel = channel
        self.on_idle = on_idle
        self.queue: list[dict[str, Any]] = []
        self.sender: asyncio.Task | None = None

    def put(self, message: dict[str, Any]) -> None:
        last = self.queue[-1] if self.queue else None
        if (
            last is not None
            and message["type"] == last["type"] == "hub.frames"
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

    async def _send_patiently(self, message: dict[str, Any]) -> None:
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


def _group(visitor: str) -> str:
    return replies.group(visitor)


async def _quietly(tab: Tab, frame: dict[str, Any]) -> None:
    # A tab that closed meanwhile misses the frame; the others must not.
    try:
        await tab.deliver(frame)
    except Exception:
        logger.debug("a %s frame was not delivered to a closing tab", frame["type"])


# One hub per process (per event loop: tests run one loop each).
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def current() -> Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = Hub()
    return hub


async def check(timeout: float = 2.0) -> None:
    """For /healthz: raises unless the channel layer answers in time."""
    await current().check(timeout)


async def announce_ended(visitor: str, turn_id: int, frame: dict[str, Any]) -> None:
    """Tells every process with tabs of the visitor that a turn ended
    without its owner (closed by the sweeper)."""
    await current()._announce(visitor, {"type": "hub.ended", "visitor": visitor, "turn_id": turn_id, "frame": frame})

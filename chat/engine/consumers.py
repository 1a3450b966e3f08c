"""The chat WebSocket: translates frames into turns and turns into frames.

A client frame of type `x` is handled by the method `frame_x`, as channels
dispatches its messages by type (an unknown type is answered with an
`error`); the frames it sends are built in chat/engine/frames.py.

Channels dispatches one frame at a time, so each turn runs in its own task
(chat/engine/turns.py); otherwise a `stop` frame would wait for the answer it is
meant to stop. The socket is one tab of its conversation (chat/engine/hub/),
which follows the conversation's turns wherever they run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.typing import ASGIReceiveCallable, ASGISendCallable
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from chat import errors
from chat.engine import (
    backpressure,
    capacity,
    client_frames,
    fastjson,
    frames,
    handshake,
    history,
    hub,
    lifecycle,
    records,
    turns,
)
from chat.engine.client_frames import BadFrame
from chat.support import feedback, handoffs
from chat.visitors import access, limits, verified
from chat.visitors.identity import Visitor
from chat.visitors.limits import FrameBudget, LimitReached
from chat.vocabulary import Code

if TYPE_CHECKING:
    from channels.consumer import _ChannelScope

logger = logging.getLogger("kookee.consumers")

# How long stop/disconnect wait for a cancelled turn to save and bill.
CANCEL_WAIT_SECONDS = 10
# Close codes the page acts on (sent after accept: a refused handshake looks
# like any network failure to a browser, code 1006, and the page must tell
# "try again" from "your key is no good").
CLOSE_REFUSED = 4401  # a widget token that is no good, or a revoked session: start afresh
CLOSE_IDLE = 4408  # nothing happened for a while: reconnect on the visitor's next move
CLOSE_TOO_MANY = 4429  # too many sockets for this visitor or network
# Too many frames. (Not 1008, "policy violation": daphne's WebSocket library
# lets an application close only with 1000 or 3000-4999.)
CLOSE_FLOOD = 4008
CLOSE_BUSY = 4503  # this process is saturated: try again shortly (chat/engine/capacity.py)

# A client frame's handler: the visitor, and the frame as it came.
Handler = Callable[[Visitor, dict[str, Any]], Awaitable[None]]
T = TypeVar("T")


class ChatConsumer(AsyncWebsocketConsumer):
    # No channel per socket: the process's hub listens for all of them, so a
    # socket costs the channel layer nothing while nobody else watches.
    channel_layer_alias = "no channel layer"
    visitor: Visitor | None = None
    conversation_id: int | None = None
    idle_timer: asyncio.TimerHandle | None = None
    joined: str | None = None  # the visitor whose turns this tab follows (chat/engine/hub/)
    language: str = settings.LANGUAGE_CODE  # what this tab's visitor reads (their browser's)
    replacing: int | None = None  # a full conversation, which the next message leaves for a new one
    host: str = ""  # the host:port this tab reached the app at: no action may call it

    async def __call__(self, scope: _ChannelScope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        self.tab_id = secrets.token_hex(4)
        # Every message to the socket goes through its outbox, which never
        # waits for the client and bounds what waits for it (chat/engine/backpressure.py).
        server = backpressure.server_socket(scope, send)
        self.outbox = backpressure.Outbox(
            send,
            settings.KOOKEE_SOCKET_BACKLOG_BYTES,
            server.unsent,
            abort=server.abort,
            on_overflow=self._on_overflow,
        )
        connection = asyncio.current_task()
        if connection is not None:
            lifecycle.connections.add(connection)
        try:
            await super().__call__(scope, receive, self.outbox.send)
        except asyncio.CancelledError:
            # Daphne cancels every connection as it shuts down, at the same
            # moment as the shutdown hook stops the turns: this tab hears how
            # its turn ended before it leaves the hub.
            await self._await_running_turn()
            raise
        finally:
            lifecycle.connections.discard(connection)
            self.outbox.forget()
            await self._forget_socket()

    def _on_overflow(self) -> None:
        """The client stopped reading and its socket is being closed (chat/
        backpressure.py): its slot, its place among the visitor's tabs and
        its timer go now, not when the server lets go of the connection."""
        self.leaving = asyncio.ensure_future(self._forget_socket())

    async def _await_running_turn(self) -> None:
        broadcast = hub.current().owned.get(self.joined) if self.joined else None
        task = broadcast.task if broadcast is not None else None
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=CANCEL_WAIT_SECONDS)

    async def deliver(self, frame: frames.Frame) -> None:
        """A frame of the conversation's turns, or from Support (from the hub)."""
        if frame["type"] == "error":
            # Why a turn failed, said in this tab's language: every tab of
            # the conversation hears it, whoever started the turn.
            frame = frames.error(frame["code"], errors.message(frame["code"], self.language), frame.get("turn_id"))
        await self.send_json(frame)
        if frame["type"] == "turn.ended":
            self._rearm_idle_timer()

    async def connect(self) -> None:
        self.language = handshake.language(self.scope)
        self.host = handshake.host(self.scope)
        if capacity.saturated():
            # Before any database work: a refusal must cost next to nothing.
            await self.accept()
            await self.close(code=CLOSE_BUSY, reason="Busy: try again shortly.")
            return
        try:
            identity = await database_sync_to_async(handshake.identify)(self.scope)
        except access.Refused:
            # A key we know and no longer accept: said after accepting, where
            # the page can read it (a refused handshake looks like any network
            # failure to a browser, and the widget must not drop its token
            # for a network failure).
            await self.accept()
            await self.close(code=CLOSE_REFUSED, reason="Start afresh.")
            return
        if identity is None:
            # No session cookie from GET /: the handshake is refused (HTTP
            # 403), as for a foreign origin.
            await self.close()
            return
        await self.accept()
        visitor, self.conversation_id, running = identity
        if not limits.sockets.open(visitor):
            await self.close(code=CLOSE_TOO_MANY, reason="Too many open chats.")
            return
        self.visitor = visitor
        self.frames = FrameBudget(
            settings.KOOKEE_FRAME_BURST,
            settings.KOOKEE_FRAMES_PER_SECOND,
            settings.KOOKEE_FRAME_BYTES_BURST,
            settings.KOOKEE_FRAME_BYTES_PER_SECOND,
        )
        self._rearm_idle_timer()
        # The visitor's turns, in whichever tab they started; one running
        # now is resumed in this tab.
        self.joined = visitor.hash
        await hub.current().join(self, visitor.hash, running)

    async def disconnect(self, code: int) -> None:
        self.outbox.forget()
        await self._forget_socket()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        visitor = self.visitor
        if visitor is None or self.outbox.closed:
            return  # refused, or closing: nothing it asks is answered
        self._rearm_idle_timer()
        if not self.frames.take(_size(text_data) if text_data is not None else len(bytes_data or b"")):
            # A flood's turn is stopped now, not when the close handshake ends.
            await self._stop_turn()
            await self._error(Code.FLOOD)
            await self.close(code=CLOSE_FLOOD)
            await self._forget_socket()
            return
        try:
            with translation.override(self.language):  # its error messages
                frame = client_frames.decode(text_data)
                handler = self._handler(frame["type"])
        except BadFrame as bad:
            await self._error(bad.code, bad.message)
            return
        await handler(visitor, frame)

    def _handler(self, frame_type: str) -> Handler:
        """The method for a client frame's type: `stop` -> `frame_stop`."""
        handler: Handler | None = getattr(self, "frame_" + frame_type.replace(".", "_"), None)
        if handler is None:
            raise client_frames.unknown(frame_type)
        return handler

    async def _parsed(self, parse: Callable[[dict[str, Any]], T], frame: dict[str, Any]) -> T | None:
        """The frame as `parse` (client_frames) takes it; None, the visitor
        told why, when it is malformed."""
        try:
            with translation.override(self.language):  # its error messages
                return parse(frame)
        except BadFrame as bad:
            await self._error(bad.code, bad.message)
            return None

    # --- one method per client frame type ----------------------------------------------

    async def frame_stop(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        await self._stop_turn()

    async def frame_forget(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        await self._stop_turn()
        await database_sync_to_async(access.forget_visitor)(visitor.hash)
        await self.close(code=CLOSE_REFUSED, reason="Started over.")

    async def frame_history(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        parsed = await self._parsed(client_frames.history, frame)
        if parsed is None:
            return
        before = parsed["before"]
        try:
            self.conversation_id, page = await database_sync_to_async(history.visitors_history)(
                visitor.hash, self.conversation_id, before
            )
        except access.Refused:
            await self.close(code=CLOSE_REFUSED, reason="Started over elsewhere.")
            return
        reply = fastjson.dumps(frames.history(page, before))
        # A few bytes ask for a page: the reply is what the frame costs.
        self.frames.charge(_size(reply))
        await self.send(text_data=reply)

    async def frame_feedback(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        parsed = await self._parsed(client_frames.feedback, frame)
        if parsed is None:
            return
        turn_id = parsed["turn_id"]
        try:
            await database_sync_to_async(feedback.save_feedback)(
                visitor.hash, turn_id, parsed["rating"], parsed["comment"]
            )
        except feedback.NotFound:
            await self._error(Code.NOT_FOUND, turn_id=turn_id)
            return
        await self.send_json(frames.feedback_saved(turn_id))

    async def frame_handoff(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        """The visitor's "Talk to a person" (or their email, added to it)."""
        parsed = await self._parsed(client_frames.handoff, frame)
        if parsed is None:
            return
        if visitor.preview:
            # Staff trying a draft of the assistant: Support's queue is for visitors.
            await self._error(Code.UNAVAILABLE, _("Not in a preview: a visitor's request goes to Support's queue."))
            return
        try:
            self.conversation_id, handoff = await handoffs.request_by_visitor(
                visitor, self.conversation_id, parsed["reason"], parsed["email"]
            )
        except access.Refused:
            await self.close(code=CLOSE_REFUSED, reason="Started over elsewhere.")
            return
        except LimitReached as limit:
            await self._error(limit.code, limit.message(self.language))
            return
        except Exception:
            logger.exception("could not take a request for a person")
            await self._error(Code.SERVER_ERROR)
            return
        await self.send_json(frames.handoff_saved(handoff))

    async def frame_identify(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        """The visitor proves who they are with a token their site signed
        (chat/visitors/verified.py). Their conversation becomes that
        person's; if it is another person's, the key starts over and the tab
        starts afresh, so that nobody sees the earlier person's."""
        token = await self._parsed(client_frames.identify, frame)
        if token is None:
            return
        try:
            person = verified.verify(token)
        except verified.BadIdentity as bad:
            logger.info("identify refused: %s", bad)  # the reason, never the token
            await self._error(Code.BAD_IDENTITY)
            return
        try:
            switched = await database_sync_to_async(access.identify)(visitor, self.conversation_id, person)
        except access.Refused:
            switched = True
        if switched:
            # As a `forget` does: the page takes a fresh key and proves the new person again.
            await self._stop_turn()
            await self.close(code=CLOSE_REFUSED, reason="Start afresh.")
            return
        self.visitor = dataclasses.replace(visitor, person=person)
        await self.send_json(frames.identified(person.id, person.name))

    async def frame_action_answer(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        """The visitor's yes or no to an action that would change something."""
        parsed = await self._parsed(client_frames.action_answer, frame)
        if parsed is None or self.joined is None:
            if parsed is not None:
                await self._error(Code.NOT_FOUND)
            return
        if not await hub.current().answer(self, self.joined, parsed["call_id"], parsed["approve"]):
            # Answered already (in another tab), timed out, or never asked.
            await self._error(Code.NOT_FOUND)

    async def frame_message(self, visitor: Visitor, frame: dict[str, Any]) -> None:
        text = await self._parsed(client_frames.message, frame)
        if text is None:
            return
        if await hub.current().busy(visitor.hash):
            await self._busy()
            return
        try:
            self.conversation_id = await turns.start(
                visitor, self.conversation_id, text, self.replacing, language=self.language, host=self.host
            )
            self.replacing = None
        except records.TurnAlreadyRunning:
            await self._busy()
            return
        except turns.ShuttingDown:
            await self._error(Code.UNAVAILABLE)
            return
        except access.Refused:
            await self.close(code=CLOSE_REFUSED, reason="Started over elsewhere.")
            return
        except LimitReached as limit:
            if limit.code == Code.CONVERSATION_FULL:
                # The next message begins a new conversation (created with it:
                # an empty one would be a conversation nobody had).
                self.replacing, self.conversation_id = self.conversation_id, None
            await self._error(limit.code, limit.message(self.language))
            return
        except Exception:
            logger.exception("could not start a turn")
            await self._error(Code.SERVER_ERROR)
            return

    async def _busy(self) -> None:
        await self._error(Code.BUSY)

    def _rearm_idle_timer(self) -> None:
        """An idle socket holds memory and a slot of the visitor's; close it
        after KOOKEE_IDLE_SOCKET_SECONDS without a frame or a running turn."""
        if self.idle_timer:
            self.idle_timer.cancel()
        if self.visitor is None or settings.KOOKEE_IDLE_SOCKET_SECONDS <= 0:
            return
        loop = asyncio.get_running_loop()
        self.idle_timer = loop.call_later(settings.KOOKEE_IDLE_SOCKET_SECONDS, self._on_idle)

    def _on_idle(self) -> None:
        if self._turn_running():
            return  # the turn's end rearms the timer
        self.idle_timer = None
        self.closing = asyncio.ensure_future(self.close(code=CLOSE_IDLE, reason="Idle."))

    async def _forget_socket(self) -> None:
        if self.idle_timer:
            self.idle_timer.cancel()
            self.idle_timer = None
        if self.visitor is not None:
            limits.sockets.close(self.visitor)
            self.visitor = None
        if self.joined is not None:
            # The last tab of a visitor to leave starts their turn's grace period.
            await hub.current().leave(self, self.joined)
            self.joined = None

    async def _stop_turn(self) -> None:
        """Stops the conversation's running turn, wherever it runs; when it
        runs here, waits until it is saved and billed."""
        if self.joined is None:
            return
        task = await hub.current().stop(self, self.joined)
        if task is None or task.done():
            return
        done, _pending = await asyncio.wait({task}, timeout=CANCEL_WAIT_SECONDS)
        if not done:
            logger.error("turn task did not end within %ss of its cancellation", CANCEL_WAIT_SECONDS)

    def _turn_running(self) -> bool:
        return self.joined is not None and hub.current().running(self.joined)

    async def send_json(self, frame: frames.Frame) -> None:
        await self.send(text_data=fastjson.dumps(frame))

    async def _error(self, code: str, message: str | Promise | None = None, turn_id: int | None = None) -> None:
        """An `error` frame: the code's message from the catalogue
        (chat/errors.py) unless a more precise one is given."""
        with translation.override(self.language):
            text = str(message) if message is not None else errors.message(code)
        await self.send_json(frames.error(code, text, turn_id=turn_id))


def _size(text: str) -> int:
    """Bytes, as they cross the wire."""
    return len(text.encode("utf-8", "surrogatepass"))

"""The chat WebSocket: translates frames into turns and turns into frames.

Channels dispatches one frame at a time, so each turn runs in its own task;
otherwise a `stop` frame would wait for the answer it is meant to stop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from chat import embed, provider, services, turns
from chat.limits import FrameBudget, LimitReached
from chat.models import Conversation
from chat.rounds import storable
from chat.turns import run_turn

logger = logging.getLogger("kookee.consumers")

# How long stop/disconnect wait for a cancelled turn to save and bill.
CANCEL_WAIT_SECONDS = 10
CLOSE_NO_SESSION = 4401
CLOSE_FLOOD = 1008  # policy violation


class ChatConsumer(AsyncWebsocketConsumer):
    conversation_id: int | None = None
    turn_task: asyncio.Task | None = None

    async def __call__(self, scope, receive, send) -> None:
        turns.connections.add(asyncio.current_task())
        try:
            await super().__call__(scope, receive, send)
        finally:
            turns.connections.discard(asyncio.current_task())
            # The server is shutting down (daphne cancels every connection on
            # SIGTERM): stop, save and bill the running turn before it exits.
            await self._cancel_turn()

    async def connect(self) -> None:
        conversation = await database_sync_to_async(_conversation)(self.scope)
        if conversation is None:
            # No session cookie from GET / (nor a widget token): refuse, as
            # for a foreign origin.
            await self.close(code=CLOSE_NO_SESSION)
            return
        self.conversation_id = conversation.id
        self.frames = FrameBudget(settings.KOOKEE_FRAME_BURST, settings.KOOKEE_FRAMES_PER_SECOND)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self._cancel_turn()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.frames.take():
            await self._cancel_turn()  # now, not when the close handshake ends
            await self._error("flood", "Too many frames; the connection is closed. Reload to continue.")
            await self.close(code=CLOSE_FLOOD)
            return
        frame, problem = _parse(text_data, bytes_data)
        if problem:
            await self._error(*problem)
        elif frame["type"] == "stop":
            await self._cancel_turn()
        elif frame["type"] == "history":
            turns = await database_sync_to_async(services.history_of)(self.conversation_id)
            await self.send_json({"type": "history", "turns": turns})
        elif self._turn_running():
            await self._error("busy", "A turn is already running; stop it or wait for it to end.")
        else:
            await self._start_turn(frame["text"])

    async def _start_turn(self, text: str) -> None:
        try:
            turn_id, messages = await database_sync_to_async(services.start_turn)(
                self.conversation_id, text, provider.model_name(), _client_address(self.scope)
            )
        except LimitReached as limit:
            if limit.code == "conversation_full":
                new = await database_sync_to_async(services.start_new_conversation)(self.conversation_id)
                self.conversation_id = new.id
            await self._error(limit.code, limit.message)
            return
        except Exception:
            logger.exception("could not start a turn")
            await self._error("server_error", "Something went wrong on our side. Please try again.")
            return
        # The task sends turn.started, inside the try whose finally ends it.
        self.turn_task = asyncio.create_task(run_turn(turn_id, messages, self.send_json))
        # Let the task enter its try/finally before any stop can cancel it: a
        # task cancelled before its first step never runs its finally.
        await asyncio.sleep(0)

    async def _cancel_turn(self) -> None:
        task = self.turn_task
        if task is None or task.done():
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CANCEL_WAIT_SECONDS)
        if not done:
            logger.error("turn task did not end within %ss of its cancellation", CANCEL_WAIT_SECONDS)

    def _turn_running(self) -> bool:
        return self.turn_task is not None and not self.turn_task.done()

    async def send_json(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame))

    async def _error(self, code: str, message: str) -> None:
        await self.send_json({"type": "error", "code": code, "message": message})


def _conversation(scope: dict[str, Any]) -> Conversation | None:
    """The visitor's conversation: the widget's token when one is presented
    (the embed page), else the session cookie (the chat page)."""
    tokens = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    if tokens:
        key = embed.visitor_key(tokens[0])
        return services.conversation_for_visitor(key) if key else None
    return services.conversation_for_session(scope["session"])


def _client_address(scope: dict[str, Any]) -> str | None:
    # Behind a proxy, run daphne with --proxy-headers so this is the visitor's.
    client = scope.get("client")
    return client[0] if client else None


def _parse(text_data: str | None, bytes_data: bytes | None) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """Validates a client frame; returns it, or an error code and message."""
    if text_data is None:
        return {}, ("bad_frame", "Frames must be JSON text, not binary.")
    try:
        frame = json.loads(text_data)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return {}, ("bad_json", "The frame is not valid JSON.")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return {}, ("bad_frame", 'A frame is a JSON object with a "type".')
    if frame["type"] in ("stop", "history"):
        return frame, None
    if frame["type"] != "message":
        return {}, ("unknown_type", f"Unknown frame type {frame['type'][:40]!r}.")
    text = frame.get("text")
    if not isinstance(text, str) or not text.strip():
        return {}, ("bad_text", '"text" must be a non-empty string.')
    if len(text) > settings.KOOKEE_MAX_MESSAGE_CHARS:
        return {}, ("too_long", f"Messages are limited to {settings.KOOKEE_MAX_MESSAGE_CHARS} characters.")
    return {**frame, "text": storable(text)}, None

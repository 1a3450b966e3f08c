"""One turn, run as its own task: stream the rounds to the visitor, then, in
a `finally` that survives cancellation, save what they saw and bill once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

from chat import provider, rounds, services
from chat.rounds import Outcome, Round, RoundLoop
from chat.tools import TOOLS

logger = logging.getLogger("kookee.turns")

Send = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")

ERROR_MESSAGES = {
    "provider_error": "The assistant's provider failed. Please try again.",
    "bad_stream": "The assistant's provider sent something unreadable. Please try again.",
    "incomplete_stream": "The answer was cut off by the provider. Please try again.",
    "round_limit": "The assistant took too many steps to answer. Please try rephrasing.",
    "server_error": "Something went wrong on our side. Please try again.",
}


class _Recorder:
    """The round loop's sink: frames to the visitor, rounds to the database."""

    def __init__(self, turn_id: int, send: Send) -> None:
        self.turn_id = turn_id
        self.send = send

    async def delta(self, text: str) -> None:
        await self.send({"type": "delta", "turn_id": self.turn_id, "text": text})

    async def tool(self, name: str, status: str) -> None:
        await self.send({"type": "tool", "turn_id": self.turn_id, "name": name, "status": status})

    async def round_ended(self, rnd: Round) -> None:
        await database_sync_to_async(services.record_generation)(self.turn_id, rnd)


async def run_turn(turn_id: int, messages: list[dict[str, Any]], send: Send) -> None:
    """Runs a started turn to its end. Cancelling the task stops it."""
    loop = RoundLoop(provider.open_stream, TOOLS, _Recorder(turn_id, send), settings.KOOKEE_MAX_ROUNDS)
    outcome = Outcome(rounds.FAILED, "server_error")
    try:
        outcome = await loop.run(messages)
    except asyncio.CancelledError:
        outcome = Outcome(rounds.INTERRUPTED)
        raise
    except Exception:
        logger.exception("turn=%s failed", turn_id)
    finally:
        await _survive_cancel(_end_turn(turn_id, loop, outcome, send))


async def _end_turn(turn_id: int, loop: RoundLoop, outcome: Outcome, send: Send) -> None:
    usage = await database_sync_to_async(services.finish_turn)(
        turn_id,
        status=outcome.status,
        text=loop.text,
        error=outcome.detail or outcome.error,
        rounds=loop.rounds,
        model=provider.model_name(),
    )
    logger.info(
        "turn=%s status=%s generations=%s error=%s",
        turn_id,
        outcome.status,
        len(loop.rounds),
        outcome.error or "-",
    )
    if outcome.error:
        message = ERROR_MESSAGES.get(outcome.error, ERROR_MESSAGES["server_error"])
        await _send_quietly(send, {"type": "error", "code": outcome.error, "message": message})
    await _send_quietly(
        send,
        {
            "type": "turn.ended",
            "turn_id": turn_id,
            "status": outcome.status,
            "generations": len(loop.rounds),
            "usage": usage,
        },
    )


async def _send_quietly(send: Send, frame: dict[str, Any]) -> None:
    # After a disconnect there is nobody to tell; the turn is saved anyway.
    try:
        await send(frame)
    except Exception:
        logger.debug("frame not delivered: %s", frame.get("type"))


async def _survive_cancel(work: Awaitable[T]) -> T:
    """Awaits work to its end even if the task is cancelled (again) meanwhile,
    then lets the cancellation continue."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result

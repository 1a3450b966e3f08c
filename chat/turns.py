"""One turn, run as its own task: stream the rounds to the visitor, then, in
a `finally` that survives cancellation, save what they saw and bill once.

While turns run, they are checkpointed together (text so far and a usage
estimate) every KOOKEE_CHECKPOINT_SECONDS, so that if the process dies and no
`finally` runs, the sweeper can still close and bill them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

from chat import provider, rounds, services
from chat.rounds import Outcome, Round, RoundLoop
from chat.sources import search_results, used_articles
from chat.tools import TOOLS

logger = logging.getLogger("kookee.turns")

Send = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")

ERROR_MESSAGES = {
    "provider_unreachable": "The assistant can't be reached right now. Please try again in a moment.",
    "provider_timeout": "The assistant took too long to start answering. Please try again.",
    "provider_stalled": "The assistant stopped responding mid-answer. Please try again.",
    "provider_rate_limited": "The assistant is busy right now. Please try again in a minute.",
    "provider_unavailable": "The assistant is unavailable right now. Please try again in a moment.",
    "provider_rejected": "The assistant could not take this request. Please try again later.",
    "provider_error": "The assistant ran into an error. Please try again.",
    "bad_stream": "The assistant sent something unreadable. Please try again.",
    "incomplete_stream": "The answer was cut off. Please try again.",
    "round_limit": "The assistant took too many steps to answer. Please try rephrasing.",
    "server_error": "Something went wrong on our side. Please try again.",
}


class VisitorGone(Exception):
    """A frame could not be sent: the socket is closed."""


class _Turn:
    """The round loop's sink: frames to the visitor, rounds to the database."""

    def __init__(self, turn_id: int, send: Send) -> None:
        self.turn_id = turn_id
        self._send = send
        self.started_sent = False
        self.loop = RoundLoop(provider.open_stream, TOOLS, self, settings.KOOKEE_MAX_ROUNDS)

    async def send(self, frame: dict[str, Any]) -> None:
        try:
            await self._send(frame)
        except Exception as exc:
            raise VisitorGone from exc

    async def delta(self, text: str) -> None:
        await self.send({"type": "delta", "turn_id": self.turn_id, "text": text})

    async def tool(self, name: str, status: str) -> None:
        await self.send({"type": "tool", "turn_id": self.turn_id, "name": name, "status": status})

    async def round_ended(self, rnd: Round) -> None:
        await database_sync_to_async(services.record_generation)(self.turn_id, rnd)

    def checkpoint(self) -> services.Checkpoint:
        """The text so far and the current round's usage estimate."""
        current = self.loop.rounds[-1] if self.loop.rounds else None
        usage = current.usage if current else None
        return services.Checkpoint(
            turn_id=self.turn_id,
            text=self.loop.text,
            round_number=current.number if current else 0,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
        )


# The turns running in this process: checkpointed together, stopped together
# (chat/lifecycle.py).
live: dict[asyncio.Task, _Turn] = {}
_checkpointers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task] = weakref.WeakKeyDictionary()


def _start_checkpointer() -> None:
    loop = asyncio.get_running_loop()
    task = _checkpointers.get(loop)
    if task is None or task.done():
        _checkpointers[loop] = loop.create_task(_checkpoint_forever())


async def _checkpoint_forever() -> None:
    """Every few seconds, saves all running turns in one transaction: one
    write per second for the process, not one per turn, never one per token."""
    while True:
        await asyncio.sleep(settings.KOOKEE_CHECKPOINT_SECONDS)
        checkpoints = [turn.checkpoint() for task, turn in live.items() if not task.done()]
        if not checkpoints:
            continue
        try:
            await database_sync_to_async(services.checkpoint_turns)(checkpoints)
        except Exception:
            logger.exception("checkpointing %s turn(s) failed", len(checkpoints))


async def run_turn(turn_id: int, messages: list[dict[str, Any]], send: Send) -> None:
    """Runs a created turn to its end. Cancelling the task stops it."""
    turn = _Turn(turn_id, send)
    outcome = Outcome(rounds.FAILED, "server_error")
    live[asyncio.current_task()] = turn
    _start_checkpointer()
    try:
        turn.started_sent = True
        await turn.send({"type": "turn.started", "turn_id": turn_id})
        outcome = await turn.loop.run(messages)
    except asyncio.CancelledError:
        outcome = Outcome(rounds.INTERRUPTED)
        raise
    except VisitorGone:
        outcome = Outcome(rounds.INTERRUPTED)
    except Exception:
        logger.exception("turn=%s failed", turn_id)
    finally:
        try:
            await _survive_cancel(_end_turn(turn, outcome))
        finally:
            del live[asyncio.current_task()]


async def _end_turn(turn: _Turn, outcome: Outcome) -> None:
    loop = turn.loop
    try:
        usage = await database_sync_to_async(services.finish_turn)(
            turn.turn_id,
            status=outcome.status,
            text=loop.text,
            error=outcome.detail or outcome.error,
            rounds=loop.rounds,
            model=provider.model_name(),
        )
    except Exception:
        # The database failed us. The turn stays "streaming" with its last
        # checkpoint, and the sweeper closes and bills it; the visitor is told.
        logger.exception("turn=%s could not be saved", turn.turn_id)
        outcome = Outcome(rounds.FAILED, "server_error")
        usages = [rnd.usage for rnd in loop.rounds]
        usage = {
            "input_tokens": sum(u.input_tokens for u in usages),
            "output_tokens": sum(u.output_tokens for u in usages),
            "estimated": True,
        }
    logger.info(
        "turn=%s status=%s generations=%s error=%s",
        turn.turn_id,
        outcome.status,
        len(loop.rounds),
        outcome.error or "-",
    )
    if not turn.started_sent:
        await _send_quietly(turn, {"type": "turn.started", "turn_id": turn.turn_id})
    if outcome.error:
        message = ERROR_MESSAGES.get(outcome.error, ERROR_MESSAGES["server_error"])
        error = {"type": "error", "turn_id": turn.turn_id, "code": outcome.error, "message": message}
        await _send_quietly(turn, error)
    ended = {
        "type": "turn.ended",
        "turn_id": turn.turn_id,
        "status": outcome.status,
        "generations": len(loop.rounds),
        "usage": usage,
        # Beyond the contract: the articles the answer used, for the visitor.
        "sources": used_articles(loop.text, search_results(call for rnd in loop.rounds for call in rnd.tool_calls)),
    }
    await _send_quietly(turn, ended)


async def _send_quietly(turn: _Turn, frame: dict[str, Any]) -> None:
    # After a disconnect there is nobody to tell; the turn is saved anyway.
    try:
        await turn.send(frame)
    except VisitorGone:
        logger.debug("turn=%s: %s not delivered", turn.turn_id, frame["type"])


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

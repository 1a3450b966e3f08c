"""One turn, run as its own task: stream the rounds to every tab of the
conversation (chat/engine/hub/), then, in a `finally` that survives cancellation,
save what they saw and bill once. While it runs, it is checkpointed
(chat/engine/checkpointer.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from django.conf import settings

from billing import calibration
from chat import errors
from chat.actions import catalog, runner
from chat.actions.catalog import Offer
from chat.engine import checkpointer, db_lane, frames, hub, provider, records, to_person, tools
from chat.engine.hub import Broadcast
from chat.engine.rounds import EndTurn, Outcome, Round, RoundLoop
from chat.engine.tools import TOOLS, TurnContext
from chat.engine.usage import Ratios, spec_chars
from chat.ops import metrics, tracing
from chat.visitors.identity import Visitor
from chat.vocabulary import PROVIDER_FAULTS, Code, Status, StopReason

logger = logging.getLogger("kookee.turns")


# The tool definitions' part of every prompt, for the budgets' estimates.
TOOL_CHARS = spec_chars(TOOLS)

T = TypeVar("T")


class _RoundLoopSink:
    """The round loop's sink for one turn: frames to the conversation's tabs,
    rounds to the database, checkpoints (chat/engine/checkpointer.py)."""

    def __init__(
        self, broadcast: Broadcast, record: records.TurnRecord, context: TurnContext, offers: list[Offer]
    ) -> None:
        self.turn_id = broadcast.turn_id
        self.broadcast = broadcast
        self.record = record  # what the database holds of it (its hold in the daily budgets, its rounds)
        # Looked up once: every frame goes through it.
        self.hub = hub.current()
        self.trace = tracing.start_turn(self.turn_id)
        self.started_sent = False
        self.asked_at = asyncio.get_running_loop().time()
        self.first_delta_seen = False
        self.model = provider.model_name()
        if context.actions is not None:
            context.actions.ask = self.ask
        self.actions = context.actions
        # What the visitor reads while an action runs: its title.
        self.titles = {offer.name: offer.title for offer in offers}
        self.loop = RoundLoop(
            provider.open_stream,
            tools.for_turn(TOOLS, context, offers),
            self,
            settings.KOOKEE_MAX_ROUNDS,
            ratios=lambda: Ratios(*calibration.ratios(self.model)),
            window=settings.KOOKEE_DELTA_WINDOW_MS / 1000,
        )

    async def send(self, frame: frames.TurnFrame) -> None:
        await self.hub.publish(self.broadcast, frame)

    async def delta(self, text: str) -> None:
        if not self.first_delta_seen:
            self.first_delta_seen = True
            metrics.first_delta(asyncio.get_running_loop().time() - self.asked_at)
        await self.send(frames.delta(self.turn_id, text))

    async def tool(self, name: str, status: str) -> None:
        if self.trace:
            self.trace.tool(name, status)
        await self.send(frames.tool(self.turn_id, name, status, self.titles.get(name, "")))

    async def ask(self, call_id: str, action: str, title: str, arguments: dict[str, Any]) -> bool:
        """Asks every tab of the visitor whether an action may run, and waits
        for the first answer: no answer in KOOKEE_ACTION_CONFIRM_SECONDS is
        a no; a Stop cancels the wait (and the turn)."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        frame = frames.action_confirm(self.turn_id, call_id, action, title, arguments)
        self.broadcast.asking[call_id] = (answer, frame)
        try:
            await self.send(frame)
            try:
                async with asyncio.timeout(settings.KOOKEE_ACTION_CONFIRM_SECONDS):
                    approved = await answer
            except TimeoutError:
                return False
        finally:
            del self.broadcast.asking[call_id]
        # Every tab closes its card as answered, whichever tab (or device) answered.
        await self.send(frames.action_answered(self.turn_id, call_id, approved))
        return approved

    async def round_ended(self, rnd: Round, next_prompt_tokens: int) -> None:
        # The next round's worst case joins what the turn holds in the daily
        # budgets before it is asked for; a budget that cannot hold it ends
        # the turn here.
        spent = sum(r.usage.input_tokens + r.usage.output_tokens for r in self.loop.rounds)
        hold = spent + next_prompt_tokens + settings.KOOKEE_MAX_OUTPUT_TOKENS
        refused = await db_lane.run(db_lane.SOON, records.end_round, self.record, rnd, hold)
        if refused:
            raise EndTurn(refused)

    def checkpoint(self) -> records.Checkpoint:
        """The text so far and the current round's usage estimate."""
        current = self.loop.rounds[-1] if self.loop.rounds else None
        usage = current.usage if current else None
        return records.Checkpoint(
            turn_id=self.turn_id,
            text=self.loop.text,
            round_number=current.number if current else 0,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
        )


class ShuttingDown(Exception):
    """The process is shutting down: the turn goes to another process (the
    page reconnects to one)."""


async def start(
    visitor: Visitor,
    conversation_id: int | None,
    text: str,
    replacing: int | None = None,
    language: str = "",
    host: str = "",
) -> int:
    """Starts a turn of the visitor's conversation (created at their first
    message) in this process: stores it, and runs it in its own task, which
    every tab of the visitor follows. Returns the conversation's id.
    `replacing`: a full conversation that this turn begins a new one after.
    `language`: the asking tab's (its browser's), for the tools; `host`:
    the host:port it reached this app at, which no action may call.
    When a person has the conversation, the text goes to them instead
    (chat/engine/to_person.py), and no turn starts.

    Raises records.TurnAlreadyRunning, access.Refused, LimitReached or
    ShuttingDown, starting nothing.
    """
    the_hub = hub.current()
    if the_hub.closing:
        raise ShuttingDown
    owner = await the_hub.start()
    # Ahead of other turns' bookkeeping: the first character waits for it.
    offers, started = await db_lane.run(
        db_lane.URGENT,
        _offer_and_start,
        visitor,
        conversation_id,
        text,
        provider.model_name(),
        owner,
        replacing,
        provider.is_offline(),
    )
    if isinstance(started, to_person.ToPerson):
        await to_person.deliver(started)
        return started.conversation_id
    broadcast = await the_hub.own(started.turn_id, visitor.hash)
    actions = runner.Caller(visitor.person, None, catalog.own_hosts(host)) if offers else None
    broadcast.task = asyncio.create_task(
        run_turn(broadcast, started.messages, started.record, language, actions, offers)
    )
    # Let the task enter its try/finally before any stop can cancel it: a
    # task cancelled before its first step never runs its finally.
    await asyncio.sleep(0)
    if the_hub.closing:
        # The shutdown began while the turn was being stored: it missed it.
        broadcast.stop(StopReason.SHUTDOWN)
    return started.conversation_id


def _offer_and_start(
    visitor: Visitor,
    conversation_id: int | None,
    text: str,
    model: str,
    owner: str,
    replacing: int | None,
    offline: bool,
) -> tuple[list[Offer], records.Started | to_person.ToPerson]:
    """The actions the turn offers, then the turn stored (records.start_turn),
    in one hand-off to the database thread. The offline model calls no
    actions: offering them would only lengthen its prompt."""
    offers = [] if offline else catalog.offered(visitor.person)
    tool_chars = TOOL_CHARS + tools.action_chars(offers)
    return offers, records.start_turn(visitor, conversation_id, text, model, owner, replacing, tool_chars)


async def run_turn(
    broadcast: Broadcast,
    messages: list[dict[str, Any]],
    record: records.TurnRecord,
    language: str = "",
    actions: runner.Caller | None = None,
    offers: list[Offer] | None = None,
) -> None:
    """Runs a created turn to its end, in a task of its own. Stopping its
    broadcast stops it. `language`: the asking tab's, for the tools;
    `actions`: who the `offers` (actions) act for."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("a turn runs in a task of its own")
    context = TurnContext(broadcast.turn_id, language, actions, preview=record.preview)
    turn = _RoundLoopSink(broadcast, record, context, offers or [])
    outcome = Outcome(Status.FAILED, Code.SERVER_ERROR)
    checkpointer.live[task] = turn
    checkpointer.start()
    try:
        turn.started_sent = True
        await turn.send(frames.turn_started(turn.turn_id))
        outcome = await turn.loop.run(messages)
    except asyncio.CancelledError:
        # The round loop has closed the provider request by now.
        outcome = Outcome(Status.INTERRUPTED)
        if broadcast.stop_asked_at is not None:
            metrics.stop_latency(asyncio.get_running_loop().time() - broadcast.stop_asked_at)
        raise
    except Exception:
        logger.exception("turn=%s failed", turn.turn_id)
    finally:
        try:
            await _survive_cancel(_end_turn(turn, outcome))
        finally:
            del checkpointer.live[task]
            hub.current().disown(broadcast)


async def _end_turn(turn: _RoundLoopSink, outcome: Outcome) -> None:
    loop = turn.loop
    for rnd in loop.rounds:
        sample = rnd.sample()
        if sample is not None:
            calibration.observe(turn.model, *sample)
    # A turn cancelled by nobody's Stop was cut short by the process ending.
    reason = (turn.broadcast.stop_reason or StopReason.SHUTDOWN) if outcome.status == Status.INTERRUPTED else ""
    try:
        usage = await db_lane.run(
            db_lane.LATER,
            records.finish_turn,
            turn.record,
            status=outcome.status,
            text=loop.text,
            error=outcome.detail or outcome.error,
            rounds=loop.rounds,
            model=turn.model,
            stop_reason=reason,
            stopped_by=turn.broadcast.stopped_by,
            action_calls=turn.actions.calls if turn.actions else (),
        )
    except Exception:
        # The database failed us. The turn stays "streaming" with its last
        # checkpoint, and the sweeper closes and bills it; the visitor is told.
        logger.exception("turn=%s could not be saved", turn.turn_id)
        outcome = Outcome(Status.FAILED, Code.SERVER_ERROR)
        usages = [rnd.usage for rnd in loop.rounds]
        usage = frames.usage(sum(u.input_tokens for u in usages), sum(u.output_tokens for u in usages), estimated=True)
    logger.info(
        "turn=%s status=%s reason=%s generations=%s error=%s",
        turn.turn_id,
        outcome.status,
        reason or "-",
        len(loop.rounds),
        outcome.error or "-",
    )
    _count(turn, outcome)
    if turn.trace:
        turn.trace.end(
            status=outcome.status,
            error=outcome.error,
            stop_reason=reason,
            rounds=loop.rounds,
            model=turn.model,
            provider_name=provider.provider_name(),
        )
    if not turn.started_sent:
        await _send_quietly(turn, frames.turn_started(turn.turn_id))
    if outcome.error:
        # In the site's language here; each tab says it in its visitor's (consumers.deliver).
        message = errors.message(outcome.error)
        await _send_quietly(turn, frames.error(outcome.error, message, turn_id=turn.turn_id))
    ended = frames.turn_ended(
        turn.turn_id,
        outcome.status,
        len(loop.rounds),
        usage,
        loop.text,
        [call for rnd in loop.rounds for call in rnd.tool_calls],
        reason=reason,
    )
    await _send_quietly(turn, ended)


def _count(turn: _RoundLoopSink, outcome: Outcome) -> None:
    """The turn's figures for /metrics."""
    metrics.turn_ended(outcome.status)
    model = turn.model
    last = turn.loop.rounds[-1] if turn.loop.rounds else None
    provider_fault = outcome.error if outcome.error in PROVIDER_FAULTS else None
    if provider_fault:
        metrics.provider_error(provider_fault)
    for rnd in turn.loop.rounds:
        ended = rnd.ended_at or rnd.started_at
        usage = rnd.usage
        metrics.model_call(
            model,
            usage.input_tokens,
            usage.output_tokens,
            (ended - rnd.started_at).total_seconds(),
            (rnd.first_delta_at - rnd.started_at).total_seconds() if rnd.first_delta_at else None,
            provider_fault if rnd is last else None,
        )


async def _send_quietly(turn: _RoundLoopSink, frame: frames.TurnFrame) -> None:
    # The turn is saved whatever happens to its frames.
    try:
        await turn.send(frame)
    except Exception:
        logger.exception("turn=%s: %s not delivered", turn.turn_id, frame["type"])


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

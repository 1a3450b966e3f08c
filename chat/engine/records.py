"""A turn's records: started (conversation, budget hold), its rounds as
generations, checkpoints while it runs, and its end (text, status, one
ledger entry). The sweeper's end for a turn a lost process left is
chat/engine/sweeper.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Prefetch
from django.utils import timezone

from billing import calibration
from billing.models import LedgerEntry
from billing.services import bill_once
from chat.actions import catalog
from chat.actions.catalog import CallRecord
from chat.assistant import versions
from chat.engine import frames, prompt, to_person
from chat.engine.rounds import Round
from chat.engine.to_person import ToPerson
from chat.engine.usage import Ratios, prompt_tokens
from chat.models import Generation, ToolCall, Turn
from chat.support import searches
from chat.text import storable
from chat.visitors import access, limits
from chat.visitors.identity import Visitor
from chat.visitors.limits import LimitReached, check_turn_allowed

logger = logging.getLogger("kookee.generations")


ACTIVITY_RESOLUTION = timedelta(minutes=1)


class TurnAlreadyRunning(Exception):
    """The conversation has a turn running already (on any process)."""


@dataclass
class TurnRecord:
    """What the database holds of a running turn, kept by its process so
    that its tool rounds and its end need not read it back. Changed only by
    this module's functions, on the database thread, after their
    transactions commit: a turn's jobs run there one after another, so each
    sees what the one before stored (even when the turn was cancelled while
    awaiting it)."""

    turn_id: int
    started_at: datetime  # the turn is priced as of its start
    budget: dict[str, Any]  # what it holds in the daily budgets (Turn.budget)
    recorded: set[int] = field(default_factory=set)  # the rounds stored as generations
    preview: bool = False  # staff previewing a draft of the assistant

    @classmethod
    def load(cls, turn_id: int) -> TurnRecord:
        """A turn's record as stored (for a turn that another function started)."""
        turn = Turn.objects.only("started_at", "budget").get(pk=turn_id)
        rounds = set(Generation.objects.filter(turn_id=turn_id).values_list("round", flat=True))
        return cls(turn_id, turn.started_at, turn.budget, rounds)


class Started(NamedTuple):
    conversation_id: int
    turn_id: int
    messages: list[dict[str, Any]]  # for the first round
    record: TurnRecord


def start_turn(
    visitor: Visitor,
    conversation_id: int | None,
    user_text: str,
    model: str,
    owner: str = "",
    replacing: int | None = None,
    tool_chars: int = 0,
) -> Started | ToPerson:
    """Creates the turn (and, at the visitor's first message, their
    conversation). `owner` is the channel of the process
    that runs it. `replacing`: a full conversation, which the turn starts
    a new one after (see access.conversation_for). The turn holds its first
    round's worst case in the daily budgets (its prompt, estimated with
    the tool definitions' `tool_chars`, and the most it may write).

    When a person has the conversation (the visitor asked for one, and
    Support claimed it), the text is a message to them instead, starting no
    turn (chat/engine/to_person.py).

    Raises, creating nothing: TurnAlreadyRunning when a turn of the conversation runs
    already, in any process; LimitReached when the visitor is over a limit;
    access.Refused when their key no longer reaches the conversation.
    """
    # The model's learnt ratios, for estimating what the provider will not
    # report (a query a minute at most, outside the turn's transaction).
    calibration.load(model)
    # The system prompt names the help center's articles: read (and the
    # search index rebuilt, when due) before the turn's transaction, which
    # locks the visitor's budgets.
    # A preview speaks as the draft would; a visitor meets the live version.
    shape = versions.previewed() if visitor.preview else versions.live()
    system = prompt.system_prompt(shape.guidance)
    try:
        return _start_turn(visitor, conversation_id, user_text, model, owner, replacing, tool_chars, system)
    except IntegrityError:
        # The database holds one streaming turn per conversation: checking
        # first would cost every turn a query, to tell what the insert tells.
        if Turn.objects.filter(conversation__visitor_hash=visitor.hash, status=Turn.Status.STREAMING).exists():
            raise TurnAlreadyRunning from None
        raise


@transaction.atomic
def _start_turn(
    visitor: Visitor,
    conversation_id: int | None,
    user_text: str,
    model: str,
    owner: str,
    replacing: int | None,
    tool_chars: int,
    system: str,
) -> Started | ToPerson:
    conversation = access.conversation_for(visitor, conversation_id, replacing)
    handed = to_person.take(visitor, conversation, conversation_id, user_text)
    if handed is not None:
        return handed
    check_turn_allowed(visitor, conversation.id)
    earlier = list(
        conversation.turns.order_by("-started_at", "-id").values_list("user_text", "assistant_text")[
            : settings.KOOKEE_HISTORY_TURNS
        ]
    )
    messages = prompt.messages(system, reversed(earlier), user_text)
    worst = prompt_tokens(messages, tool_chars, Ratios(*calibration.ratios(model)))
    # Last of the checks: it locks the budgets' rows until this commits.
    budget = limits.reserve(visitor, worst + settings.KOOKEE_MAX_OUTPUT_TOKENS)
    turn = Turn.objects.create(
        conversation=conversation,
        user_text=user_text,
        model=model,
        client_address=visitor.address,
        client_network=visitor.network,
        heartbeat_at=timezone.now(),
        owner=owner,
        budget=budget,
    )
    if conversation.updated_at < timezone.now() - ACTIVITY_RESOLUTION:
        # Last activity is shown to the minute and idles widgets in days:
        # turns back to back need not write it each time.
        conversation.save(update_fields=["updated_at"])
    record = TurnRecord(turn.id, turn.started_at, budget, preview=visitor.preview)
    return Started(conversation.id, turn.id, messages, record)


def running_turn(visitor: str) -> tuple[int, str] | None:
    """The visitor's running turn, if any: its id and the channel of the
    process that runs it."""
    if not visitor:
        return None
    return (
        Turn.objects.filter(conversation__visitor_hash=visitor, status=Turn.Status.STREAMING)
        .values_list("id", "owner")
        .first()
    )


def ended_frame(turn_id: int) -> frames.TurnEnded | None:
    """A stored turn's `turn.ended` frame, for tabs that did not hear its end
    from the process that ran it (it died); None while it runs."""
    turn = (
        Turn.objects.filter(pk=turn_id)
        .exclude(status=Turn.Status.STREAMING)
        .prefetch_related(
            Prefetch("generations__tool_calls", queryset=ToolCall.objects.only("generation_id", "name", "result"))
        )
        .first()
    )
    if turn is None:
        return None
    generations = list(turn.generations.all())
    entry = LedgerEntry.objects.filter(turn_id=turn_id).first()
    return frames.turn_ended(
        turn.id,
        turn.status,
        len(generations),
        _usage_of(entry) if entry else frames.usage(0, 0, estimated=True),
        turn.assistant_text,
        [call for g in generations for call in g.tool_calls.all()],
        reason=turn.stop_reason,
    )


def record_generation(turn_id: int, rnd: Round) -> None:
    """Stores one model call and its tool calls; logs it. Called once per
    round that is not the last (finish_turn records the rest)."""
    usage = rnd.usage
    # No savepoint inside finish_turn's transaction: its failure fails it all.
    with transaction.atomic(savepoint=False):
        generation = Generation.objects.create(
            turn_id=turn_id,
            round=rnd.number,
            finish_reason=rnd.finish_reason,
            input_tokens=usage.input_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            usage_estimated=usage.estimated,
            started_at=rnd.started_at,
            first_delta_at=rnd.first_delta_at,
            ended_at=rnd.ended_at or timezone.now(),
        )
        if rnd.tool_calls:
            ToolCall.objects.bulk_create(
                ToolCall(
                    generation=generation,
                    call_id=storable(call.call_id),
                    name=storable(call.name),
                    arguments=storable(call.arguments),
                    result="" if call.result is None else json.dumps(call.result),
                    error=storable(call.error),
                )
                for call in rnd.tool_calls
            )
    logger.info(
        "generation turn=%s round=%s finish_reason=%s input_tokens=%s cached_input_tokens=%s "
        "output_tokens=%s reasoning_tokens=%s estimated=%s tool_calls=%s ttfd_ms=%s duration_ms=%s",
        turn_id,
        rnd.number,
        rnd.finish_reason or "-",
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        usage.estimated,
        len(rnd.tool_calls),
        _ms(rnd.started_at, rnd.first_delta_at),
        _ms(rnd.started_at, generation.ended_at),
    )


def end_round(record: TurnRecord, rnd: Round, hold: int) -> str:
    """A round that called tools has ended, and another follows: records it,
    and grows the turn's hold in the daily budgets to `hold` (what it spent
    and the next round's worst case: limits.top_up). Returns "" or the code
    of a budget that cannot take it; the round is recorded either way."""
    budget = record.budget
    with transaction.atomic():
        record_generation(record.turn_id, rnd)
        try:
            with transaction.atomic():
                grown = limits.top_up(budget, hold)
                streaming = Turn.objects.filter(pk=record.turn_id, status=Turn.Status.STREAMING)
                if grown is not budget and not streaming.update(budget=grown):
                    # Closed meanwhile by a sweeper (a stalled process), which
                    # settled its hold: this growth would never be settled.
                    raise _Closed
        except LimitReached as limit:
            refused = limit.code
        except _Closed:
            refused = ""
        else:
            refused, budget = "", grown
    record.recorded.add(rnd.number)
    record.budget = budget
    return refused


class _Closed(Exception):
    pass


@dataclass(frozen=True)
class Checkpoint:
    turn_id: int
    text: str
    round_number: int
    input_tokens: int
    output_tokens: int


def checkpoint_turns(checkpoints: list[Checkpoint]) -> None:
    """Saves running turns' text so far and their current round's usage
    estimate, and says their process lives: one statement for all of them,
    however many turns run. (Raw SQL: the ORM would compile an expression
    per turn and column, every second.)"""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    table = connection.ops.quote_name(Turn._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        # A turn that has ended meanwhile keeps its final state.
        cursor.executemany(
            f"UPDATE {table} SET assistant_text = %s, checkpoint_round = %s, checkpoint_input_tokens = %s,"
            " checkpoint_output_tokens = %s, heartbeat_at = %s WHERE id = %s AND status = %s",
            [
                (c.text, c.round_number, c.input_tokens, c.output_tokens, now, c.turn_id, Turn.Status.STREAMING)
                for c in checkpoints
            ],
        )


@transaction.atomic
def finish_turn(
    record: TurnRecord,
    *,
    status: str,
    text: str,
    error: str,
    rounds: list[Round],
    model: str,
    stop_reason: str = "",
    stopped_by: str = "",
    action_calls: Sequence[CallRecord] = (),
) -> frames.Usage:
    """Closes the turn: its remaining rounds, its text, its actions' calls,
    its one ledger entry.

    Returns the usage the ledger recorded, for the `turn.ended` frame. A turn
    that has ended already (a sweeper closed it) is left as it is.
    """
    turn_id = record.turn_id
    # Claimed with a conditional update, as the sweeper claims it: whichever
    # comes second finds it taken (on PostgreSQL it waits for the first's
    # commit, then sees the new status), and this needs no read first.
    claimed = Turn.objects.filter(pk=turn_id, status=Turn.Status.STREAMING).update(
        status=status,
        interrupted=status == Turn.Status.INTERRUPTED,
        assistant_text=text,
        error=storable(error)[:200],
        stop_reason=stop_reason if status == Turn.Status.INTERRUPTED else "",
        stopped_by=stopped_by[:32],
        owner="",
        ended_at=timezone.now(),
        budget={},
    )
    if not claimed:
        return _usage_of(LedgerEntry.objects.get(turn_id=turn_id))
    for rnd in rounds:
        if rnd.number not in record.recorded:
            record_generation(turn_id, rnd)
    if not record.preview:  # the unanswered questions are visitors'
        searches.record_searches(turn_id, text, [call for rnd in rounds for call in rnd.tool_calls])
    catalog.save_calls(turn_id, action_calls)
    usages = [rnd.usage for rnd in rounds]
    entry = bill_once(
        turn_id,
        model=model,
        input_tokens=sum(u.input_tokens for u in usages),
        cached_input_tokens=sum(u.cached_input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        reasoning_tokens=sum(u.reasoning_tokens for u in usages),
        estimated=any(u.estimated for u in usages),
        priced_at=record.started_at,
        preview=record.preview,
    )
    limits.settle(record.budget, entry.input_tokens + entry.output_tokens)
    return _usage_of(entry)


def _usage_of(entry: LedgerEntry) -> frames.Usage:
    return frames.usage(entry.input_tokens, entry.output_tokens, entry.estimated)


def _ms(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    return str(round((end - start).total_seconds() * 1000))

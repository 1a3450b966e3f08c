"""The sweeper's end for the turns a dead process left streaming: closed as
interrupted, with the text of their last checkpoint, the round in flight
estimated, and billed once (chat/engine/lifecycle.py sweeps, and tells
their tabs)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from billing.services import bill_once
from chat.models import Conversation, Generation, ToolCall, Turn
from chat.support import searches
from chat.visitors import limits

logger = logging.getLogger("kookee.generations")


def close_stale_turns(stale_after_seconds: float) -> list[tuple[str, int]]:
    """Closes the turns a dead process left streaming: interrupted, text as
    of the last checkpoint, the round in flight estimated, billed once.
    Returns the visitor (hash) and id of each turn it closed."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_seconds)
    stale = Turn.objects.filter(status=Turn.Status.STREAMING, heartbeat_at__lt=cutoff)
    closed = [
        (visitor, turn_id)
        for turn_id, visitor in stale.values_list("id", "conversation__visitor_hash")
        if _close_stale_turn(turn_id, cutoff)
    ]
    if closed:
        logger.warning(
            "closed %s turn(s) left streaming by a lost process: %s", len(closed), [turn for _, turn in closed]
        )
    return closed


@transaction.atomic
def _close_stale_turn(turn_id: int, cutoff: datetime) -> bool:
    # Claim it with a conditional update: another process sweeping at the
    # same moment, or the turn's own process waking up, finds it taken.
    claimed = Turn.objects.filter(pk=turn_id, status=Turn.Status.STREAMING, heartbeat_at__lt=cutoff).update(
        status=Turn.Status.INTERRUPTED,
        interrupted=True,
        stop_reason=Turn.StopReason.PROCESS_LOST,
        owner="",
        ended_at=timezone.now(),
    )
    if not claimed:
        return False
    turn = Turn.objects.get(pk=turn_id)
    number = turn.checkpoint_round
    heartbeat = turn.heartbeat_at or cutoff  # never None: it was claimed for its heartbeat's age
    if number and not turn.generations.filter(round=number).exists():
        Generation.objects.create(
            turn=turn,
            round=number,
            input_tokens=turn.checkpoint_input_tokens,
            output_tokens=turn.checkpoint_output_tokens,
            usage_estimated=True,
            started_at=heartbeat,
            ended_at=heartbeat,
        )
    preview = Conversation.objects.filter(pk=turn.conversation_id, preview=True).exists()
    if not preview:  # the unanswered questions are visitors'
        searches.record_searches(turn_id, turn.assistant_text, ToolCall.objects.filter(generation__turn=turn))
    totals = turn.generations.aggregate(
        input=Sum("input_tokens"),
        cached=Sum("cached_input_tokens"),
        output=Sum("output_tokens"),
        reasoning=Sum("reasoning_tokens"),
    )
    entry = bill_once(
        turn_id,
        model=turn.model,
        input_tokens=totals["input"] or 0,
        cached_input_tokens=totals["cached"] or 0,
        output_tokens=totals["output"] or 0,
        reasoning_tokens=totals["reasoning"] or 0,
        estimated=True,
        priced_at=turn.started_at,
        preview=preview,
    )
    limits.settle(turn.budget, entry.input_tokens + entry.output_tokens)
    Turn.objects.filter(pk=turn_id).update(budget={})
    return True

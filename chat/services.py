"""Database work for chat: sync functions, each one unit of work, called from
async code through `database_sync_to_async`."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.db import transaction
from django.utils import timezone

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.models import Conversation, Generation, HelpArticle, ToolCall, Turn
from chat.rounds import Round

logger = logging.getLogger("kookee.generations")

SYSTEM_PROMPT = """You are Kookee's help-center assistant. Kookee is a product for collecting \
customer feedback: feedback boards, a public roadmap, a changelog and an embeddable widget.

Answer questions about Kookee from the help center: call search_help_center for any question \
about the product before answering, and base your answer only on the articles it returns, citing \
the ones you used as Markdown links. If the help center has no answer, say so and suggest \
contacting support. Greetings and small talk need no search. Be brief and friendly.

The help center has these articles:
{overview}"""


def conversation_for_session(session: SessionBase) -> Conversation | None:
    """The visitor's conversation, or None when the session is not a live one."""
    key = session.session_key
    if not key:
        return None
    session.load()  # forgets the key of a session that is missing or expired
    if session.session_key != key:
        return None
    conversation = Conversation.objects.filter(session_key=key).order_by("-id").first()
    return conversation or Conversation.objects.create(session_key=key)


def history(conversation: Conversation) -> list[dict[str, Any]]:
    """The turns of a conversation, as the chat page shows them."""
    return [
        {
            "turn_id": turn.id,
            "user_text": turn.user_text,
            "assistant_text": turn.assistant_text,
            "status": turn.status,
        }
        for turn in conversation.turns.order_by("started_at", "id")
    ]


@transaction.atomic
def start_turn(conversation_id: int, user_text: str, model: str) -> tuple[int, list[dict[str, Any]]]:
    """Creates the turn; returns its id and the messages for the first round."""
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    earlier = list(conversation.turns.order_by("-started_at", "-id")[: settings.KOOKEE_HISTORY_TURNS])
    turn = Turn.objects.create(conversation=conversation, user_text=user_text, model=model)
    conversation.save(update_fields=["updated_at"])
    messages = [{"role": "system", "content": _system_prompt()}]
    for past in reversed(earlier):
        messages.append({"role": "user", "content": past.user_text})
        if past.assistant_text:
            messages.append({"role": "assistant", "content": past.assistant_text})
    messages.append({"role": "user", "content": user_text})
    return turn.id, messages


def _system_prompt() -> str:
    titles = HelpArticle.objects.filter(published=True).values_list("title", flat=True)
    return SYSTEM_PROMPT.format(overview="\n".join(f"- {title}" for title in titles))


def record_generation(turn_id: int, rnd: Round) -> None:
    """Stores one model call and its tool calls, once; logs it."""
    if Generation.objects.filter(turn_id=turn_id, round=rnd.number).exists():
        return
    usage = rnd.usage
    with transaction.atomic():
        generation = Generation.objects.create(
            turn_id=turn_id,
            round=rnd.number,
            finish_reason=rnd.finish_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            usage_estimated=usage.estimated,
            started_at=rnd.started_at,
            first_delta_at=rnd.first_delta_at,
            ended_at=rnd.ended_at or timezone.now(),
        )
        ToolCall.objects.bulk_create(
            ToolCall(
                generation=generation,
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                result="" if call.result is None else json.dumps(call.result),
                error=call.error,
            )
            for call in rnd.tool_calls
        )
    logger.info(
        "generation turn=%s round=%s finish_reason=%s input_tokens=%s output_tokens=%s "
        "estimated=%s tool_calls=%s ttfd_ms=%s duration_ms=%s",
        turn_id,
        rnd.number,
        rnd.finish_reason or "-",
        usage.input_tokens,
        usage.output_tokens,
        usage.estimated,
        len(rnd.tool_calls),
        _ms(rnd.started_at, rnd.first_delta_at),
        _ms(rnd.started_at, generation.ended_at),
    )


@transaction.atomic
def finish_turn(
    turn_id: int,
    *,
    status: str,
    text: str,
    error: str,
    rounds: list[Round],
    model: str,
) -> dict[str, Any]:
    """Closes the turn: its remaining rounds, its text, its one ledger entry.

    Returns the usage the ledger recorded, for the `turn.ended` frame. A turn
    that has ended already is left as it is.
    """
    turn = Turn.objects.select_for_update().get(pk=turn_id)
    if turn.status != Turn.Status.STREAMING:
        return _usage_of(LedgerEntry.objects.get(turn_id=turn_id))
    for rnd in rounds:
        record_generation(turn_id, rnd)
    Turn.objects.filter(pk=turn_id).update(
        status=status,
        interrupted=status == Turn.Status.INTERRUPTED,
        assistant_text=text,
        error=error[:200],
        ended_at=timezone.now(),
    )
    usages = [rnd.usage for rnd in rounds]
    entry = bill_once(
        turn_id,
        model=model,
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        estimated=any(u.estimated for u in usages),
    )
    return _usage_of(entry)


def _usage_of(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "estimated": entry.estimated,
    }


def _ms(start: Any, end: Any) -> str:
    if start is None or end is None:
        return "-"
    return str(round((end - start).total_seconds() * 1000))

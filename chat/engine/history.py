"""A conversation as the visitor's page shows it: pages of past turns, with
their sources, rating and any pending request for a person."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Prefetch, Subquery

from chat.engine import fastjson
from chat.models import Conversation, Message, ToolCall, Turn
from chat.sources import search_results, used_articles
from chat.support import handoffs, replies
from chat.visitors import access


def visitors_history(
    visitor: str, conversation_id: int | None, before: int | None
) -> tuple[int | None, dict[str, Any]]:
    """A page of the visitor's conversation (see history_of), and its id:
    found now if another tab of theirs has written first since this one
    connected. Raises access.Refused when the conversation is no longer theirs
    (they started over in another tab, or it was erased)."""
    if conversation_id is None:
        conversation_id = access.conversation_of(visitor)
    elif not Conversation.objects.filter(pk=conversation_id, visitor_hash=visitor).exists():
        raise access.Refused
    return conversation_id, history_of(conversation_id, before)


def history_of(conversation_id: int | None, before: int | None = None) -> dict[str, Any]:
    """A page of the conversation as the chat page shows it: the latest
    KOOKEE_HISTORY_PAGE_TURNS turns (before the turn `before`, when given),
    oldest first, and whether there are older ones."""
    if conversation_id is None:
        return {"turns": [], "messages": [], "more": False, "handoff": None}
    turns = Turn.objects.filter(conversation_id=conversation_id)
    if before is not None:
        turns = turns.filter(id__lt=before)
    size = settings.KOOKEE_HISTORY_PAGE_TURNS
    page = list(turns.order_by("-started_at", "-id").values_list("id", flat=True)[: size + 1])
    shown = _within_bytes(history(page[:size]), settings.KOOKEE_HISTORY_PAGE_BYTES)
    more = len(page) > size or len(shown) < len(page[:size])
    return {
        "turns": shown,
        # What Support and the visitor wrote to each other in the same span of
        # time as these turns (chat/support/replies.py); the page puts each
        # message after the last turn that started before it.
        "messages": _messages(conversation_id, shown[0]["turn_id"] if more and shown else None, before),
        "more": more,
        # Beyond the contract: the conversation's request for a person, pending.
        "handoff": handoffs.pending_handoff(conversation_id),
    }


# A page's messages at most: a page is bounded (by its turns' bytes), and so are they.
MESSAGES_PER_PAGE = 200


def _messages(conversation_id: int, since_turn: int | None, before: int | None) -> list[dict[str, Any]]:
    """The conversation's replies and the visitor's messages to Support from
    the start of turn `since_turn` (from the start, when None) to the start
    of turn `before` (to now, when None), oldest first. Replies shown here
    are seen: no email for them."""
    messages = Message.objects.filter(
        conversation_id=conversation_id, kind__in=[Message.Kind.AGENT, Message.Kind.VISITOR], erased_at=None
    )
    if since_turn is not None:
        messages = messages.filter(created_at__gte=Subquery(Turn.objects.filter(pk=since_turn).values("started_at")))
    if before is not None:
        messages = messages.filter(created_at__lt=Subquery(Turn.objects.filter(pk=before).values("started_at")))
    page = list(messages.order_by("-created_at", "-id")[:MESSAGES_PER_PAGE])[::-1]
    replies.mark_seen([m.id for m in page if m.kind == Message.Kind.AGENT and m.seen_at is None])
    return [replies.as_history(message) for message in page]


def _within_bytes(turns: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The latest of these turns (oldest first) that fit in `limit` bytes of
    JSON, and always the latest one: a page costs its socket what it weighs
    (chat/engine/backpressure.py), and older turns come on request."""
    total = 0
    for start in range(len(turns) - 1, -1, -1):
        total += len(fastjson.dumps(turns[start]).encode("utf-8", "surrogatepass"))
        if total > limit and start < len(turns) - 1:
            return turns[start + 1 :]
    return turns


def history(turn_ids: list[int]) -> list[dict[str, Any]]:
    """These turns, oldest first, as the chat page shows them."""
    turns = (
        Turn.objects.filter(id__in=turn_ids)
        .order_by("started_at", "id")
        .select_related("feedback")
        .prefetch_related(
            Prefetch("generations__tool_calls", queryset=ToolCall.objects.only("generation_id", "name", "result"))
        )
    )
    return [
        {
            "turn_id": turn.id,
            "at": turn.started_at.isoformat(),
            "user_text": turn.user_text,
            "assistant_text": turn.assistant_text,
            "status": turn.status,
            "reason": turn.stop_reason or None,
            "sources": used_articles(
                turn.assistant_text,
                search_results(call for generation in turn.generations.all() for call in generation.tool_calls.all()),
            ),
            # Beyond the contract: the visitor's own rating, shown on the answer.
            "rating": feedback.rating if (feedback := getattr(turn, "feedback", None)) else None,
        }
        for turn in turns
    ]

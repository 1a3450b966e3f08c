"""Forgetting: a visitor's right to erasure, and what is kept no longer than
it must be."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext

from chat.models import Action, ActionCall, Conversation, Feedback, Handoff, Message, RevokedKey, Search, ToolCall, Turn
from chat.visitors import limits
from chat.vocabulary import TOOL_NAMES

# Starting over and erasure: ids only, never a key, a hash or any text.
privacy_log = logging.getLogger("kookee.privacy")


class ErasureRefused(Exception):
    pass


@transaction.atomic
def erase_conversations(conversation_ids: list[int], by: str) -> list[Conversation]:
    """Erases what visitors and the model wrote in these conversations (the
    visitor's right to erasure), and the visitor's link to them: texts, the
    provider's errors (they can quote the visitor), tool calls' ids,
    arguments and results, and their names unless one of our tools, search
    queries, rating comments, the reasons and addresses of requests for a
    person, the messages between Support and the visitor, the page they
    came from, client addresses; the visitor's key is revoked, and the
    requests for a person are closed for good (no reply is taken after).
    Turns are kept, marked erased, with their numbers, for the ledger that
    protects them. Logged, without any of the text. Returns the
    conversations erased.

    Raises ErasureRefused, erasing nothing, while one of them has a turn
    running: its end would write the answer back.
    """
    conversations = list(Conversation.objects.select_for_update().filter(pk__in=conversation_ids))
    turns = Turn.objects.filter(conversation__in=conversations)
    if turns.filter(status=Turn.Status.STREAMING).exists():
        raise ErasureRefused(gettext("A turn is still running in one of these conversations; try again in a minute."))
    now = timezone.now()
    RevokedKey.objects.bulk_create(
        [RevokedKey(visitor_hash=c.visitor_hash) for c in conversations if c.visitor_hash], ignore_conflicts=True
    )
    calls = ToolCall.objects.filter(generation__turn__in=turns)
    calls.update(call_id="", arguments="", result="", error="")
    # A call's name that is one of our tools' or actions' names nobody; any other is the model's own words.
    calls.exclude(name__in=TOOL_NAMES).exclude(name__in=Action.objects.values("name")).update(name="")
    # The actions' calls: which, when and how they went stay; the arguments
    # and the detail (a schema error quotes the values) go.
    ActionCall.objects.filter(turn__in=turns).update(arguments={}, detail="")
    Search.objects.filter(turn__in=turns).update(query="", terms="")
    Feedback.objects.filter(turn__in=turns).update(comment="")  # the rating stays: it names nobody
    Handoff.objects.filter(conversation__in=conversations).update(reason="", email="", client_network="")
    # Nobody answers in it again: a helpdesk's reply (or a replay of one)
    # would store text in an erased conversation (chat/support/replies.py).
    Handoff.objects.filter(conversation__in=conversations, status__in=Handoff.PENDING).update(
        status=Handoff.Status.CLOSED, closed_at=now
    )
    # What Support and the visitor wrote to each other, and Support's notes
    # (they quote the visitor); who wrote and when stay, as for turns.
    Message.objects.filter(conversation__in=conversations).update(
        text="", external_id="", erased_at=Coalesce("erased_at", Value(now))
    )
    # The verified person too: their id, name and email are theirs to have erased.
    Conversation.objects.filter(pk__in=[c.pk for c in conversations]).update(
        visitor_hash="",
        source_url="",
        verified_id="",
        verified_name="",
        verified_email="",
        verified_attributes={},
        erased_at=Coalesce("erased_at", Value(now)),
    )
    turns.update(
        user_text="",
        assistant_text="",
        error="",  # a provider's error body can quote the prompt
        client_address=None,
        client_network="",
        erased_at=Coalesce("erased_at", Value(now)),
    )
    for conversation in conversations:
        privacy_log.info("erased conversation %s at the visitor's request, by %s", conversation.public_id, by)
    return conversations


def purge_expired(now: Any = None) -> dict[str, int]:
    """Drops what is kept no longer than it must be: client addresses older
    than KOOKEE_ADDRESS_RETENTION_DAYS, and revoked keys that could no
    longer be used anyway. (Expired sessions: Django's clearsessions.)"""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.KOOKEE_ADDRESS_RETENTION_DAYS)
    old = Turn.objects.filter(started_at__lt=cutoff).exclude(client_address=None, client_network="")
    addresses = old.update(client_address=None, client_network="")
    Handoff.objects.filter(created_at__lt=cutoff).exclude(client_network="").update(client_network="")
    # A key revoked longer ago than a widget token may idle, or a session
    # live, is refused anyway.
    useless_after = max(
        timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS), timedelta(seconds=settings.SESSION_COOKIE_AGE)
    )
    revoked = RevokedKey.objects.filter(revoked_at__lt=now - useless_after).delete()[0]
    return {"addresses": addresses, "revoked_keys": revoked, "day_budgets": limits.forget_old_budgets()}

"""Which visitor a key is, and which conversation it reaches: sessions and
widget tokens to visitor hashes, revoked keys, starting over."""

from __future__ import annotations

import logging
import zlib
from datetime import timedelta
from typing import TYPE_CHECKING, TypedDict, cast

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from chat.models import Conversation, Handoff, RevokedKey
from chat.visitors import embed
from chat.visitors.identity import Visitor, hash_key
from chat.visitors.verified import Person

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

# Starting over and erasure: ids only, never a key, a hash or any text.
privacy_log = logging.getLogger("kookee.privacy")


class Refused(Exception):
    """The visitor's key is known and no longer good (a widget token that is
    forged, idle or revoked; a revoked session; a conversation taken away
    from it): the socket is closed with 4401, and the page starts afresh."""


def visitor_for_session(session: SessionBase) -> str | None:
    """The hash of a live session's key; None when there is no live session
    (none, or expired). Raises Refused for a live session whose key was
    revoked: its visitor started over, or their conversation was erased."""
    key = session.session_key
    if not key:
        return None
    session.load()  # forgets the key of a session that is missing or expired
    if session.session_key != key:
        return None
    visitor = hash_key(key)
    if RevokedKey.objects.filter(visitor_hash=visitor).exists():
        raise Refused
    return visitor


def visitor_for_token(token: str) -> str | None:
    """The hash of a widget token's key, or None: forged, revoked, or idle
    for longer than KOOKEE_WIDGET_IDLE_DAYS (since it was made, or since its
    conversation last moved)."""
    key = embed.visitor_key(token)
    if key is None:
        return None
    visitor = hash_key(key)
    if RevokedKey.objects.filter(visitor_hash=visitor).exists():
        return None
    if embed.is_fresh(token):
        return visitor
    idle_since = timezone.now() - timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS)
    active = Conversation.objects.filter(visitor_hash=visitor, updated_at__gte=idle_since).exists()
    return visitor if active else None


def conversation_of(visitor: str) -> int | None:
    """The visitor's latest conversation; None before their first message
    (a page view stores nothing)."""
    return Conversation.objects.filter(visitor_hash=visitor).order_by("-id").values_list("id", flat=True).first()


@transaction.atomic
def forget_visitor(visitor: str) -> None:
    """The visitor starts over: their key can no longer reach anything, and
    their conversations, kept for support and billing, belong to nobody."""
    detached = Conversation.objects.filter(visitor_hash=visitor).update(visitor_hash="")
    RevokedKey.objects.get_or_create(visitor_hash=visitor)
    privacy_log.info("a visitor started over: key revoked, %s conversation(s) detached", detached)


class Claimed(TypedDict):
    claimed: bool  # whether a person has the conversation (chat/support/replies.py)


def conversation_for(
    visitor: Visitor, conversation_id: int | None, replacing: int | None = None
) -> WithAnnotations[Conversation, Claimed]:
    """The visitor's conversation, locked for this transaction; created at
    their first message (or request for a person), and never before: a
    conversation is what a visitor asked. `conversation_id` is the one their
    tab knows, None before it knew one; `replacing`, with None, a full one
    that a new conversation follows, unless another tab began one already.
    Raises Refused when their key no longer reaches it (they started over,
    or it was erased). Its `claimed` says whether a person has it."""
    if conversation_id == replacing:
        conversation_id = None  # full: the visitor's latest, unless another tab began a new one
    if conversation_id is None:
        if RevokedKey.objects.filter(visitor_hash=visitor.hash).exists():
            raise Refused  # started over in another tab since this one connected
        # Another tab of theirs, on any process, may have written first since
        # this one connected: wait for its transaction, then find its conversation.
        _lock_visitor(visitor.hash)
        conversation_id = conversation_of(visitor.hash)
        if replacing is not None and conversation_id == replacing:
            conversation_id = None
    if conversation_id is None:
        # As the annotation below would say of it: nobody has a new conversation.
        created = cast(
            "WithAnnotations[Conversation, Claimed]",
            Conversation.objects.create(
                visitor_hash=visitor.hash,
                source_url=visitor.page,
                preview=visitor.preview,
                **_verified_fields(visitor.person),
            ),
        )
        created.claimed = False
        return created
    # The lock makes a message racing in from another process wait here;
    # its insert then meets this turn (the constraint: records.TurnAlreadyRunning).
    # `claimed`, read in the same statement: whether a person has it, and
    # the visitor's words go to them (chat/support/replies.py).
    conversation = (
        Conversation.objects.select_for_update()
        .only("visitor_hash", "updated_at", "verified_id")
        .annotate(claimed=Exists(Handoff.objects.filter(conversation=OuterRef("pk"), status=Handoff.Status.CLAIMED)))
        .get(pk=conversation_id)
    )
    if conversation.visitor_hash != visitor.hash:
        raise Refused  # started over or erased since this tab connected
    if visitor.person is not None and conversation.verified_id != visitor.person.id:
        if conversation.verified_id:
            raise Refused  # another person's: a tab of theirs proved someone else since (see identify)
        _verify(conversation, visitor.person)
    return conversation


@transaction.atomic
def identify(visitor: Visitor, conversation_id: int | None, person: Person) -> bool:
    """Gives the visitor's conversation to the person their tab proved (an
    anonymous one becomes theirs; one of theirs takes the token's latest
    name, email and attributes; a first one is stamped when created).
    Returns True when it is another person's: the key then starts over, as
    with `forget_visitor`, so that nobody sees the earlier person's
    conversation, and the tab must start afresh. Raises Refused when the
    key no longer reaches it."""
    conversation_id = conversation_id or conversation_of(visitor.hash)
    if conversation_id is None:
        return False
    conversation = Conversation.objects.select_for_update().only("visitor_hash", "verified_id").get(pk=conversation_id)
    if conversation.visitor_hash != visitor.hash:
        raise Refused
    if conversation.verified_id and conversation.verified_id != person.id:
        forget_visitor(visitor.hash)
        privacy_log.info("a visitor proved another person: key revoked, conversations detached")
        return True
    _verify(conversation, person)
    return False


def _verified_fields(person: Person | None) -> dict[str, object]:
    if person is None:
        return {}
    return {
        "verified_id": person.id,
        "verified_name": person.name,
        "verified_email": person.email,
        "verified_attributes": dict(person.attributes),
    }


def _verify(conversation: Conversation, person: Person) -> None:
    fields = _verified_fields(person)
    for name, value in fields.items():
        setattr(conversation, name, value)
    conversation.save(update_fields=list(fields))


# The first key of PostgreSQL's two-key advisory locks that this app takes.
_VISITOR_LOCK = 0x4B4B  # "KK"


def _lock_visitor(visitor: str) -> None:
    """Serialises a visitor's first messages across processes until this
    transaction ends, so that racing tabs share one conversation and one turn.
    SQLite's IMMEDIATE transactions serialise all writers already."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # 31 bits of the key: a collision only makes two visitors wait in turn.
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_VISITOR_LOCK, zlib.crc32(visitor.encode()) >> 1])

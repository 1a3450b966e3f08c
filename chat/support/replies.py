"""A person answers in the same chat.

Support replies to a visitor who asked for a person (or to any
conversation) from the request's page in the admin, or from a helpdesk
through `POST /api/handoffs/{id}/messages` (chat/support/api.py). A reply:

- claims a waiting request for its author, whose name the visitor sees;
- reaches every open tab of the visitor at once, on whichever process, as
  an `agent.message` frame (announced here with `news_for_visitor`; the
  engine's hub shows it: chat/engine/hub_protocol.py), and their history
  after a reload;
- goes by email when the visitor left an address and no tab of theirs has
  shown it after KOOKEE_REPLY_EMAIL_AFTER_SECONDS (the sweeper sends it: one
  email for every reply still unseen, with a signed, expiring link back).

While a person has the conversation (claimed, not closed), what the visitor
writes goes to them (`to_person`): stored, shown in every tab and on the
request's page, sent to the helpdesk's webhook (`handoff.message`), and not
answered by the assistant. Closing hands the chat back.

Nothing here is model usage: no turn, no ledger entry.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from chat.models import Conversation, Handoff, Message
from chat.support import handoff_webhook, handoffs
from chat.text import visible

logger = logging.getLogger("kookee.replies")

# Long enough for a helpdesk's or an agent's answer; it is shown, not sent to a model.
REPLY_CHARS = 10_000
AUTHOR_CHARS = 150
_link_signer = signing.TimestampSigner(salt="kookee.reply-link")

# Support changed what the visitor's open tabs show: `handoff`, their
# request, was claimed, closed or reopened; `reply`, a reply of Support's
# (either or both), in the conversation `conversation_id`. Sent once the
# change commits. The engine's hub shows it in every tab of the visitor, on
# every process (chat/engine/hub_protocol.py): Support's room is below the
# engine's, and does not import it.
news_for_visitor = Signal()


class Closed(Exception):
    """The request was closed, or its conversation erased: nobody answers in it any more."""


# --- Support writes ------------------------------------------------------------------------------


def author_name(user: User) -> str:
    """The name a visitor sees for an agent: their full name, else their first
    name, else their username."""
    name: str = user.get_full_name() or user.get_short_name() or user.get_username()
    return name[:AUTHOR_CHARS]


def reply(
    handoff_id: int, text: str, *, user: User | None = None, author: str = "", external_id: str = ""
) -> tuple[Message, bool]:
    """Support's reply to the visitor of a request: stored, then sent to
    their tabs once the transaction commits. A reply to a waiting request
    claims it for its author. Returns the message, and whether it is new (a
    helpdesk's `external_id` seen before, in any request, returns the first
    one). Raises Handoff.DoesNotExist, or Closed."""
    # On one line with no format characters: a bidi override in a name
    # would reorder the time shown beside it.
    author = " ".join(visible(author or (author_name(user) if user else "")).split()) or _("Support")
    author = author[:AUTHOR_CHARS]
    with transaction.atomic():
        handoff = Handoff.objects.select_for_update(of=("self",)).select_related("conversation").get(pk=handoff_id)
        if handoff.conversation.erased_at is not None:
            raise Closed(_("The conversation was erased."))
        if external_id:
            known = Message.objects.filter(external_id=external_id).first()
            if known is not None:
                return known, False
        if handoff.status == Handoff.Status.CLOSED:
            raise Closed(_("The request is closed."))
        claimed = handoff.status == Handoff.Status.OPEN
        if claimed:
            _claim(handoff, user, author)
        try:
            with transaction.atomic():  # a savepoint: the same helpdesk message may be racing in
                message = Message.objects.create(
                    conversation_id=handoff.conversation_id,
                    handoff=handoff,
                    kind=Message.Kind.AGENT,
                    text=text,
                    author=author,
                    author_user=user,
                    external_id=external_id,
                )
        except IntegrityError:
            return Message.objects.get(external_id=external_id), False
        transaction.on_commit(
            lambda: news_for_visitor.send(
                Message, conversation_id=handoff.conversation_id, handoff=handoff if claimed else None, reply=message
            )
        )
    logger.info("handoff=%s: Support replied (message=%s)", handoff_id, message.id)
    return message, True


def note(handoff_id: int, text: str, user: User) -> Message:
    """An internal note on a request: Support reads it; the visitor never does."""
    handoff = Handoff.objects.get(pk=handoff_id)
    return Message.objects.create(
        conversation_id=handoff.conversation_id,
        handoff=handoff,
        kind=Message.Kind.NOTE,
        text=text,
        author=author_name(user),
        author_user=user,
    )


@transaction.atomic
def answer_conversation(conversation_id: int, user: User) -> Handoff:
    """Support starts answering a conversation nobody asked a person in: its
    waiting request, else a new one that Support opened, claimed by `user`.
    Raises Closed for an erased conversation."""
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    if conversation.erased_at is not None:
        raise Closed(_("The conversation was erased."))
    handoff = Handoff.objects.filter(conversation=conversation, status__in=Handoff.PENDING).first()
    if handoff is None:
        handoff = Handoff.objects.create(
            conversation=conversation,
            source=Handoff.Source.SUPPORT,
            status=Handoff.Status.OPEN,
        )
    if handoff.status == Handoff.Status.OPEN:
        _claim(handoff, user, author_name(user))
        transaction.on_commit(lambda: news_for_visitor.send(Handoff, conversation_id=conversation.id, handoff=handoff))
    return handoff


def _claim(handoff: Handoff, user: User | None, author: str) -> None:
    handoff.status = Handoff.Status.CLAIMED
    handoff.claimed_by = user
    handoff.claimed_at = timezone.now()
    handoff.agent_name = author
    handoff.save(update_fields=["status", "claimed_by", "claimed_at", "agent_name"])


def announce_handoff_changes(handoff_ids: list[int]) -> None:
    """Tells the visitors' tabs that these requests were claimed, closed or
    reopened (chat/support/handoff_admin.py), once the change commits."""

    def announce() -> None:
        for handoff in Handoff.objects.filter(pk__in=handoff_ids).only(
            "id", "conversation_id", "status", "email", "agent_name"
        ):
            news_for_visitor.send(Handoff, conversation_id=handoff.conversation_id, handoff=handoff)

    transaction.on_commit(announce)


# --- the visitor writes --------------------------------------------------------------------------


def to_person(visitor: str, conversation_id: int, text: str) -> Message | None:
    """The visitor's message, stored as theirs to the person who has their
    conversation, if someone does; None when nobody has it (the assistant
    answers). In the transaction that starts a turn otherwise
    (chat/engine/records.py): one trip to the database for either. The
    engine shows the message in the visitor's tabs, and hands it to
    `forward_to_helpdesk` (chat/engine/to_person.py)."""
    handoff = (
        Handoff.objects.filter(
            conversation_id=conversation_id, conversation__visitor_hash=visitor, status=Handoff.Status.CLAIMED
        )
        .select_related("conversation")
        .first()
    )
    if handoff is None:
        return None
    message = Message.objects.create(
        conversation=handoff.conversation,
        handoff=handoff,
        kind=Message.Kind.VISITOR,
        text=text,
        webhook_status=Handoff.Delivery.PENDING if settings.KOOKEE_HANDOFF_WEBHOOK else "",
    )
    Conversation.objects.filter(pk=conversation_id).update(updated_at=timezone.now())
    return message


def forward_to_helpdesk(message: Message) -> None:
    """A visitor's message to a person, stored: sent to the helpdesk's
    webhook, in the background, when there is one."""
    if settings.KOOKEE_HANDOFF_WEBHOOK:
        handoffs.spawn(_forward(message.id))


async def _forward(message_id: int) -> None:
    """The visitor's message to the helpdesk, on the request's webhook."""
    try:
        await _post(message_id)
    except Exception:
        logger.exception("message=%s: the helpdesk could not be told", message_id)


async def _post(message_id: int) -> None:
    message = await database_sync_to_async(Message.objects.select_related("handoff__conversation").get)(pk=message_id)
    handoff = message.handoff
    body = json.dumps(
        {
            "event": "handoff.message",
            "handoff": {"id": handoff.id, "conversation": {"id": str(handoff.conversation.public_id)}},
            "message": {"id": message.id, "text": message.text, "at": message.created_at.isoformat()},
        }
    ).encode()
    delivered, _attempts = await handoff_webhook.post_webhook(f"handoff={handoff.id} message={message.id}", body)
    status = Handoff.Delivery.SENT if delivered else Handoff.Delivery.FAILED
    await database_sync_to_async(Message.objects.filter(pk=message_id).update)(webhook_status=status)


# --- the visitor's page --------------------------------------------------------------------------


def as_history(message: Message) -> dict[str, Any]:
    """A message as a page of history carries it."""
    return {
        "id": message.id,
        "kind": message.kind,
        "text": message.text,
        "author": message.author if message.kind == Message.Kind.AGENT else "",
        "at": message.created_at.isoformat(),
    }


def mark_seen(message_ids: list[int]) -> None:
    """These replies were shown in a tab of the visitor: no email for them."""
    if message_ids:
        Message.objects.filter(pk__in=message_ids, seen_at=None).update(seen_at=timezone.now())


# --- by email, when no tab showed it ---------------------------------------------------------------


def continue_link(conversation: Conversation) -> str:
    """The way back to a conversation, for the visitor's email: signed, and
    good for KOOKEE_REPLY_LINK_DAYS."""
    token = _link_signer.sign(str(conversation.public_id))
    return handoffs.absolute(reverse("continue", args=[token]))


def conversation_of_link(token: str) -> Conversation | None:
    """The conversation a link leads back to; None when it is forged, expired,
    or the conversation is gone (erased, or its visitor started over)."""
    try:
        public_id = _link_signer.unsign(token, max_age=timedelta(days=settings.KOOKEE_REPLY_LINK_DAYS))
    except signing.BadSignature:
        return None
    return Conversation.objects.filter(public_id=public_id).exclude(visitor_hash="").first()


def move_to(conversation_id: int, visitor: str) -> bool:
    """A conversation reached by its link moves to this visitor (their
    browser's fresh key); False when it is gone meanwhile."""
    return bool(Conversation.objects.filter(pk=conversation_id).exclude(visitor_hash="").update(visitor_hash=visitor))


async def email_unseen() -> int:
    """From the sweeper: one email per conversation whose replies no tab has
    shown for KOOKEE_REPLY_EMAIL_AFTER_SECONDS, to the address its visitor
    left. Returns how many were sent."""
    batches = await database_sync_to_async(_claim_unseen)()
    sent = 0
    for to, subject, body, ids in batches:
        try:
            # A thread of its own, as for Support's emails (chat/support/handoff_email.py).
            await sync_to_async(send_mail, thread_sensitive=False)(subject, body, None, [to], fail_silently=False)
            sent += 1
        except Exception:
            logger.exception("the email of %s reply(ies) to a visitor failed; tried again at the next sweep", len(ids))
            await database_sync_to_async(Message.objects.filter(pk__in=ids).update)(emailed_at=None)
    return sent


def _claim_unseen() -> list[tuple[str, str, str, list[int]]]:
    if not settings.EMAIL_URL:
        return []
    due = timezone.now() - timedelta(seconds=settings.KOOKEE_REPLY_EMAIL_AFTER_SECONDS)
    unseen = (
        Message.objects.filter(kind=Message.Kind.AGENT, seen_at=None, emailed_at=None, created_at__lte=due)
        .exclude(handoff__email="")
        .select_related("handoff", "conversation")
        .order_by("conversation_id", "created_at", "id")
    )
    by_conversation: dict[int, list[Message]] = {}
    for message in unseen[:500]:
        by_conversation.setdefault(message.conversation_id, []).append(message)
    batches = []
    now = timezone.now()
    for messages in by_conversation.values():
        ids = [m.id for m in messages]
        # Conditional: a sweeper of another process may have taken them, or a tab shown them.
        if Message.objects.filter(pk__in=ids, seen_at=None, emailed_at=None).update(emailed_at=now) != len(ids):
            Message.objects.filter(pk__in=ids, emailed_at=now).update(emailed_at=None)
            continue
        first = messages[0]
        batches.append((first.handoff.email, *_visitor_email(first.conversation, messages), ids))
    return batches


def _visitor_email(conversation: Conversation, messages: list[Message]) -> tuple[str, str]:
    # The visitor's language is not stored; the site's is what their page
    # was most likely in when the site has one language, and is ours otherwise.
    with translation.override(settings.LANGUAGE_CODE):
        lines = [_("Support answered your question in the chat:"), ""]
        for message in messages:
            lines += [f"{message.author}:", *message.text.splitlines(), ""]
        lines += [
            _("Continue the conversation: %(url)s") % {"url": continue_link(conversation)},
            _("The link works for %(days)s days.") % {"days": settings.KOOKEE_REPLY_LINK_DAYS},
        ]
        return _("A reply to your question"), "\n".join(lines)

"""Handoff to a person: a visitor's request (the page's "Talk to a person",
or the model's request_human tool) lands in Support's queue in the admin,
and Support is told by email and, when configured, by a webhook.

The request is stored first, in one transaction; telling Support happens
afterwards in a task of its own, with timeouts and retries, so that a slow
mail server or webhook receiver never holds up a turn or a frame. The queue
is the record: what was and was not delivered is shown on each request.

Support is emailed by chat/support/handoff_email.py, and the webhook is
called (signed) by chat/support/handoff_webhook.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from chat.models import Conversation, Handoff, Turn
from chat.support import handoff_email, handoff_webhook
from chat.visitors import access
from chat.visitors.identity import Visitor
from chat.visitors.limits import LimitReached
from chat.vocabulary import Code

logger = logging.getLogger("kookee.handoffs")

REASON_CHARS = 500


async def request_by_visitor(
    visitor: Visitor, conversation_id: int | None, reason: str, email: str
) -> tuple[int, dict[str, Any]]:
    """The visitor's "Talk to a person": a request for their conversation
    (started now if they have not asked anything yet). Returns the
    conversation's id and the request as their page shows it
    (handoff_state). Raises access.Refused (their key no longer
    reaches the conversation) or LimitReached."""
    conversation_id, handoff, created = await database_sync_to_async(_request_by_visitor)(
        visitor, conversation_id, reason, email
    )
    if created:
        notify_soon(handoff.id)
    return conversation_id, handoff_state(handoff)


async def request_for_turn(turn_id: int, reason: str) -> dict[str, Any]:
    """The model's request_human, during a turn: the request as the
    visitor's page shows it."""
    handoff, created = await database_sync_to_async(_request_for_turn)(turn_id, reason)
    if created:
        notify_soon(handoff.id)
    return handoff_state(handoff)


@transaction.atomic
def _request_by_visitor(
    visitor: Visitor, conversation_id: int | None, reason: str, email: str
) -> tuple[int, Handoff, bool]:
    conversation = access.conversation_for(visitor, conversation_id)
    latest = conversation.turns.order_by("-started_at", "-id").values_list("id", flat=True).first()
    return (conversation.id, *_request(conversation, Handoff.Source.VISITOR, reason, email, latest, visitor.network))


@transaction.atomic
def _request_for_turn(turn_id: int, reason: str) -> tuple[Handoff, bool]:
    turn = Turn.objects.select_related("conversation").only("client_network", "conversation").get(pk=turn_id)
    return _request(turn.conversation, Handoff.Source.ASSISTANT, reason, "", turn_id, turn.client_network)


def _request(
    conversation: Conversation, source: str, reason: str, email: str, turn_id: int | None, network: str
) -> tuple[Handoff, bool]:
    """A new request, or what was asked added to the conversation's pending
    one; and whether it is new."""
    reason = " ".join(reason.split())[:REASON_CHARS]
    pending = Handoff.objects.select_for_update().filter(conversation=conversation, status__in=Handoff.PENDING).first()
    if pending is None:
        _check_rate(network)
        try:
            with transaction.atomic():  # a savepoint: a racing request may have won
                handoff = Handoff.objects.create(
                    conversation=conversation,
                    turn_id=turn_id,
                    source=source,
                    reason=reason,
                    email=email,
                    client_network=network,
                    email_status=Handoff.Delivery.PENDING if _recipients() else Handoff.Delivery.NONE,
                    webhook_status=Handoff.Delivery.PENDING if settings.KOOKEE_HANDOFF_WEBHOOK else "",
                )
            logger.info("handoff=%s requested by the %s in conversation=%s", handoff.id, source, conversation.id)
            return handoff, True
        except IntegrityError:
            pending = Handoff.objects.select_for_update().get(conversation=conversation, status__in=Handoff.PENDING)
    changed = []
    if email and email != pending.email:
        pending.email = email
        changed.append("email")
    if reason and reason not in pending.reason:
        pending.reason = f"{pending.reason}\n{reason}".strip()[: REASON_CHARS * 4]
        changed.append("reason")
    if changed:
        pending.save(update_fields=changed)
    return pending, False


def _check_rate(network: str) -> None:
    """New requests per network per hour: each one mails Support."""
    if not network:
        return
    hour_ago = timezone.now() - timedelta(hours=1)
    if (
        Handoff.objects.filter(client_network=network, created_at__gte=hour_ago).count()
        >= settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK
    ):
        raise LimitReached(Code.HANDOFF_RATE_LIMITED)


# --- telling Support --------------------------------------------------------------------------

# Notifications in flight: referenced so that they are not collected, and
# awaited (briefly) at shutdown (lifecycle.stop_running_turns).
tasks: set[asyncio.Task[None]] = set()
# A notice taken on this long ago and still pending was lost with its
# process (killed, or stopped mid-retry): the sweeper sends it again. Longer
# than a notice can take (every webhook attempt and backoff, the email).
NOTICE_STALE_SECONDS = 300
SHUTDOWN_WAIT_SECONDS = 5


def notify_soon(handoff_id: int) -> None:
    """Tells Support of a new request, in the background."""
    spawn(notify(handoff_id))


def spawn(work: Coroutine[Any, Any, None]) -> None:
    """Telling Support, in a task of its own that shutdown waits for."""
    task = asyncio.get_running_loop().create_task(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def notify(handoff_id: int) -> None:
    """Emails Support and calls the webhook, whichever is still pending;
    records how each went. Nobody awaits it for its result: whatever goes
    wrong is logged here."""
    try:
        notice = await database_sync_to_async(_claimed_notice)(handoff_id)
        if notice is None:
            return  # another process is on it, or nothing is pending
        await asyncio.gather(handoff_email.deliver(handoff_id, notice), handoff_webhook.deliver(handoff_id, notice))
    except Exception:
        logger.exception("handoff=%s: Support could not be told", handoff_id)


async def drain() -> None:
    """At shutdown: lets the notices in flight finish, for a moment. Those
    that do not stay pending, and another process's sweeper sends them."""
    pending = [task for task in tasks if not task.done()]
    if pending:
        await asyncio.wait(pending, timeout=SHUTDOWN_WAIT_SECONDS)


async def resend_lost() -> int:
    """From the sweeper: sends again the notices that a process took on and
    never finished. Returns how many it started."""
    lost = await database_sync_to_async(_lost_notices)()
    for handoff_id in lost:
        notify_soon(handoff_id)
    if lost:
        logger.warning("resending %s notice(s) to Support left pending by a lost process", len(lost))
    return len(lost)


def _lost_notices() -> list[int]:
    stale = timezone.now() - timedelta(seconds=NOTICE_STALE_SECONDS)
    pending = Q(email_status=Handoff.Delivery.PENDING) | Q(webhook_status=Handoff.Delivery.PENDING)
    return list(
        Handoff.objects.filter(pending, notice_claimed_at__lt=stale).order_by("id").values_list("id", flat=True)[:100]
    )


def _claimed_notice(handoff_id: int) -> dict[str, Any] | None:
    """The notice to send, once this process has taken it on (a conditional
    update: two sweepers never both send it); None when it is not this
    process's to send."""
    now = timezone.now()
    stale = now - timedelta(seconds=NOTICE_STALE_SECONDS)
    pending = Q(email_status=Handoff.Delivery.PENDING) | Q(webhook_status=Handoff.Delivery.PENDING)
    free = Q(notice_claimed_at__isnull=True) | Q(notice_claimed_at__lt=stale)
    if not Handoff.objects.filter(pending, free, pk=handoff_id).update(notice_claimed_at=now):
        return None
    return _notice(handoff_id)


def _notice(handoff_id: int) -> dict[str, Any]:
    handoff = Handoff.objects.select_related("conversation").get(pk=handoff_id)
    conversation = handoff.conversation
    last_question = conversation.turns.order_by("-started_at", "-id").values_list("user_text", flat=True).first() or ""
    return {
        "id": handoff.id,
        "source": handoff.source,
        "reason": handoff.reason,
        "email": handoff.email,
        "created_at": handoff.created_at.isoformat(),
        "admin_url": absolute(reverse("admin:chat_handoff_change", args=[handoff.id])),
        "conversation": {
            "id": str(conversation.public_id),
            "source_url": conversation.source_url,
            "admin_url": absolute(reverse("admin:chat_conversation_change", args=[conversation.id])),
            "last_question": last_question,
        },
        "recipients": _recipients() if handoff.email_status == Handoff.Delivery.PENDING else [],
        "webhook": handoff.webhook_status == Handoff.Delivery.PENDING,
    }


def _recipients() -> list[str]:
    """KOOKEE_HANDOFF_EMAILS, or else every active member of Support with an
    address; nobody when no email is configured (EMAIL_URL)."""
    if not settings.EMAIL_URL:
        return []
    if settings.KOOKEE_HANDOFF_EMAILS:
        return list(settings.KOOKEE_HANDOFF_EMAILS)
    users = get_user_model().objects.filter(is_active=True, groups__name="Support").exclude(email="")
    return sorted(set(users.values_list("email", flat=True)))


def absolute(path: str) -> str:
    return settings.KOOKEE_SITE_URL.rstrip("/") + path if settings.KOOKEE_SITE_URL else path


def pending_handoff(conversation_id: int | None) -> dict[str, Any] | None:
    """The conversation's open or claimed request for a person, as the page
    shows it; None when there is none."""
    if conversation_id is None:
        return None
    pending = (
        Handoff.objects.filter(conversation_id=conversation_id, status__in=Handoff.PENDING)
        .only("status", "email", "agent_name")
        .first()
    )
    return handoff_state(pending) if pending else None


def handoff_state(handoff: Handoff) -> dict[str, Any]:
    """A request for a person as the visitor's page sees it: whether Support
    has an address to reply to (never the address), and who answers it once
    claimed (chat/support/replies.py)."""
    claimed = handoff.status == Handoff.Status.CLAIMED
    return {
        "handoff_id": handoff.id,
        "status": handoff.status,
        "email": bool(handoff.email),
        "agent": (handoff.agent_name or None) if claimed else None,
    }

"""Handoff to a person: a visitor's request (the page's "Talk to a person",
or the model's request_human tool) lands in Support's queue in the admin,
and Support is told by email and, when configured, by a webhook.

The request is stored first, in one transaction; telling Support happens
afterwards in a task of its own, with timeouts and retries, so that a slow
mail server or webhook receiver never holds up a turn or a frame. The queue
is the record: what was and was not delivered is shown on each request.

The webhook's payload (docs/operations.md, "Handoff to a person"):

    {"event": "handoff.requested",
     "handoff": {"id", "source", "reason", "email", "created_at", "admin_url",
                 "conversation": {"id", "source_url", "admin_url", "last_question"}}}

signed with KOOKEE_HANDOFF_WEBHOOK_SECRET, when set, at each attempt, in
`X-Kookee-Webhook-Signature: t=<unix seconds>,sha256=<hex HMAC of "t." + body>`:
the time lets a receiver refuse a request recorded and replayed. The old
`X-Kookee-Signature: sha256=<hex HMAC of the body>` is sent too while
KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE is true (deprecated).

The email puts our links and fields first, then what was written in the chat
(the reason, the last question, an unusual address or page), every line of
it quoted with "> ": a visitor's line breaks cannot make their words pass
for ours.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import httpx2
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from chat.models import Conversation, Handoff, Turn
from chat.text import visible
from chat.visitors import access
from chat.visitors.identity import Visitor
from chat.visitors.limits import LimitReached
from chat.vocabulary import Code

logger = logging.getLogger("kookee.handoffs")

REASON_CHARS = 500
# Statuses after which a webhook is not worth trying again.
PERMANENT_FAILURES = range(400, 500)
RETRYABLE_CLIENT_ERRORS = {408, 409, 425, 429}


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
tasks: set[asyncio.Task] = set()
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
        await asyncio.gather(_email(handoff_id, notice), _webhook(handoff_id, notice))
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


async def _email(handoff_id: int, notice: dict[str, Any]) -> None:
    if not notice["recipients"]:
        return
    subject, body = _message(notice)
    try:
        # A thread of its own: SMTP can take seconds, and must not hold the
        # database thread that every turn of the process shares.
        await sync_to_async(send_mail, thread_sensitive=False)(
            subject, body, None, notice["recipients"], fail_silently=False
        )
        status = Handoff.Delivery.SENT
    except Exception:
        logger.exception("handoff=%s: the email to Support failed", handoff_id)
        status = Handoff.Delivery.FAILED
    await database_sync_to_async(_record)(handoff_id, email_status=status)


def _message(notice: dict[str, Any]) -> tuple[str, str]:
    # Staff read it: in the site's language, whoever the visitor is.
    with translation.override(settings.LANGUAGE_CODE):
        # What the visitor wrote comes last: nothing of ours follows it, so
        # nothing in it can pass for a line of ours.
        lines = [_intro(notice), "", *_links(notice), "", *_fields(notice), "", *_written(notice)]
        return _("Kookee chat: a visitor asks for a person (#%(id)s)") % {"id": notice["id"]}, "\n".join(lines)


def _intro(notice: dict[str, Any]) -> str:
    if notice["source"] == Handoff.Source.VISITOR:
        return _("A visitor asked to talk to a person.")
    return _("The assistant handed a conversation over to a person.")


def _links(notice: dict[str, Any]) -> list[str]:
    return [
        _("Open the request: %(url)s") % {"url": notice["admin_url"]},
        _("Read the transcript: %(url)s") % {"url": notice["conversation"]["admin_url"]},
    ]


# What the visitor gave that may stand on a line of ours: printable ASCII
# but space, " and \, as an address or a page's URL (a browser's location.href)
# normally is. validate_email also takes a quoted local part with control
# characters and a domain with any character past U+00A1 (line separators,
# bidi controls); the widget's script can be made to report any path. Those
# are quoted with what was written.
_PLAIN = re.compile(r"[!#-\[\]-~]+")


def _fields(notice: dict[str, Any]) -> list[str]:
    return [
        _("Visitor's email: %(email)s") % {"email": _shown(notice["email"], _("not given"))},
        _("From: %(page)s") % {"page": _shown(notice["conversation"]["source_url"], _("the chat page"))},
    ]


def _shown(value: str, missing: str) -> str:
    if not value:
        return missing
    return value if _PLAIN.fullmatch(value) else _("quoted below")


def _written(notice: dict[str, Any]) -> list[str]:
    """The reason (the visitor's, or the model's from the conversation), the
    last question, and an unusual address or page, each quoted under its label."""
    conversation = notice["conversation"]
    fields = [(_("Reason:"), notice["reason"]), (_("Last question:"), conversation["last_question"])]
    unusual = [
        (_("Visitor's email, as typed:"), notice["email"]),
        (_("Page, as reported:"), conversation["source_url"]),
    ]
    fields += [(label, value) for label, value in unusual if value and not _PLAIN.fullmatch(value)]
    lines = [_("Written in the chat, quoted as typed (not checked: do not trust links in it):")]
    for label, text in fields:
        lines += ["", label, *(_quoted(text) if text else [_("(nothing)")])]
    return lines


def _quoted(text: str) -> list[str]:
    # Every line break splitlines() knows: a mail client may break a line at
    # any of them (\r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029).
    return ["> " + visible(line) for line in text.splitlines()]


async def _webhook(handoff_id: int, notice: dict[str, Any]) -> None:
    if not notice["webhook"] or not settings.KOOKEE_HANDOFF_WEBHOOK:
        return
    payload = {key: value for key, value in notice.items() if key not in ("recipients", "webhook")}
    body = json.dumps({"event": "handoff.requested", "handoff": payload}).encode()
    delivered, attempts = await post_webhook(f"handoff={handoff_id}", body)
    status = Handoff.Delivery.SENT if delivered else Handoff.Delivery.FAILED
    await database_sync_to_async(_record)(handoff_id, webhook_status=status, webhook_attempts=attempts)


async def post_webhook(label: str, body: bytes) -> tuple[bool, int]:
    """POSTs a signed event to KOOKEE_HANDOFF_WEBHOOK, with retries and
    backoff; returns whether it was delivered, and after how many attempts.
    `label` names it in the logs."""
    attempts, delivered = 0, False
    async with httpx2.AsyncClient(timeout=settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT) as client:
        for attempt in range(settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES + 1):
            if attempt:
                await asyncio.sleep(settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS * 2 ** (attempt - 1))
            attempts += 1
            try:
                # The whole attempt, not each read: a receiver that trickles
                # its reply must not hold the notice open.
                async with asyncio.timeout(settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT):
                    response = await client.post(settings.KOOKEE_HANDOFF_WEBHOOK, content=body, headers=_headers(body))
            except (httpx2.HTTPError, TimeoutError) as exc:
                logger.warning("%s: webhook attempt %s failed: %s", label, attempts, type(exc).__name__)
                continue
            if response.is_success:
                delivered = True
                break
            logger.warning("%s: webhook attempt %s got HTTP %s", label, attempts, response.status_code)
            if response.status_code in PERMANENT_FAILURES and response.status_code not in RETRYABLE_CLIENT_ERRORS:
                break
    if not delivered:
        logger.error("%s: the webhook was not delivered after %s attempt(s)", label, attempts)
    return delivered, attempts


def _headers(body: bytes) -> dict[str, str]:
    """The POST's headers, signed when there is a secret. Signed as each
    attempt leaves, with the time: a receiver refuses a request that is old,
    and so one recorded and replayed later."""
    headers = {"Content-Type": "application/json", "User-Agent": "Kookee-chat"}
    secret = settings.KOOKEE_HANDOFF_WEBHOOK_SECRET.encode()
    if not secret:
        return headers
    signed_at = str(int(time.time()))
    headers["X-Kookee-Webhook-Signature"] = f"t={signed_at},sha256={_hmac(secret, f'{signed_at}.'.encode() + body)}"
    if settings.KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE:
        # Deprecated: it signs the body alone, so a recorded request replays.
        headers["X-Kookee-Signature"] = f"sha256={_hmac(secret, body)}"
    return headers


def _hmac(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _record(handoff_id: int, **fields: Any) -> None:
    Handoff.objects.filter(pk=handoff_id).update(**fields)


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

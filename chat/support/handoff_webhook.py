"""Telling Support of a request for a person by webhook
(chat/support/handoffs.py takes the notice on and calls `deliver`); and the
signed POST to KOOKEE_HANDOFF_WEBHOOK that every event to the helpdesk goes
by (a visitor's messages too: chat/support/replies.py).

The webhook's payload (docs/operations.md, "Handoff to a person"):

    {"event": "handoff.requested",
     "handoff": {"id", "source", "reason", "email", "created_at", "admin_url",
                 "conversation": {"id", "source_url", "admin_url", "last_question"}}}

signed with KOOKEE_HANDOFF_WEBHOOK_SECRET, when set, at each attempt, in
`X-Kookee-Webhook-Signature: t=<unix seconds>,sha256=<hex HMAC of "t." + body>`:
the time lets a receiver refuse a request recorded and replayed. The old
`X-Kookee-Signature: sha256=<hex HMAC of the body>` is sent too while
KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE is true (deprecated).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import httpx2
from channels.db import database_sync_to_async
from django.conf import settings

from chat.models import Handoff

logger = logging.getLogger("kookee.handoffs")

# Statuses after which a webhook is not worth trying again.
PERMANENT_FAILURES = range(400, 500)
RETRYABLE_CLIENT_ERRORS = {408, 409, 425, 429}


async def deliver(handoff_id: int, notice: dict[str, Any]) -> None:
    """Posts the notice as a `handoff.requested` event, if it is still to
    send; records how it went."""
    if not notice["webhook"] or not settings.KOOKEE_HANDOFF_WEBHOOK:
        return
    payload = {key: value for key, value in notice.items() if key not in ("recipients", "webhook")}
    body = json.dumps({"event": "handoff.requested", "handoff": payload}).encode()
    delivered, attempts = await post_webhook(f"handoff={handoff_id}", body)
    status = Handoff.Delivery.SENT if delivered else Handoff.Delivery.FAILED
    await database_sync_to_async(_record)(handoff_id, status, attempts)


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


def _record(handoff_id: int, status: str, attempts: int) -> None:
    Handoff.objects.filter(pk=handoff_id).update(webhook_status=status, webhook_attempts=attempts)

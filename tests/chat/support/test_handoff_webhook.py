"""Support told of a request for a person by a webhook
(chat/support/handoff_webhook.py) to a real receiver on a loopback port: the
body and its signatures, timeouts and retries with backoff; and never at a
turn's expense."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time

import pytest
from channels.db import database_sync_to_async

from chat.models import Conversation, Handoff
from chat.support import handoffs
from tests.chat.support import handoff_helpers as helpers
from tests.chat.support.handoff_helpers import (
    FAKE,
    HANG,
    HUMAN,
    SITE,
    VISITOR,
    Received,
    Receiver,
    ask_for_a_person,
    closed_port,
    eventually,
    get,
    history,
    notified,
)
from tests.provider import answer, tool_round

pytestmark = pytest.mark.django_db(transaction=True)

# The handoff tests' fixtures (handoff_helpers.py), two of them autouse.
handoff_settings = helpers.handoff_settings
no_notification_left_behind = helpers.no_notification_left_behind
visitors, chat, receiver = helpers.visitors, helpers.chat, helpers.receiver


# --- telling Support: the webhook -------------------------------------------------------------


async def test_the_webhook_gets_the_request_signed(chat, use_provider, receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    use_provider.queue(answer("Hmm."))
    await chat.finish(await chat.ask("Where is my data stored?"))

    saved = await ask_for_a_person(chat, reason="GDPR request.", email="sam@example.com")
    await notified()

    handoff = await get(saved["handoff_id"])
    conversation = await database_sync_to_async(Conversation.objects.get)()
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/hooks/kookee")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)
    assert request.json == {
        "event": "handoff.requested",
        "handoff": {
            "id": handoff.id,
            "source": "visitor",
            "reason": "GDPR request.",
            "email": "sam@example.com",
            "created_at": handoff.created_at.isoformat(),
            "admin_url": f"{SITE}/admin/chat/handoff/{handoff.id}/change/",
            "conversation": {
                "id": str(conversation.public_id),
                "source_url": "",
                "admin_url": f"{SITE}/admin/chat/conversation/{conversation.id}/change/",
                "last_question": "Where is my data stored?",
            },
        },
    }
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 1)


async def test_without_a_secret_the_webhook_is_not_signed(receiver):
    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    assert "x-kookee-signature" not in receiver.requests[0].headers
    assert "x-kookee-webhook-signature" not in receiver.requests[0].headers


async def test_the_signature_is_of_the_bytes_sent(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, "Ünïcode reason", "")
    await notified()

    request = receiver.requests[0]
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)
    assert request.headers["x-kookee-signature"] != "sha256=" + signature(b"another secret", request.body)
    assert request.json["handoff"]["reason"] == "Ünïcode reason"


def signature(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


# The receiver's check, as docs/operations.md gives it ("Handoff to a person").
TOLERANCE_SECONDS = 300


def verify(header: str, body: bytes, secret: bytes, now: float | None = None) -> bool:
    """Whether X-Kookee-Webhook-Signature signs this body, and is recent."""
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part)
    t, signature = fields.get("t", ""), fields.get("sha256", "")
    if not (t.isascii() and t.isdigit()):
        return False
    if abs((time.time() if now is None else now) - int(t)) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode())


def signed_at(request: Received) -> int:
    t, _, digest = request.headers["x-kookee-webhook-signature"].partition(",")
    assert t.startswith("t=") and digest.startswith("sha256=")
    return int(t.removeprefix("t="))


async def test_the_webhook_is_signed_with_the_time_it_left(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, f"Refund.\n\n{FAKE}", "")
    await notified()

    [request] = receiver.requests
    t = signed_at(request)
    assert abs(time.time() - t) < 5
    header = request.headers["x-kookee-webhook-signature"]
    assert header == f"t={t},sha256=" + signature(b"s3cret", f"{t}.".encode() + request.body)
    assert verify(header, request.body, b"s3cret")
    # The old header still comes, by default.
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)


async def test_a_receiver_refuses_an_old_or_altered_request(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    request = receiver.requests[0]
    header, body, t = request.headers["x-kookee-webhook-signature"], request.body, signed_at(request)
    assert verify(header, body, b"s3cret", now=t + TOLERANCE_SECONDS)
    assert not verify(header, body, b"s3cret", now=t + TOLERANCE_SECONDS + 1), "replayed later"
    assert not verify(header, body, b"s3cret", now=t - TOLERANCE_SECONDS - 1), "from the future"
    assert not verify(header, body + b" ", b"s3cret", now=t)
    assert not verify(header, body, b"another secret", now=t)
    # The signature of another time, or none: the time is signed with the body.
    assert not verify(header.replace(f"t={t}", f"t={t + 1}"), body, b"s3cret", now=t)
    assert not verify(f"t={t}", body, b"s3cret", now=t)
    assert not verify(header.replace(f"t={t}", "t=²"), body, b"s3cret", now=t)
    assert not verify(request.headers["x-kookee-signature"], body, b"s3cret", now=t)


async def test_each_attempt_is_signed_as_it_leaves(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    # A retry a second later at least: it has a time of its own.
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 1

    await webhook_outcome(receiver, 503, 200)

    first, retry = receiver.requests
    assert first.body == retry.body
    assert signed_at(retry) > signed_at(first)
    assert all(verify(r.headers["x-kookee-webhook-signature"], r.body, b"s3cret") for r in (first, retry))


async def test_without_the_legacy_signature_only_the_new_header_is_sent(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    settings.KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE = False

    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    request = receiver.requests[0]
    assert "x-kookee-signature" not in request.headers
    assert verify(request.headers["x-kookee-webhook-signature"], request.body, b"s3cret")


async def webhook_outcome(receiver: Receiver, *replies) -> Handoff:
    """Requests a person with the receiver scripted to reply so; the request
    once Support's notifications have ended."""
    receiver.replies = list(replies)
    _, state = await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()
    return await get(state["handoff_id"])


async def test_a_failing_receiver_is_retried_until_it_takes_it(receiver):
    handoff = await webhook_outcome(receiver, 500, 503)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 3)
    assert len(receiver.requests) == 3
    assert len({r.body for r in receiver.requests}) == 1, "the same notice each time"


async def test_a_receiver_that_always_fails_is_given_up_after_the_retries(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 3
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 0.05

    handoff = await webhook_outcome(receiver, 500, 500, 500, 500, 200)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 4)
    assert len(receiver.requests) == 4
    # Backing off, doubling: 0.05, 0.1, 0.2 s before the retries.
    at = [request.at for request in receiver.requests]
    assert at[1] - at[0] >= 0.05 - EARLY
    assert at[2] - at[1] >= 0.1 - EARLY
    assert at[3] - at[2] >= 0.2 - EARLY


EARLY = 0.005  # how early a timer may fire


async def test_no_retries_means_one_attempt(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 0

    handoff = await webhook_outcome(receiver, 500)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 1)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
async def test_a_client_error_is_not_retried(receiver, status):
    handoff = await webhook_outcome(receiver, status)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 1)
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("status", [408, 409, 425, 429])
async def test_a_client_error_that_may_pass_is_retried(receiver, status):
    handoff = await webhook_outcome(receiver, status)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 2)


async def test_a_receiver_that_hangs_past_the_timeout_is_a_failed_attempt(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 0.2

    handoff = await webhook_outcome(receiver, HANG, 200)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 2)
    assert receiver.requests[0].hung_up, "the client gave up on the hanging attempt"


async def test_a_receiver_that_always_hangs_fails(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 0.2
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 1

    handoff = await webhook_outcome(receiver, HANG, HANG)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 2)
    assert [r.hung_up for r in receiver.requests] == [True, True]


async def test_nobody_listening_fails_after_the_retries(settings):
    settings.KOOKEE_HANDOFF_WEBHOOK = f"http://127.0.0.1:{closed_port()}/hooks"
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 1
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 0.01

    _, state = await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    handoff = await get(state["handoff_id"])
    assert (handoff.webhook_status, handoff.webhook_attempts, handoff.email_status) == ("failed", 2, "sent")


async def test_a_request_added_to_is_not_notified_again(receiver, mailoutbox):
    await handoffs.request_by_visitor(VISITOR, None, "First.", "")
    await notified()

    await handoffs.request_by_visitor(VISITOR, None, "Second.", "sam@example.com")
    await notified()

    assert len(receiver.requests) == 1
    assert len(mailoutbox) == 1


# --- never at a turn's expense ----------------------------------------------------------------


async def test_a_turn_that_hands_over_ends_while_the_webhook_hangs(chat, use_provider, receiver, settings, mailoutbox):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 30
    receiver.replies = [HANG]
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))

    turn_id = await chat.ask("I want my money back")
    ended = await chat.finish(turn_id, timeout=5)

    await receiver.wait_for(1)
    handoff_id = ended["handoff"]["handoff_id"]
    handoff = await get(handoff_id)
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("pending", 0)
    assert not receiver.requests[0].hung_up
    # The email does not wait for the webhook either.
    await eventually(lambda: Handoff.objects.get(pk=handoff_id).email_status == "sent")
    assert len(mailoutbox) == 1
    # And the visitor goes on chatting.
    use_provider.queue(answer("Anything else?"))
    assert (await chat.finish(await chat.ask("Thanks"), timeout=5))["status"] == "completed"

    receiver.release.set()
    await notified()
    handoff = await get(handoff_id)
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 1)


async def test_the_visitors_request_is_saved_while_the_webhook_hangs(chat, receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 30
    receiver.replies = [HANG]

    async with asyncio.timeout(5):
        saved = await ask_for_a_person(chat, reason="Now, please.")
        await receiver.wait_for(1)
        assert (await history(chat))["handoff"]["handoff_id"] == saved["handoff_id"]

    assert handoffs.tasks, "the notification is still in flight"
    assert (await get(saved["handoff_id"])).webhook_status == "pending"

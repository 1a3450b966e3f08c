"""A person answers in the same chat (chat/support/replies.py, api.py and the
request's page in the admin): replies reach every open tab at once as
`agent.message`, and the history after a reload; while a person has the
conversation the visitor's messages go to them (and to the helpdesk's
webhook), not to the model; closing hands back; a reply nobody saw goes by
email with a link back; a helpdesk answers through a signed POST."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group, User
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.models import LedgerEntry
from chat.engine import lifecycle
from chat.models import Conversation, Handoff, Message, Turn
from chat.roles import ensure_roles
from chat.support import erasure, replies
from tests.chat.support import handoff_helpers
from tests.chat.support.handoff_helpers import Receiver, ask_for_a_person, notified
from tests.provider import answer

pytestmark = pytest.mark.django_db(transaction=True)

# The visitors, the webhook's receiver and the notifications' bookkeeping of the handoff tests (handoff_helpers.py).
visitors = handoff_helpers.visitors
chat = handoff_helpers.chat
receiver = handoff_helpers.receiver
handoff_settings = handoff_helpers.handoff_settings
no_notification_left_behind = handoff_helpers.no_notification_left_behind

SECRET = "helpdesk-shared-secret"


@pytest.fixture(autouse=True)
def reply_settings(settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = SECRET
    settings.EMAIL_URL = "locmem://"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.KOOKEE_REPLY_EMAIL_AFTER_SECONDS = 0


def agent(name: str = "ana", full: str = "Ana Souza", role: str = "Support") -> User:
    ensure_roles()
    user = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=True)
    user.first_name, user.last_name = full.split(" ", 1)
    user.save()
    user.groups.add(Group.objects.get(name=role))
    return user


def admin_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def path_of(handoff_id: int) -> str:
    return f"/api/handoffs/{handoff_id}/messages"


def signature_of(raw: bytes, path: str, secret: str = SECRET, t: int | None = None, method: str = "POST") -> str:
    """As a helpdesk signs a reply (docs/operations.md): the time, the method, the path, the body."""
    t = int(time.time()) if t is None else t
    return f"t={t},v1=" + hmac.new(secret.encode(), f"{t}.{method}.{path}.".encode() + raw, hashlib.sha256).hexdigest()


def legacy_signature_of(raw: bytes, secret: str = SECRET) -> str:
    """The deprecated signature: of the body alone."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def signed_post(
    handoff_id: int, body: dict | bytes, secret: str = SECRET, signature: str | None = None, path: str | None = None
):
    """POSTs a reply to the request's path (or `path`), signed for that path unless `signature` is given."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = path or path_of(handoff_id)
    headers = {}
    if signature is None:
        signature = signature_of(raw, path, secret)
    if signature:
        headers["HTTP_X_KOOKEE_SIGNATURE"] = signature
    return Client().post(path, raw, content_type="application/json", **headers)


async def asked_and_answered(chat, use_provider, email: str = "") -> int:
    """A visitor asked a question, was answered, and asked for a person."""
    use_provider.queue(answer("I'm not sure."))
    turn_id = await chat.ask("Why was I charged twice?")
    await chat.finish(turn_id)
    saved = await ask_for_a_person(chat, reason="Charged twice", email=email)
    await notified()
    return saved["handoff_id"]


async def history(client) -> dict:
    await client.send({"type": "history"})
    return await client.receive_until("history")


# --- Support replies ----------------------------------------------------------------------------


async def test_a_reply_reaches_every_open_tab_and_claims_the_request(chat, visitors, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider)
    key = chat.communicator.scope["headers"]
    other_tab = await visitors(session_key=_session_of(key))
    user = await database_sync_to_async(agent)()

    message, created = await database_sync_to_async(replies.reply)(handoff_id, "Hi! Refunded.", user=user)

    assert created
    for tab in (chat, other_tab):
        updated = await tab.receive_until("handoff.updated")
        assert updated["handoff"] == {
            "handoff_id": handoff_id,
            "status": "claimed",
            "email": False,
            "agent": "Ana Souza",
        }
        frame = await tab.receive_until("agent.message")
        assert frame == {
            "type": "agent.message",
            "id": message.id,
            "text": "Hi! Refunded.",
            "author": "Ana Souza",
            "at": message.created_at.isoformat(),
        }
    handoff = await database_sync_to_async(Handoff.objects.get)(pk=handoff_id)
    assert (handoff.status, handoff.claimed_by_id, handoff.agent_name) == ("claimed", user.id, "Ana Souza")
    # Shown in a tab: seen, and so never emailed.
    await _eventually(lambda: Message.objects.get(pk=message.id).seen_at is not None)


def _session_of(headers) -> str:
    cookie = dict(headers)[b"cookie"].decode()
    return cookie.split("=", 1)[1]


async def _eventually(check, tries: int = 300) -> None:
    import asyncio

    for _ in range(tries):
        if await database_sync_to_async(check)():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("still not so")


async def test_history_after_a_reload_carries_the_replies_in_order_with_the_turns(chat, visitors, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider)
    user = await database_sync_to_async(agent)()
    await database_sync_to_async(replies.reply)(handoff_id, "First reply", user=user)
    await chat.receive_until("agent.message")
    await chat.send({"type": "message", "text": "Thanks, and the second charge?"})
    await chat.receive_until("visitor.message")
    await database_sync_to_async(replies.note)(handoff_id, "Customer since 2019: be nice", user)
    await database_sync_to_async(replies.reply)(handoff_id, "Refunded too.", user=user)
    await chat.receive_until("agent.message")
    await chat.close()

    reloaded = await visitors(session_key=_session_of(chat.communicator.scope["headers"]))
    page = await history(reloaded)

    assert [t["user_text"] for t in page["turns"]] == ["Why was I charged twice?"]
    assert [(m["kind"], m["text"], m["author"]) for m in page["messages"]] == [
        ("agent", "First reply", "Ana Souza"),
        ("visitor", "Thanks, and the second charge?", ""),
        ("agent", "Refunded too.", "Ana Souza"),
    ], "in order, and never the internal note"
    assert page["turns"][0]["at"] < page["messages"][0]["at"]
    assert page["handoff"] == {"handoff_id": handoff_id, "status": "claimed", "email": False, "agent": "Ana Souza"}


async def test_while_a_person_has_it_the_visitors_messages_go_to_them_not_to_the_model(
    chat, visitors, use_provider, receiver: Receiver
):
    handoff_id = await asked_and_answered(chat, use_provider)
    await receiver.wait_for(1)  # handoff.requested
    other_tab = await visitors(session_key=_session_of(chat.communicator.scope["headers"]))
    user = await database_sync_to_async(agent)()
    await database_sync_to_async(replies.reply)(handoff_id, "How can I help?", user=user)
    turns_before = await database_sync_to_async(Turn.objects.count)()
    requests_before = len(use_provider.requests)

    await chat.send({"type": "message", "text": "My card ends in 4242"})

    for tab in (chat, other_tab):
        frame = await tab.receive_until("visitor.message")
        assert frame["text"] == "My card ends in 4242"
    assert await database_sync_to_async(Turn.objects.count)() == turns_before
    assert len(use_provider.requests) == requests_before, "the model was not asked"
    stored = await database_sync_to_async(Message.objects.get)(kind="visitor")
    assert (stored.handoff_id, stored.text) == (handoff_id, "My card ends in 4242")
    # And to the helpdesk, signed like every event.
    event = await receiver.wait_for(2)
    assert event.json["event"] == "handoff.message"
    assert event.json["handoff"]["id"] == handoff_id
    assert event.json["message"] == {
        "id": stored.id,
        "text": "My card ends in 4242",
        "at": stored.created_at.isoformat(),
    }
    assert event.headers["x-kookee-webhook-signature"].startswith("t=")
    await notified()
    assert (await database_sync_to_async(Message.objects.get)(pk=stored.id)).webhook_status == "sent"


async def test_closing_hands_the_chat_back_to_the_assistant(chat, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider)
    user = await database_sync_to_async(agent)()
    await database_sync_to_async(replies.reply)(handoff_id, "Done, refunded.", user=user)
    await chat.receive_until("agent.message")

    response = await sync_to_async(
        lambda: admin_client(user).post(reverse("admin:chat_handoff_move", args=[handoff_id]), {"move": "close"})
    )()
    assert response.status_code == 302
    updated = await chat.receive_until("handoff.updated")
    assert updated["handoff"]["status"] == "closed" and updated["handoff"]["agent"] is None

    use_provider.queue(answer("Anything else?"))
    turn_id = await chat.ask("One more question")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert await database_sync_to_async(Message.objects.filter(kind="visitor").count)() == 0


async def test_replies_are_never_billed(chat, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider)
    user = await database_sync_to_async(agent)()
    entries = await database_sync_to_async(LedgerEntry.objects.count)()
    await database_sync_to_async(replies.reply)(handoff_id, "Hello", user=user)
    await chat.send({"type": "message", "text": "Hi"})
    await chat.receive_until("visitor.message")
    assert await database_sync_to_async(LedgerEntry.objects.count)() == entries


def test_a_reply_to_a_closed_request_is_refused():
    conversation = Conversation.objects.create(visitor_hash="v")
    handoff = Handoff.objects.create(conversation=conversation, source="visitor", status="closed")
    with pytest.raises(replies.Closed):
        replies.reply(handoff.id, "Too late", author="Kim")
    assert not Message.objects.exists()


# --- by email, when no tab showed it ------------------------------------------------------------


async def test_a_reply_nobody_saw_goes_by_email_once_with_a_link_back(chat, use_provider, settings):
    handoff_id = await asked_and_answered(chat, use_provider, email="sam@example.com")
    session = _session_of(chat.communicator.scope["headers"])
    await chat.close()  # no tab open
    user = await database_sync_to_async(agent)()
    await database_sync_to_async(replies.reply)(handoff_id, "We refunded the second charge.", user=user)
    await database_sync_to_async(replies.reply)(handoff_id, "It shows in 3 days.", user=user)
    mail.outbox.clear()

    await lifecycle.sweep()
    await lifecycle.sweep()  # and again: still one email

    [email] = mail.outbox
    assert email.to == ["sam@example.com"]
    assert "We refunded the second charge." in email.body and "It shows in 3 days." in email.body
    link = re.search(r"https://chat\.example\.com(/conversation/[^/\s]+/)", email.body).group(1)

    # The link, in another browser: a page with a button, then the conversation there.
    browser = Client()
    assert (await sync_to_async(browser.get)(link)).status_code == 200
    assert await database_sync_to_async(Conversation.objects.filter(visitor_hash="").count)() == 0
    response = await sync_to_async(browser.post)(link)
    assert response.status_code == 302 and response["Location"] == "/"
    page = await sync_to_async(browser.get)("/")
    embedded = json.loads(
        re.search(rb'<script id="history" type="application/json">(.*?)</script>', page.content).group(1)
    )
    assert [m["text"] for m in embedded["messages"]] == ["We refunded the second charge.", "It shows in 3 days."]
    assert [t["user_text"] for t in embedded["turns"]] == ["Why was I charged twice?"]
    # The browser it was on no longer reaches it.
    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert conversation.visitor_hash != "" and session not in conversation.visitor_hash


def test_a_forged_or_expired_link_leads_nowhere(settings):
    conversation = Conversation.objects.create(visitor_hash="someone")
    good = replies.continue_link(conversation).split("/conversation/")[1].rstrip("/")
    assert Client().get(f"/conversation/{good}x/").status_code == 410
    settings.KOOKEE_REPLY_LINK_DAYS = -1
    assert Client().post(f"/conversation/{good}/").status_code == 410
    assert Conversation.objects.get().visitor_hash == "someone"


async def test_a_reply_seen_in_a_tab_is_not_emailed(chat, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider, email="sam@example.com")
    user = await database_sync_to_async(agent)()
    await database_sync_to_async(replies.reply)(handoff_id, "Seen live", user=user)
    await chat.receive_until("agent.message")
    await _eventually(lambda: Message.objects.get().seen_at is not None)
    mail.outbox.clear()
    await lifecycle.sweep()
    assert mail.outbox == []


def test_a_reply_waits_a_minute_before_email(settings):
    settings.KOOKEE_REPLY_EMAIL_AFTER_SECONDS = 60
    conversation = Conversation.objects.create(visitor_hash="v")
    handoff = Handoff.objects.create(conversation=conversation, source="visitor", email="sam@example.com")
    replies.reply(handoff.id, "Hello", author="Kim")
    assert replies._claim_unseen() == []
    Message.objects.update(created_at=timezone.now() - timezone.timedelta(seconds=61))
    [(to, _subject, _body, _ids)] = replies._claim_unseen()
    assert to == "sam@example.com"


# --- a helpdesk answers -------------------------------------------------------------------------


async def test_a_signed_helpdesk_reply_reaches_the_open_tab_and_claims_for_its_author(chat, use_provider):
    handoff_id = await asked_and_answered(chat, use_provider)

    body = {"text": "Hello from Zendesk", "author": "Kim (Zendesk)", "message_id": "zd-981"}
    response = await sync_to_async(signed_post)(handoff_id, body)

    assert response.status_code == 201
    message_id = response.json()["id"]
    updated = await chat.receive_until("handoff.updated")
    assert updated["handoff"]["agent"] == "Kim (Zendesk)"
    frame = await chat.receive_until("agent.message")
    assert (frame["id"], frame["text"], frame["author"]) == (message_id, "Hello from Zendesk", "Kim (Zendesk)")
    # The same message again (a helpdesk retrying): the same id, nothing new.
    again = await sync_to_async(signed_post)(handoff_id, body)
    assert (again.status_code, again.json()) == (201, {"id": message_id})
    assert await database_sync_to_async(Message.objects.count)() == 1
    handoff = await database_sync_to_async(Handoff.objects.get)(pk=handoff_id)
    assert (handoff.status, handoff.claimed_by_id, handoff.agent_name) == ("claimed", None, "Kim (Zendesk)")


def test_the_helpdesk_api_refuses_what_it_must():
    conversation = Conversation.objects.create(visitor_hash="v")
    waiting = Handoff.objects.create(conversation=conversation, source="visitor")
    closed = Handoff.objects.create(conversation=Conversation.objects.create(), source="visitor", status="closed")
    body = {"text": "Hi", "author": "Kim", "message_id": "1"}

    assert signed_post(waiting.id, body, signature="").status_code == 403
    assert signed_post(waiting.id, body, signature="sha256=" + "0" * 64).status_code == 403
    assert signed_post(waiting.id, body, secret="another secret").status_code == 403
    assert signed_post(999_999, body, signature="").status_code == 403, "no id is confirmed without the secret"
    assert signed_post(999_999, body).status_code == 404
    assert signed_post(closed.id, body).status_code == 409
    for bad in [b"not json", b"[1]", {"text": ""}, {"text": 5}, {"text": "x", "author": ["a"]}, {"text": "x" * 10_001}]:
        response = signed_post(waiting.id, bad)
        assert response.status_code == 400, bad
        assert "error" in response.json()
    assert Client().get(f"/api/handoffs/{waiting.id}/messages").status_code == 405
    assert not Message.objects.exists()
    assert Handoff.objects.get(pk=waiting.id).status == "open", "bad input changes nothing"


def test_with_no_secret_configured_the_helpdesk_api_is_shut(settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = ""
    handoff = Handoff.objects.create(conversation=Conversation.objects.create(), source="visitor")
    assert signed_post(handoff.id, {"text": "Hi"}, secret="").status_code == 403


def _waiting(visitor: str = "v") -> Handoff:
    return Handoff.objects.create(conversation=Conversation.objects.create(visitor_hash=visitor), source="visitor")


def test_a_signed_reply_replayed_to_another_request_is_refused_and_stores_nothing():
    first, second = _waiting("v1"), _waiting("v2")
    raw = json.dumps({"text": "Your refund is on its way", "author": "Kim", "message_id": "zd-1"}).encode()
    signature = signature_of(raw, path_of(first.id))
    assert signed_post(first.id, raw, signature=signature).status_code == 201

    # The same bytes and header, sent to another request's address.
    replayed = signed_post(second.id, raw, signature=signature)

    assert replayed.status_code == 403
    assert list(Message.objects.values_list("handoff_id", flat=True)) == [first.id]
    assert Handoff.objects.get(pk=second.id).status == "open"


def test_a_reply_is_refused_outside_its_five_minute_window_either_way():
    handoff = _waiting()
    raw = json.dumps({"text": "Hi", "author": "Kim", "message_id": "zd-2"}).encode()
    now = int(time.time())
    # The server reads its clock later than `now` (truncated, then a request
    # later on a loaded machine): just past the window ahead needs a margin.
    for t in (now - 301, now + 330, 0):
        response = signed_post(handoff.id, raw, signature=signature_of(raw, path_of(handoff.id), t=t))
        assert response.status_code == 403, t
        assert "5" in response.json()["error"] or "seconds" in response.json()["error"]
    assert not Message.objects.exists()
    # Within the window, a clock a few minutes off is fine.
    assert (
        signed_post(handoff.id, raw, signature=signature_of(raw, path_of(handoff.id), t=now - 290)).status_code == 201
    )


def test_the_signature_binds_the_method_and_the_path():
    handoff = _waiting()
    raw = json.dumps({"text": "Hi", "author": "Kim", "message_id": "zd-3"}).encode()
    path = path_of(handoff.id)
    assert signed_post(handoff.id, raw, signature=signature_of(raw, path, method="PUT")).status_code == 403
    assert signed_post(handoff.id, raw, signature=signature_of(raw, path + "/")).status_code == 403
    assert (
        signed_post(
            handoff.id, raw, signature=signature_of(raw, f"/api/handoffs/{handoff.id + 1}/messages")
        ).status_code
        == 403
    )
    assert not Message.objects.exists()
    # A sender rotating its secret may sign twice: one match is enough.
    t = int(time.time())
    old, new = (signature_of(raw, path, secret=k, t=t).split(",v1=")[1] for k in ("an old secret", SECRET))
    assert signed_post(handoff.id, raw, signature=f"t={t},v1={old},v1={new}").status_code == 201


def test_a_message_id_is_required_and_unique_across_all_requests():
    first, second = _waiting("v1"), _waiting("v2")
    for missing in ({"text": "Hi"}, {"text": "Hi", "message_id": ""}, {"text": "Hi", "message_id": "  "}):
        response = signed_post(first.id, missing)
        assert response.status_code == 400, missing
        assert "message_id" in response.json()["error"]
    for bad in ("zd\x00-1", "zd\n1", "x" * 201, True, 1.5, ["zd-1"], {"id": 1}, "\ud800"):
        assert signed_post(first.id, {"text": "Hi", "message_id": bad}).status_code == 400, bad
    assert not Message.objects.exists()

    stored = signed_post(first.id, {"text": "Hi", "author": "Kim", "message_id": "zd-7"})
    # The same helpdesk id, properly signed for another request: the first message, nothing stored.
    again = signed_post(second.id, {"text": "Something else", "author": "Eve", "message_id": "zd-7"})

    assert (again.status_code, again.json()) == (201, stored.json())
    assert list(Message.objects.values_list("handoff_id", "text")) == [(first.id, "Hi")]
    assert Handoff.objects.get(pk=second.id).status == "open"
    # Numbers, as helpdesks count their messages, are ids too.
    assert signed_post(second.id, {"text": "Hello", "message_id": 98121}).status_code == 201
    assert Message.objects.get(handoff=second).external_id == "98121"


def test_malformed_signatures_are_refused_with_400_not_500(caplog):
    handoff = _waiting()
    raw = json.dumps({"text": "Hi", "message_id": "zd-1"}).encode()
    good = signature_of(raw, path_of(handoff.id))
    for header in (
        "sha256=\xe9",  # not ASCII: hmac.compare_digest raised on it
        "t=\xe9,v1=" + "0" * 64,
        "t=abc,v1=" + "0" * 64,
        "t=1,v1=zz",
        "t=99999999999999999999,v1=" + "0" * 64,
        "v1=" + "0" * 64,
        good + "\u202e",
        "sha256=" + "0" * 63,
        "garbage",
    ):
        response = signed_post(handoff.id, raw, signature=header)
        assert response.status_code == 400, header
        assert "X-Kookee-Signature" in response.json()["error"]
    assert not Message.objects.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no traceback logged"


def test_malformed_bodies_and_ids_are_refused_with_400_not_500():
    handoff = _waiting()
    for raw in (b"[" * 60_000, b"\xff\xfe", b'{"text": "Hi", "message_id": "1", "author": "' + b"a" * 151 + b'"}'):
        assert signed_post(handoff.id, raw).status_code == 400, raw[:20]
    response = Client().post(
        path_of(handoff.id),
        b"{}",
        content_type="application/json",
        HTTP_X_KOOKEE_SIGNATURE="t=1,v1=" + "0" * 64,
        CONTENT_LENGTH="abc",
    )
    assert response.status_code == 400
    # A request id no database holds: there is no such request.
    huge = 99_999_999_999_999_999_999
    assert signed_post(huge, {"text": "Hi", "message_id": "zd-9"}).status_code == 404
    assert not Message.objects.exists()


def test_text_and_author_are_stored_as_the_socket_stores_them():
    # A lone surrogate (500 on both databases) and a NUL (500 on PostgreSQL)
    # are replaced, as in a visitor's message; the author loses its format
    # characters (a bidi override reversed the time beside it).
    handoff = _waiting()
    raw = b'{"text": "Hi \\ud800 there\\u0000!", "author": "Kim\\u202e\\u200bnimda \\ud800", "message_id": "zd-1"}'

    response = signed_post(handoff.id, raw)

    assert response.status_code == 201
    message = Message.objects.get()
    assert message.text == "Hi \ufffd there\ufffd!"
    assert message.author == "Kimnimda \ufffd"
    assert Handoff.objects.get().agent_name == "Kimnimda \ufffd"


def test_the_old_signature_is_refused_unless_the_deprecation_switch_is_on(settings, caplog):
    handoff = _waiting()
    raw = json.dumps({"text": "From an old integration", "author": "Kim"}).encode()  # no message_id, as then

    assert signed_post(handoff.id, raw, signature=legacy_signature_of(raw)).status_code == 403
    assert not Message.objects.exists()

    settings.KOOKEE_HANDOFF_REPLY_LEGACY_SIGNATURE = True
    with caplog.at_level(logging.WARNING, logger="kookee.replies"):
        response = signed_post(handoff.id, raw, signature=legacy_signature_of(raw))
    assert response.status_code == 201
    assert Message.objects.get().text == "From an old integration"
    assert any("deprecated" in r.getMessage() and str(handoff.id) in r.getMessage() for r in caplog.records)
    assert signed_post(handoff.id, raw, signature=legacy_signature_of(raw, "another secret")).status_code == 403
    # The new signature works beside it.
    assert signed_post(handoff.id, {"text": "New", "message_id": "zd-1"}).status_code == 201


def test_erasure_closes_the_request_and_refuses_later_replies():
    handoff = _waiting()
    body = {"text": "Your address is 1 Main St", "author": "Kim", "message_id": "zd-1"}
    raw = json.dumps(body).encode()
    signature = signature_of(raw, path_of(handoff.id))
    assert signed_post(handoff.id, raw, signature=signature).status_code == 201
    conversation = handoff.conversation

    erasure.erase_conversations([conversation.id], by="test")

    handoff.refresh_from_db()
    conversation.refresh_from_db()
    assert handoff.status == "closed" and handoff.closed_at is not None
    assert conversation.erased_at is not None
    # The recorded reply, replayed within its window, and a new one: refused, nothing stored.
    replayed = signed_post(handoff.id, raw, signature=signature)
    fresh = signed_post(handoff.id, {"text": "Anything else?", "message_id": "zd-2"})
    assert (replayed.status_code, fresh.status_code) == (409, 409)
    assert "erased" in fresh.json()["error"]
    assert list(Message.objects.values_list("text", flat=True)) == [""]
    # Nor from the admin: no reopening, no reply, no new request.
    user = agent()
    client = admin_client(user)
    client.post(reverse("admin:chat_handoff_move", args=[handoff.id]), {"move": "reopen"})
    client.post(reverse("admin:chat_handoff_reply", args=[handoff.id]), {"text": "Hello?"})
    client.post(reverse("admin:chat_handoff_answer", args=[conversation.id]))
    assert list(Handoff.objects.values_list("status", flat=True)) == ["closed"]
    assert list(Message.objects.values_list("text", flat=True)) == [""]
    page = client.get(reverse("admin:chat_conversation_change", args=[conversation.id])).content.decode()
    assert "Answer the visitor" not in page


# --- Support's page ------------------------------------------------------------------------------


def test_support_replies_and_notes_from_the_requests_page():
    user = agent()
    conversation = Conversation.objects.create(visitor_hash="v")
    Turn.objects.create(conversation=conversation, user_text="Where is my refund?", model="m", status="completed")
    handoff = Handoff.objects.create(conversation=conversation, source="visitor")
    client = admin_client(user)
    page = reverse("admin:chat_handoff_change", args=[handoff.id])

    response = client.post(reverse("admin:chat_handoff_reply", args=[handoff.id]), {"text": "On its way"}, follow=True)
    assert "Sent to the visitor." in [str(m) for m in response.context["messages"]]
    client.post(reverse("admin:chat_handoff_note", args=[handoff.id]), {"text": "Check Stripe <b>first</b>"})
    Message.objects.create(conversation=conversation, handoff=handoff, kind="visitor", text="Thanks!")

    html = client.get(page).content.decode()
    assert "Where is my refund?" in html and "On its way" in html and "Thanks!" in html
    assert "Check Stripe &lt;b&gt;first&lt;/b&gt;" in html, "escaped"
    assert 'id="kk-reply-text"' in html
    thread = client.get(reverse("admin:chat_handoff_thread", args=[handoff.id])).content.decode()
    assert thread.index("On its way") < thread.index("Thanks!")
    handoff.refresh_from_db()
    assert (handoff.status, handoff.claimed_by, handoff.agent_name) == ("claimed", user, "Ana Souza")
    # The queue counts what the visitor wrote since the last reply.
    listing = client.get(reverse("admin:chat_handoff_changelist")).content.decode()
    assert "1 new" in listing
    # An empty reply changes nothing.
    client.post(reverse("admin:chat_handoff_reply", args=[handoff.id]), {"text": "  "})
    assert Message.objects.filter(kind="agent").count() == 1


def test_support_answers_a_conversation_nobody_asked_a_person_in():
    user = agent()
    conversation = Conversation.objects.create(visitor_hash="v")
    client = admin_client(user)
    assert (
        "Answer the visitor"
        in client.get(reverse("admin:chat_conversation_change", args=[conversation.id])).content.decode()
    )

    response = client.post(reverse("admin:chat_handoff_answer", args=[conversation.id]))

    handoff = Handoff.objects.get()
    assert response["Location"].startswith(reverse("admin:chat_handoff_change", args=[handoff.id]))
    assert (handoff.source, handoff.status, handoff.claimed_by) == ("support", "claimed", user)


def test_finance_neither_replies_nor_reads_the_thread():
    finance = agent("fin", "Fin Ance", role="Finance")
    handoff = Handoff.objects.create(conversation=Conversation.objects.create(), source="visitor")
    client = admin_client(finance)
    assert client.post(reverse("admin:chat_handoff_reply", args=[handoff.id]), {"text": "x"}).status_code == 403
    assert client.post(reverse("admin:chat_handoff_note", args=[handoff.id]), {"text": "x"}).status_code == 403
    assert client.get(reverse("admin:chat_handoff_thread", args=[handoff.id])).status_code == 403
    assert not Message.objects.exists()


def test_erasure_erases_the_messages():
    conversation = Conversation.objects.create(visitor_hash="v")
    handoff = Handoff.objects.create(conversation=conversation, source="visitor", email="sam@example.com")
    replies.reply(handoff.id, "Your address is 1 Main St", author="Kim", external_id="zd-1")
    Message.objects.create(conversation=conversation, handoff=handoff, kind="visitor", text="I am Sam")

    erasure.erase_conversations([conversation.id], by="test")

    assert list(Message.objects.values_list("text", "external_id")) == [("", ""), ("", "")]
    assert all(m.erased_at for m in Message.objects.all())


def test_the_visitors_email_is_a_link_on_the_requests_page():
    user = agent()
    conversation = Conversation.objects.create()
    handoff = Handoff.objects.create(conversation=conversation, source="visitor", email="sam@example.com")
    page = admin_client(user).get(reverse("admin:chat_handoff_change", args=[handoff.id])).content.decode()
    assert '<a href="mailto:sam@example.com">sam@example.com</a>' in page


# --- the documented signers, against a real server ----------------------------------------------------


def _documented_signer(language: str) -> str:
    """The code block after "Signing, in Python:" or "and in Node", in docs/operations.md."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    fence = {"python": "```python\n", "node": "```js\n"}[language]
    start = doc.index(fence, doc.index("Signing, in Python:")) + len(fence)
    return doc[start : doc.index("```", start)]


@pytest.mark.slow
def test_the_documented_python_and_node_signers_are_accepted(tmp_path):
    import subprocess
    import sys

    from tests.servers import ROOT, daphne

    secret = "documented-secret"
    with daphne(tmp_path, KOOKEE_HANDOFF_WEBHOOK_SECRET=secret) as (address, database, _process):
        made = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "shell",
                "-v",
                "0",
                "-c",
                "from chat.models import Conversation, Handoff; "
                "print(Handoff.objects.create(conversation=Conversation.objects.create(visitor_hash='v'), "
                "source='visitor').id)",
            ],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": f"sqlite:///{database}"},
            capture_output=True,
            text=True,
            check=True,
        )
        handoff_id = int(made.stdout.strip())
        base = f"http://{address}"
        python = _documented_signer("python") + (
            f"print(json.dumps(send_reply({base!r}, {secret!r}, {handoff_id}, 'From Python', 'Kim', 'py-1')))"
        )
        by_python = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True, timeout=30)
        assert by_python.returncode == 0, by_python.stderr
        node = _documented_signer("node") + (
            f"sendReply({json.dumps(base)}, {json.dumps(secret)}, {handoff_id}, 'From Node', 'Kim', 'js-1')"
            ".then((answer) => console.log(JSON.stringify(answer)));"
        )
        by_node = subprocess.run(["node", "-e", node], capture_output=True, text=True, timeout=30)
        assert by_node.returncode == 0, by_node.stderr
        stored = sqlite3.connect(database).execute("select id, text from chat_message order by id").fetchall()

    assert [json.loads(by_python.stdout)["id"], json.loads(by_node.stdout)["id"]] == [i for i, _ in stored]
    assert [text for _, text in stored] == ["From Python", "From Node"]

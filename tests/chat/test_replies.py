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
import re

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
from tests.chat import test_handoffs as handoff_tests
from tests.chat.test_handoffs import Receiver, ask_for_a_person, notified
from tests.provider import answer

pytestmark = pytest.mark.django_db(transaction=True)

# The visitors, the webhook's receiver and the notifications' bookkeeping of the handoff tests.
visitors = handoff_tests.visitors
chat = handoff_tests.chat
receiver = handoff_tests.receiver
handoff_settings = handoff_tests.handoff_settings
no_notification_left_behind = handoff_tests.no_notification_left_behind

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


def signed_post(handoff_id: int, body: dict | bytes, secret: str = SECRET, signature: str | None = None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {}
    if signature is None:
        signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    if signature:
        headers["HTTP_X_KOOKEE_SIGNATURE"] = signature
    return Client().post(f"/api/handoffs/{handoff_id}/messages", raw, content_type="application/json", **headers)


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
    good = replies.link(conversation).split("/conversation/")[1].rstrip("/")
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

"""Handoff to a person (chat/support/handoffs.py): the visitor's `handoff`
frame, the request in the history frame, the model's request_human tool
(scripted, and the offline model's), one pending request per conversation,
the per-network cap, and the notices a lost process never finished.

Support told by email: test_handoff_email.py; by the webhook:
test_handoff_webhook.py. What erasure and retention leave of a request:
test_erasure.py."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.utils import timezone

from chat.engine import offline, records
from chat.engine.consumers import CLOSE_REFUSED
from chat.models import Conversation, Handoff, ToolCall, Turn
from chat.support import handoffs
from chat.visitors import embed
from chat.visitors.identity import Visitor, hash_key
from chat.visitors.limits import LimitReached
from tests.chat.chat_client import ChatClient, new_session_key
from tests.chat.support import handoff_helpers as helpers
from tests.chat.support.handoff_helpers import (
    HANG,
    HUMAN,
    VISITOR,
    address,
    ask_for_a_person,
    count,
    history,
    notified,
    stored,
)
from tests.provider import WaitFor, answer, text, tool_round

pytestmark = pytest.mark.django_db(transaction=True)

# The handoff tests' fixtures (handoff_helpers.py), two of them autouse.
handoff_settings = helpers.handoff_settings
no_notification_left_behind = helpers.no_notification_left_behind
visitors, chat, receiver = helpers.visitors, helpers.chat, helpers.receiver


# --- the visitor's "Talk to a person" ---------------------------------------------------------


async def test_a_visitor_asks_for_a_person_after_a_question(chat, use_provider):
    use_provider.queue(answer("I'm not sure."))
    turn_id = await chat.ask("Why was I charged twice?")
    await chat.finish(turn_id)

    saved = await ask_for_a_person(chat, reason="  I was   charged\ntwice ", email=" sam@example.com ")

    [handoff] = await stored()
    assert saved == {"type": "handoff.saved", "handoff_id": handoff.id, "status": "open", "email": True, "agent": None}
    assert (handoff.source, handoff.status, handoff.reason, handoff.email) == (
        "visitor",
        "open",
        "I was charged twice",
        "sam@example.com",
    )
    assert handoff.turn_id == turn_id
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    assert handoff.conversation_id == turn.conversation_id
    assert await chat.communicator.receive_nothing(timeout=0.1)


async def test_a_handoff_before_any_question_starts_the_conversation(chat, use_provider):
    saved = await ask_for_a_person(chat)

    [handoff] = await stored()
    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert saved == {"type": "handoff.saved", "handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.conversation_id, handoff.turn_id, handoff.reason, handoff.email) == (conversation.id, None, "", "")
    assert conversation.visitor_hash
    # The visitor's first question then joins that conversation.
    use_provider.queue(answer("Someone will be with you."))
    turn_id = await chat.ask("Hello?")
    await chat.finish(turn_id)
    assert (await database_sync_to_async(Turn.objects.get)(pk=turn_id)).conversation_id == conversation.id
    assert await count(Conversation) == 1


async def test_asking_again_adds_to_the_pending_request(chat, mailoutbox):
    first = await ask_for_a_person(chat, reason="My invoice is wrong.")
    again = await ask_for_a_person(chat, reason="It says 12 seats.", email="sam@example.com")
    repeated = await ask_for_a_person(chat, reason="It says 12 seats.")
    await notified()

    [handoff] = await stored()
    assert first["handoff_id"] == again["handoff_id"] == repeated["handoff_id"] == handoff.id
    assert (first["email"], again["email"], repeated["email"]) == (False, True, True)
    assert handoff.reason == "My invoice is wrong.\nIt says 12 seats."
    assert handoff.email == "sam@example.com"
    assert len(mailoutbox) == 1, "Support is told once, of the new request"


async def test_two_tabs_share_one_request(visitors):
    key = await new_session_key()
    first, second = await visitors(session_key=key), await visitors(session_key=key)

    one = await ask_for_a_person(first, reason="Billing.")
    other = await ask_for_a_person(second, email="sam@example.com")

    assert one["handoff_id"] == other["handoff_id"]
    assert await count(Conversation) == 1
    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("Billing.", "sam@example.com")


async def test_a_closed_request_makes_way_for_a_new_one(chat, mailoutbox):
    first = await ask_for_a_person(chat, reason="First time.")
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(status="closed")

    second = await ask_for_a_person(chat, reason="Again.")
    await notified()

    assert second["handoff_id"] != first["handoff_id"]
    assert [(h.status, h.reason) for h in await stored()] == [("closed", "First time."), ("open", "Again.")]
    assert len({h.conversation_id for h in await stored()}) == 1
    assert len(mailoutbox) == 2


async def test_a_claimed_request_is_still_the_pending_one(chat):
    first = await ask_for_a_person(chat, reason="Refund.")
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(
        status="claimed", agent_name="Ana"
    )

    again = await ask_for_a_person(chat, email="sam@example.com")

    assert again == {
        "type": "handoff.saved",
        "handoff_id": first["handoff_id"],
        "status": "claimed",
        "email": True,
        "agent": "Ana",
    }
    assert await count(Handoff) == 1


async def test_a_handoff_is_taken_while_an_answer_streams(chat, use_provider):
    release = asyncio.Event()
    use_provider.queue([text("Thinking"), WaitFor(release), *answer(" done.")[1:]])
    turn_id = await chat.ask("Is there a phone number?")
    await chat.receive_until("delta", turn_id=turn_id)

    saved = await ask_for_a_person(chat, reason="No phone number found.")

    assert saved["status"] == "open"
    release.set()
    await chat.finish(turn_id)
    assert (await stored())[0].turn_id == turn_id


@pytest.mark.parametrize(
    "fields",
    [
        {"reason": 42},
        {"reason": ["help"]},
        {"reason": {"text": "help"}},
        {"reason": "x" * 501},
        {"email": 42},
        {"email": True},
        {"email": ["sam@example.com"]},
        {"email": "not an email"},
        {"email": "sam@"},
        {"email": "@example.com"},
        {"email": "sam@example.com\nBcc: eve@example.com"},
        # A valid address, past what the column (and the page's input) holds.
        {"email": address(255)},
    ],
)
async def test_a_malformed_request_is_refused_and_stores_nothing(chat, fields, mailoutbox):
    await chat.send({"type": "handoff", **fields})

    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "bad_handoff")
    assert frame["message"]
    assert await count(Handoff) == 0
    assert await count(Conversation) == 0
    assert not handoffs.tasks
    assert mailoutbox == []
    # The socket is still good.
    assert (await ask_for_a_person(chat))["status"] == "open"


async def test_the_longest_reason_and_address_are_taken(chat):
    longest_email = address(254)

    await ask_for_a_person(chat, reason="x" * 500, email=longest_email)

    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("x" * 500, longest_email)


async def test_null_fields_are_empty(chat):
    saved = await ask_for_a_person(chat, reason=None, email=None)

    assert saved["email"] is False
    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("", "")


async def test_a_visitor_who_started_over_elsewhere_is_refused(visitors):
    key = await new_session_key()
    first, second = await visitors(session_key=key), await visitors(session_key=key)
    await ask_for_a_person(first, reason="Please call me.")
    await first.send({"type": "forget"})
    assert await first.refusal() == CLOSE_REFUSED

    await second.send({"type": "handoff", "reason": "Me again."})

    assert await second.refusal() == CLOSE_REFUSED
    [handoff] = await stored()
    assert handoff.reason == "Please call me."


async def test_the_widget_page_is_the_requests_source(visitors, settings, mailoutbox, receiver):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    widget = await visitors(token=embed.new_token(), page="https://www.example.com/pricing?coupon=SECRET#x")

    await ask_for_a_person(widget, reason="Which plan?")
    await notified()

    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert conversation.source_url == "https://www.example.com/pricing"
    assert receiver.requests[0].json["handoff"]["conversation"]["source_url"] == "https://www.example.com/pricing"
    assert "From: https://www.example.com/pricing\n" in mailoutbox[0].body


# --- the history frame ------------------------------------------------------------------------


async def test_history_carries_the_pending_request(chat):
    assert (await history(chat))["handoff"] is None

    saved = await ask_for_a_person(chat, email="sam@example.com")
    assert (await history(chat))["handoff"] == {
        "handoff_id": saved["handoff_id"],
        "status": "open",
        "email": True,
        "agent": None,
    }

    await database_sync_to_async(Handoff.objects.filter(pk=saved["handoff_id"]).update)(status="claimed")
    assert (await history(chat))["handoff"]["status"] == "claimed"

    await database_sync_to_async(Handoff.objects.filter(pk=saved["handoff_id"]).update)(status="closed")
    assert (await history(chat))["handoff"] is None


async def test_history_never_carries_the_address(chat):
    await ask_for_a_person(chat, email="sam@example.com")

    assert "sam@example.com" not in json.dumps(await history(chat))


async def test_a_new_tab_sees_the_request(visitors):
    key = await new_session_key()
    saved = await ask_for_a_person(await visitors(session_key=key))

    later = await visitors(session_key=key)

    assert (await history(later))["handoff"]["handoff_id"] == saved["handoff_id"]


async def test_another_visitor_does_not_see_the_request(visitors):
    await ask_for_a_person(await visitors(), reason="Mine.")

    assert (await history(await visitors()))["handoff"] is None


# --- the model's request_human ----------------------------------------------------------------


async def test_the_model_hands_over_during_a_turn(chat, use_provider, mailoutbox):
    use_provider.queue(tool_round([HUMAN], narration="Let me get a person."), answer("A person will reply."))

    turn_id = await chat.ask("I want my money back")
    ended = await chat.finish(turn_id)
    await notified()

    [handoff] = await stored()
    assert ended["status"] == "completed"
    assert ended["handoff"] == {"handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.source, handoff.turn_id, handoff.reason) == (
        "assistant",
        turn_id,
        "The visitor wants a refund for a double charge.",
    )
    # The model is told it worked, with what to tell the visitor.
    tool_message = use_provider.requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool"
    result = json.loads(tool_message["content"])
    assert (result["requested"], result["handoff_id"], result["status"]) == (True, handoff.id, "open")
    assert "email" in result["note"]
    [call] = await database_sync_to_async(list)(ToolCall.objects.filter(generation__turn_id=turn_id))
    assert (call.name, call.error) == ("request_human", "")
    assert mailoutbox[0].subject == f"Kookee chat: a visitor asks for a person (#{handoff.id})"
    assert mailoutbox[0].body.startswith("The assistant handed a conversation over to a person.\n")
    assert mailoutbox[0].body.endswith("\nLast question:\n> I want my money back")


async def test_a_turn_without_request_human_has_no_handoff_in_its_end(chat, use_provider):
    use_provider.queue(answer("Open Boards and press New."))

    turn_id = await chat.ask("How do I add a board?")

    assert "handoff" not in await chat.finish(turn_id)
    assert await count(Handoff) == 0


async def test_a_turn_rebuilt_from_storage_ends_as_it_did_live(chat, use_provider):
    # A tab that did not hear the end from the turn's own process (it died)
    # gets the frame rebuilt from the database: the same, request included.
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))
    turn_id = await chat.ask("Refund, please")
    ended = await chat.finish(turn_id)

    rebuilt = await database_sync_to_async(records.ended_frame)(turn_id)

    assert "handoff" in ended
    assert rebuilt == ended


async def test_the_visitor_adds_an_email_to_the_models_request(chat, use_provider):
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))
    turn_id = await chat.ask("Refund, please")
    ended = await chat.finish(turn_id)

    saved = await ask_for_a_person(chat, email="sam@example.com")

    assert saved == {**ended["handoff"], "type": "handoff.saved", "email": True}
    [handoff] = await stored()
    assert (handoff.source, handoff.email) == ("assistant", "sam@example.com")


async def test_request_human_adds_to_the_visitors_pending_request(chat, use_provider, mailoutbox):
    saved = await ask_for_a_person(chat, reason="Billing question.")
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))

    turn_id = await chat.ask("Still there?")
    ended = await chat.finish(turn_id)
    await notified()

    assert ended["handoff"]["handoff_id"] == saved["handoff_id"]
    [handoff] = await stored()
    assert (handoff.source, handoff.reason) == (
        "visitor",
        "Billing question.\nThe visitor wants a refund for a double charge.",
    )
    assert len(mailoutbox) == 1


async def test_request_human_with_a_bad_reason_is_an_error_result(chat, use_provider):
    use_provider.queue(tool_round([("call_h", "request_human", {"reason": 42})]), answer("Sorry."))

    turn_id = await chat.ask("A person, please")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed" and "handoff" not in ended
    assert "error" in json.loads(use_provider.requests[1].body["messages"][-1]["content"])
    assert await count(Handoff) == 0


# --- the offline model ------------------------------------------------------------------------


@pytest.fixture
async def offline_chat(settings, visitors):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND = 5000
    settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS = 0
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    return await visitors()


@pytest.mark.parametrize(
    ("question", "handed_over"),
    [
        ("I want to talk to a person", offline.SAID["en"]["handed_over"]),
        ("falar com um atendente", offline.SAID["pt"]["handed_over"]),
    ],
)
async def test_the_offline_model_hands_over_when_asked(offline_chat, question, handed_over):
    turn_id = await offline_chat.ask(question)
    ended = await offline_chat.finish(turn_id)

    [handoff] = await stored()
    assert ended["handoff"] == {"handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.source, handoff.reason, handoff.turn_id) == ("assistant", question, turn_id)
    assert offline_chat.text_of(turn_id).endswith(handed_over)


async def test_the_offline_model_offers_a_person_then_hands_over_on_yes(offline_chat):
    unanswered = await offline_chat.ask("Can I pay with bitcoin?")
    ended = await offline_chat.finish(unanswered)
    assert "handoff" not in ended
    assert offline_chat.text_of(unanswered).endswith(offline.OFFER["en"])
    assert await count(Handoff) == 0

    yes = await offline_chat.ask("yes please")
    ended = await offline_chat.finish(yes)

    [handoff] = await stored()
    assert ended["handoff"]["handoff_id"] == handoff.id
    # The reason is what the help center could not answer, not "yes".
    assert (handoff.reason, handoff.turn_id) == ("Can I pay with bitcoin?", yes)


async def test_the_offline_model_takes_yes_without_an_offer_as_no_request(offline_chat):
    turn_id = await offline_chat.ask("How do I export data?")
    await offline_chat.finish(turn_id)

    ended = await offline_chat.finish(await offline_chat.ask("yes"))

    assert "handoff" not in ended
    assert await count(Handoff) == 0


# --- the cap per network ----------------------------------------------------------------------


async def refused_for_rate(chat: ChatClient) -> dict:
    await chat.send({"type": "handoff", "reason": "One more."})
    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "handoff_rate_limited")
    assert "network" in frame["message"]
    assert await chat.communicator.receive_nothing(timeout=0.1)
    return frame


async def test_a_network_may_ask_so_many_times_an_hour(visitors, settings, mailoutbox):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 2
    for _ in range(2):
        await ask_for_a_person(await visitors(address="203.0.113.7"))
    # A new cookie from the same network, and an IPv4-mapped form of its address.
    over = await visitors(address="203.0.113.7")
    mapped = await visitors(address="::ffff:203.0.113.7")

    await refused_for_rate(over)
    await refused_for_rate(mapped)
    await notified()

    assert await count(Handoff) == 2
    assert await count(Conversation) == 2, "a refused request starts no conversation"
    assert len(mailoutbox) == 2
    # Another network is not affected.
    assert (await ask_for_a_person(await visitors(address="198.51.100.9")))["status"] == "open"


async def test_an_ipv6_network_is_capped_as_one(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await ask_for_a_person(await visitors(address="2001:db8:1:2::1"))

    await refused_for_rate(await visitors(address="2001:db8:1:2:ffff::9"))
    assert (await ask_for_a_person(await visitors(address="2001:db8:1:3::1")))["status"] == "open"


async def test_closed_requests_count_and_older_ones_do_not(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    first = await ask_for_a_person(await visitors(address="203.0.113.7"))
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(status="closed")
    late = await visitors(address="203.0.113.7")
    await refused_for_rate(late)

    an_hour_ago = timezone.now() - timedelta(minutes=61)
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(created_at=an_hour_ago)

    assert (await ask_for_a_person(late))["status"] == "open"


async def test_adding_to_a_pending_request_is_not_capped(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    chat = await visitors(address="203.0.113.7")
    await ask_for_a_person(chat, reason="Refund.")

    again = await ask_for_a_person(chat, email="sam@example.com")

    assert again["email"] is True
    assert (await stored())[0].email == "sam@example.com"


async def test_the_cap_holds_for_the_models_requests(visitors, use_provider, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await ask_for_a_person(await visitors(address="203.0.113.7"))
    chat = await visitors(address="203.0.113.7")
    use_provider.queue(tool_round([HUMAN]), answer("I could not reach anyone."))

    turn_id = await chat.ask("A person, please")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed" and "handoff" not in ended
    result = json.loads(use_provider.requests[1].body["messages"][-1]["content"])
    assert "handoff_rate_limited" in result["error"]
    [handoff] = await stored()
    assert handoff.source == "visitor"


async def test_the_service_raises_the_limit(settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await handoffs.request_by_visitor(VISITOR, None, "", "")
    other = Visitor.of(hash_key("another-key"), "203.0.113.7")

    with pytest.raises(LimitReached) as refused:
        await handoffs.request_by_visitor(other, None, "", "")

    assert refused.value.code == "handoff_rate_limited"
    assert await count(Handoff) == 1


# --- notices a process did not finish ----------------------------------------------------------


def a_pending_request(claimed_minutes_ago: float | None, **fields) -> Handoff:
    conversation = Conversation.objects.create(visitor_hash="someone")
    claimed = None if claimed_minutes_ago is None else timezone.now() - timedelta(minutes=claimed_minutes_ago)
    return Handoff.objects.create(
        conversation=conversation,
        source=Handoff.Source.VISITOR,
        reason="Lost with its process",
        email_status=Handoff.Delivery.PENDING,
        notice_claimed_at=claimed,
        **fields,
    )


@pytest.mark.django_db(transaction=True)
async def test_a_notice_its_process_never_finished_is_sent_again_once(mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(claimed_minutes_ago=10)
    await database_sync_to_async(a_pending_request)(claimed_minutes_ago=1)  # still being sent elsewhere

    assert await handoffs.resend_lost() == 1
    await notified()
    assert await handoffs.resend_lost() == 0  # sent: nothing pending any more

    assert [m.subject for m in mailoutbox] == [f"Kookee chat: a visitor asks for a person (#{lost.id})"]
    lost = await database_sync_to_async(Handoff.objects.get)(pk=lost.pk)
    assert lost.email_status == Handoff.Delivery.SENT


@pytest.mark.django_db(transaction=True)
async def test_two_processes_never_both_send_a_notice(mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(claimed_minutes_ago=10)

    first = await database_sync_to_async(handoffs._claimed_notice)(lost.id)
    second = await database_sync_to_async(handoffs._claimed_notice)(lost.id)

    assert first is not None and first["id"] == lost.id
    assert second is None


@pytest.mark.django_db(transaction=True)
async def test_only_what_is_still_pending_is_sent_again(receiver, mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(
        claimed_minutes_ago=10, webhook_status=Handoff.Delivery.PENDING
    )
    await database_sync_to_async(Handoff.objects.filter(pk=lost.pk).update)(email_status=Handoff.Delivery.SENT)

    await handoffs.resend_lost()
    await notified()

    assert mailoutbox == []  # the email had gone
    assert len(receiver.requests) == 1


@pytest.mark.django_db(transaction=True)
async def test_shutdown_waits_a_moment_for_notices_then_leaves_them_to_the_sweeper(receiver, monkeypatch):
    monkeypatch.setattr(handoffs, "SHUTDOWN_WAIT_SECONDS", 0.2)
    receiver.replies = [HANG]
    request = await database_sync_to_async(a_pending_request)(
        claimed_minutes_ago=None, webhook_status=Handoff.Delivery.PENDING
    )
    handoffs.notify_soon(request.id)
    await receiver.wait_for(1)

    async with asyncio.timeout(2):
        await handoffs.drain()  # bounded, though the receiver hangs

    stored = await database_sync_to_async(Handoff.objects.get)(pk=request.pk)
    assert stored.webhook_status == Handoff.Delivery.PENDING and stored.notice_claimed_at is not None
    receiver.release.set()

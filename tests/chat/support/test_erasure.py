"""Erasure at the visitor's request: the conversation admin's action (for
holders of chat.erase_turn only, after a confirmation page) and
`manage.py erase_conversation`. What the visitor and the model wrote goes,
and the visitor's key with it; the numbers and the ledger stay.

Then retention (`manage.py purge_expired`): what is kept no longer than it
must be. Last, what erasure and retention leave of a request for a person."""

import io
import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, Permission
from django.contrib.messages import get_messages
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.db import models
from django.test import Client
from django.utils import timezone

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.admin.conversations import ERASED_MESSAGE
from chat.models import Action, ActionCall, Conversation, Feedback, Generation, Handoff, RevokedKey, ToolCall, Turn
from chat.roles import ensure_roles
from chat.support import erasure
from chat.visitors.identity import hash_key
from chat.vocabulary import SEARCH_TOOL
from tests.chat.chat_client import ChatClient
from tests.provider import HTTPError, tool_round

ROOT = Path(__file__).resolve().parent.parent.parent.parent

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/chat/conversation/"
VISITOR_HASH = hash_key("a-visitor-key")
ERASED_NOTE = "at the visitor's request"


def make_conversation(visitor_hash: str = VISITOR_HASH, *, status: str = "completed") -> Conversation:
    conversation = Conversation.objects.create(visitor_hash=visitor_hash)
    for number in (1, 2):
        turn = Turn.objects.create(
            conversation=conversation,
            status=status if number == 2 else "completed",
            user_text=f"My order number is SECRET-{number}",
            assistant_text=f"Looking up SECRET-{number}",
            # As a provider's refusal is kept for Support: quoting the visitor.
            error=f"BadRequestError: Error code: 400 - Invalid content: 'SECRET-{number}'",
            model="gpt-4o-mini",
            client_address="203.0.113.7",
            client_network="203.0.113.7/32",
        )
        now = timezone.now()
        generation = Generation.objects.create(turn=turn, round=1, started_at=now, ended_at=now, input_tokens=50)
        ToolCall.objects.create(
            generation=generation,
            call_id="call_1",
            name="search_help_center",
            arguments='{"query": "SECRET order"}',
            result='{"articles": ["SECRET"]}',
            error="SECRET error",
        )
        # An action's call: its tool call, and its record.
        action, _ = Action.objects.get_or_create(name="getOrder", defaults={"title": "Looking up your order"})
        ToolCall.objects.create(generation=generation, call_id="c2", name="getOrder", arguments='{"order_id": "S-1"}')
        ActionCall.objects.create(
            turn=turn,
            action=action,
            call_id="k1",
            arguments={"order_id": f"SECRET-{number}", "customer_id": "(verified id)"},
            outcome="refused",
            detail=f"'SECRET-{number}' is not of type 'integer'",
            started_at=now,
        )
        if turn.status != "streaming":
            bill_once(turn.id, model="gpt-4o-mini", input_tokens=50 * number, output_tokens=7, estimated=False)
            Feedback.objects.create(turn=turn, rating="down", comment=f"Call me on SECRET-{number}")
    return conversation


@pytest.fixture
def conversation() -> Conversation:
    return make_conversation()


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", None)


@pytest.fixture
def root_client(client, root) -> Client:
    client.force_login(root)
    return client


@pytest.fixture
def support(django_user_model):
    ensure_roles()
    user = django_user_model.objects.create_user(username="sam", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    return user


def ledger(conversation: Conversation) -> list[dict]:
    return list(LedgerEntry.objects.filter(turn__conversation=conversation).order_by("id").values())


def erase(client: Client, *conversations: Conversation, confirmed: bool = True):
    form = {"action": "erase_visitors_text", "_selected_action": [c.pk for c in conversations]}
    return client.post(CHANGELIST, {**form, "post": "yes"} if confirmed else form)


def assert_erased(conversation: Conversation) -> None:
    turns = Turn.objects.filter(conversation=conversation)
    assert [(t.user_text, t.assistant_text, t.error) for t in turns] == [("", "", "")] * 2
    assert all(t.erased_at is not None for t in turns)
    assert [(t.client_address, t.client_network) for t in turns] == [(None, "")] * 2
    calls = ToolCall.objects.filter(generation__turn__conversation=conversation)
    assert [(c.call_id, c.arguments, c.result, c.error) for c in calls] == [("", "", "", "")] * 4
    # Which of our tools or the customer's actions was called stays.
    assert sorted(c.name for c in calls) == ["getOrder", "getOrder", "search_help_center", "search_help_center"]
    action_calls = ActionCall.objects.filter(turn__conversation=conversation)
    assert [(c.arguments, c.detail, c.outcome) for c in action_calls] == [({}, "", "refused")] * 2
    ratings = Feedback.objects.filter(turn__conversation=conversation)
    assert [(f.rating, f.comment) for f in ratings] == [("down", "")] * ratings.count()  # the verdict stays
    conversation.refresh_from_db()
    assert conversation.visitor_hash == ""


def assert_untouched(conversation: Conversation) -> None:
    turns = Turn.objects.filter(conversation=conversation).order_by("id")
    assert [t.user_text for t in turns] == ["My order number is SECRET-1", "My order number is SECRET-2"]
    assert all(t.erased_at is None and t.client_address == "203.0.113.7" for t in turns)
    assert not ToolCall.objects.filter(generation__turn__conversation=conversation, arguments="").exists()
    assert not ActionCall.objects.filter(turn__conversation=conversation, arguments={}).exists()
    visitor_hash = conversation.visitor_hash
    conversation.refresh_from_db()
    assert conversation.visitor_hash == visitor_hash != ""
    assert not RevokedKey.objects.filter(visitor_hash=visitor_hash).exists()


# --- the admin action ----------------------------------------------------------------------


def test_the_action_asks_for_confirmation_first(root_client, conversation):
    response = erase(root_client, conversation, confirmed=False)

    assert response.status_code == 200
    assert response.templates[0].name == "admin/chat/conversation/erase_confirmation.html"
    page = response.content.decode()
    assert str(conversation) in page
    assert f'name="_selected_action" value="{conversation.pk}"' in page
    assert 'name="post" value="yes"' in page
    assert_untouched(conversation)


def test_erasing_from_the_admin(root_client, root, conversation):
    other = make_conversation(hash_key("another-visitor"))
    before = ledger(conversation)

    response = erase(root_client, conversation)

    assert response.status_code == 302
    assert_erased(conversation)
    assert ledger(conversation) == before  # same tokens, same cost
    assert sum(entry["cost"] for entry in before) > Decimal(0)
    assert list(RevokedKey.objects.values_list("visitor_hash", flat=True)) == [VISITOR_HASH]
    [entry] = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (root, CHANGE, str(conversation.pk))
    assert entry.change_message == ERASED_MESSAGE
    assert "SECRET" not in entry.object_repr
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Erased the visitors' text in 1 conversation."]
    assert_untouched(other)


def test_erasing_several_conversations_logs_each(root_client):
    conversations = [make_conversation(hash_key(f"visitor-{n}")) for n in range(3)]

    erase(root_client, *conversations)

    for conversation in conversations:
        assert_erased(conversation)
    assert sorted(LogEntry.objects.values_list("object_id", flat=True)) == sorted(str(c.pk) for c in conversations)
    assert RevokedKey.objects.count() == 3


def test_erasing_is_refused_while_a_turn_streams(root_client, conversation):
    streaming = make_conversation(hash_key("still-typing"), status="streaming")

    response = erase(root_client, conversation, streaming)

    assert response.status_code == 302
    assert_untouched(conversation)
    assert not LogEntry.objects.exists()
    [message] = get_messages(response.wsgi_request)
    assert message.level_tag == "error"
    assert "still running" in str(message)


def test_the_transcript_and_the_turn_pages_say_a_turn_was_erased(root_client, conversation):
    erase(root_client, conversation)
    turn = conversation.turns.first()
    day = timezone.localdate(Turn.objects.get(pk=turn.pk).erased_at).isoformat()

    transcript = root_client.get(f"/admin/chat/conversation/{conversation.pk}/change/").content.decode()
    turn_page = root_client.get(f"/admin/chat/turn/{turn.pk}/change/").content.decode()
    turn_list = root_client.get("/admin/chat/turn/").content.decode()

    assert transcript.count(f"Erased on {day} {ERASED_NOTE}") == 4  # visitor and assistant, two turns
    assert "arguments and result erased" in transcript
    assert turn_page.count(f"Erased on {day} {ERASED_NOTE}") == 2
    assert "(erased)" in turn_list
    for page in (transcript, turn_page, turn_list):
        assert "SECRET" not in page


def test_erasing_blanks_the_tool_names_and_call_ids_the_model_wrote(root_client, conversation):
    generation = Generation.objects.filter(turn__conversation=conversation).first()
    ToolCall.objects.create(generation=generation, call_id="call_SECRET-9", name="look_up_SECRET-9")

    erase(root_client, conversation)

    calls = ToolCall.objects.filter(generation__turn__conversation=conversation).order_by("id")
    assert [(c.name, c.call_id) for c in calls] == [
        ("search_help_center", ""),
        ("getOrder", ""),  # an action's name is the customer's, not the model's words
        ("search_help_center", ""),
        ("getOrder", ""),
        ("", ""),  # a name the model made up is its words, not ours
    ]


# --- a provider's refusal that quotes the visitor --------------------------------------------

SECRET = "ABC123"
QUESTION = f"my secret question {SECRET}"
QUOTING = {"error": {"message": f"Invalid content: '{QUESTION}'", "type": "invalid_request_error"}}


def stored_with(text: str) -> set[str]:
    """Every model field (Model.field) that holds this text in some row."""
    found = set()
    for model in apps.get_models():
        if model._meta.proxy:
            continue
        for field in model._meta.concrete_fields:
            if isinstance(field, models.JSONField):
                values = model.objects.values_list(field.attname, flat=True)
                hit = any(text in json.dumps(value) for value in values)
            elif isinstance(field, (models.CharField, models.TextField)):
                hit = model.objects.filter(**{f"{field.attname}__contains": text}).exists()
            else:
                continue
            if hit:
                found.add(f"{model.__name__}.{field.name}")
    return found


@pytest.mark.django_db(transaction=True)
async def test_erasure_leaves_nothing_of_a_provider_refusal_that_quotes_the_visitor(use_provider, settings):
    settings.KOOKEE_PROVIDER_RETRIES = 1
    settings.KOOKEE_PROVIDER_BACKOFF_SECONDS = 0.01
    use_provider.queue(
        tool_round([(f"call_{SECRET}", SEARCH_TOOL, {"query": QUESTION}), (f"call_2_{SECRET}", SECRET, {})]),
        [HTTPError(503, QUOTING)],
        [HTTPError(400, QUOTING)],
    )
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask(QUESTION)
        assert (await chat.receive_until("error"))["code"] == "provider_rejected"
        await chat.finish(turn_id)
    finally:
        await chat.close()
    turn = await Turn.objects.aget(pk=turn_id)
    before = await database_sync_to_async(stored_with)(SECRET)
    assert {"Turn.user_text", "Turn.error", "ToolCall.call_id", "ToolCall.name", "Search.query"} <= before

    await database_sync_to_async(erasure.erase_conversations)([turn.conversation_id], by="test")

    assert await database_sync_to_async(stored_with)(SECRET) == set()


# --- who may erase ---------------------------------------------------------------------------


def test_support_is_not_offered_the_action(client, support, conversation):
    client.force_login(support)

    page = client.get(CHANGELIST)

    assert page.status_code == 200
    assert "erase_visitors_text" not in page.content.decode()
    choices = page.context["action_form"].fields["action"].choices if page.context["action_form"] else []
    assert "erase_visitors_text" not in dict(choices)


@pytest.mark.parametrize("confirmed", [False, True])
def test_a_forged_erase_from_support_is_refused(client, support, conversation, confirmed):
    client.force_login(support)

    response = erase(client, conversation, confirmed=confirmed)

    assert response.status_code == 200  # Support has no actions: the post shows the list again
    assert_untouched(conversation)
    assert not LogEntry.objects.exists()


def test_the_action_itself_refuses_without_the_permission(rf, support, conversation):
    request = rf.post(CHANGELIST, {"post": "yes"})
    request.user = support

    with pytest.raises(PermissionDenied):
        admin.site._registry[Conversation].erase_visitors_text(request, Conversation.objects.all())

    assert_untouched(conversation)


def test_the_permission_alone_grants_the_action(client, support, conversation):
    support.user_permissions.add(Permission.objects.get(content_type__app_label="chat", codename="erase_turn"))
    client.force_login(support)

    assert "erase_visitors_text" in client.get(CHANGELIST).content.decode()
    erase(client, conversation)

    assert_erased(conversation)


# --- manage.py erase_conversation --------------------------------------------------------------


def test_the_command_erases_by_public_id(conversation, caplog):
    other = make_conversation(hash_key("another-visitor"))
    before = ledger(conversation)
    caplog.set_level(logging.INFO, logger="kookee.privacy")
    logging.getLogger("kookee.privacy").addHandler(caplog.handler)  # "kookee" does not propagate

    try:
        call_command("erase_conversation", str(conversation.public_id), stdout=(out := io.StringIO()))
    finally:
        logging.getLogger("kookee.privacy").removeHandler(caplog.handler)

    assert_erased(conversation)
    assert ledger(conversation) == before
    assert list(RevokedKey.objects.values_list("visitor_hash", flat=True)) == [VISITOR_HASH]
    assert out.getvalue() == f"Erased conversation {conversation.public_id}.\n"
    assert f"erased conversation {conversation.public_id} at the visitor's request, by manage.py" in caplog.text
    assert "SECRET" not in caplog.text
    assert_untouched(other)


@pytest.mark.parametrize(
    ("ids", "complaint"),
    [
        (["not-a-uuid"], "Not a conversation id (a UUID): not-a-uuid"),
        (["KNOWN", "1234"], "Not a conversation id (a UUID): 1234"),
        (["KNOWN", "UNKNOWN"], "No conversation with the public id UNKNOWN"),
    ],
)
def test_the_command_refuses_bad_ids_and_erases_nothing(conversation, ids, complaint):
    unknown = str(uuid.uuid4())
    ids = [{"KNOWN": str(conversation.public_id), "UNKNOWN": unknown}.get(i, i) for i in ids]

    with pytest.raises(CommandError) as refused:
        call_command("erase_conversation", *ids)

    assert complaint.replace("UNKNOWN", unknown) in str(refused.value)
    assert "Nothing erased." in str(refused.value)
    assert_untouched(conversation)


def test_the_command_refuses_while_a_turn_streams():
    streaming = make_conversation(status="streaming")

    with pytest.raises(CommandError, match="still running"):
        call_command("erase_conversation", str(streaming.public_id))

    assert Turn.objects.filter(conversation=streaming, erased_at__isnull=False).count() == 0


def test_the_command_exits_non_zero_from_the_shell(conversation):
    # As an operator runs it: a CommandError becomes a message and an exit
    # code. (In its own process: manage.py closes the database connections
    # it used, this test's among them.) A malformed id is refused before
    # any database is read.
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "erase_conversation", "not-a-uuid"],
        env={**os.environ, "DATABASE_URL": "sqlite:///:memory:"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "Not a conversation id" in result.stderr
    assert_untouched(conversation)


# --- a verified person: erase_conversation --verified-id ---------------------------------------

PERSON = {
    "verified_name": "Ana SECRET Souza",
    "verified_email": "ana.secret@example.com",
    "verified_attributes": {"plan": "SECRET-pro"},
}


def verified(conversation: Conversation, person_id: str = "user-42") -> Conversation:
    """The conversation of the person the customer's site verified with this id."""
    Conversation.objects.filter(pk=conversation.pk).update(verified_id=person_id, **PERSON)
    conversation.refresh_from_db()
    return conversation


def person_of(conversation: Conversation) -> tuple:
    conversation.refresh_from_db()
    return (
        conversation.verified_id,
        conversation.verified_name,
        conversation.verified_email,
        conversation.verified_attributes,
    )


def erased_lines(*conversations: Conversation) -> list[str]:
    return sorted(f"Erased conversation {c.public_id}." for c in conversations)


def test_the_command_erases_every_conversation_of_a_verified_id(caplog):
    laptop = verified(make_conversation(hash_key("ana-on-her-laptop")))
    phone = verified(make_conversation(hash_key("ana-on-her-phone")))
    bob = verified(make_conversation(hash_key("bob")), "user-7")
    anonymous = make_conversation(hash_key("anonymous"))
    caplog.set_level(logging.INFO, logger="kookee.privacy")
    logging.getLogger("kookee.privacy").addHandler(caplog.handler)  # "kookee" does not propagate

    try:
        call_command("erase_conversation", "--verified-id", "user-42", stdout=(out := io.StringIO()))
    finally:
        logging.getLogger("kookee.privacy").removeHandler(caplog.handler)

    for conversation in (laptop, phone):
        assert_erased(conversation)
        assert person_of(conversation) == ("", "", "", {})
    assert sorted(out.getvalue().splitlines()) == erased_lines(laptop, phone)
    assert set(RevokedKey.objects.values_list("visitor_hash", flat=True)) == {
        hash_key("ana-on-her-laptop"),
        hash_key("ana-on-her-phone"),
    }
    assert "SECRET" not in caplog.text and "user-42" not in caplog.text  # public ids only
    assert_untouched(bob)
    assert person_of(bob) == ("user-7", *PERSON.values())
    assert_untouched(anonymous)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--verified-id", "user-999"], "'user-999'"),
        (["--verified-id", "user-42", "--verified-id", "user-999"], "'user-999'"),
        (["KNOWN", "--verified-id", "user-999"], "'user-999'"),
        (["--verified-id", "USER-42"], "'USER-42'"),  # the id exactly, as the site signed it
        (["--verified-id", ""], "''"),  # not every anonymous conversation
    ],
)
def test_the_command_refuses_an_unknown_verified_id_and_erases_nothing(conversation, args, complaint):
    verified(conversation)
    anonymous = make_conversation(hash_key("anonymous"))
    args = [str(conversation.public_id) if arg == "KNOWN" else arg for arg in args]

    with pytest.raises(CommandError) as refused:
        call_command("erase_conversation", *args, stdout=io.StringIO())

    assert f"No conversation of the verified id {complaint}" in str(refused.value)
    assert "Nothing erased." in str(refused.value)
    assert_untouched(conversation)
    assert person_of(conversation) == ("user-42", *PERSON.values())
    assert_untouched(anonymous)
    assert not RevokedKey.objects.exists()


def test_the_command_takes_public_ids_and_verified_ids_together():
    ana = verified(make_conversation(hash_key("ana")))
    anonymous = make_conversation(hash_key("anonymous"))
    bob = verified(make_conversation(hash_key("bob")), "user-7")
    kept = make_conversation(hash_key("kept"))

    call_command(
        "erase_conversation",
        str(anonymous.public_id),
        str(ana.public_id),  # also hers by id: erased once
        "--verified-id",
        "user-42",
        "--verified-id",
        "user-7",
        stdout=(out := io.StringIO()),
    )

    for conversation in (ana, anonymous, bob):
        assert_erased(conversation)
        assert person_of(conversation) == ("", "", "", {})
    assert sorted(out.getvalue().splitlines()) == erased_lines(ana, anonymous, bob)
    assert_untouched(kept)


def test_the_command_refuses_a_bad_public_id_beside_a_verified_id(conversation):
    verified(conversation)

    with pytest.raises(CommandError, match="Not a conversation id"):
        call_command("erase_conversation", "not-a-uuid", "--verified-id", "user-42")

    assert_untouched(conversation)
    assert person_of(conversation)[0] == "user-42"


def test_the_command_needs_an_id(conversation):
    verified(conversation)

    with pytest.raises(CommandError) as refused:
        call_command("erase_conversation")

    assert "public ids, or --verified-id" in str(refused.value) and "Nothing erased." in str(refused.value)
    assert_untouched(conversation)


def test_erasing_from_the_admin_erases_the_verified_person(root_client, conversation):
    verified(conversation)

    erase(root_client, conversation)

    assert_erased(conversation)
    assert person_of(conversation) == ("", "", "", {})


# --- retention: manage.py purge_expired --------------------------------------------------


def turn_started(days_ago: float, address: str) -> Turn:
    conversation = Conversation.objects.create(visitor_hash="h")
    turn = Turn.objects.create(
        conversation=conversation,
        user_text="q",
        model="m",
        status="completed",
        client_address=address,
        client_network=f"{address}/32",
    )
    Turn.objects.filter(pk=turn.pk).update(started_at=timezone.now() - timedelta(days=days_ago))
    return turn


def purge() -> str:
    out = io.StringIO()
    call_command("purge_expired", stdout=out)
    return out.getvalue()


def test_addresses_are_dropped_after_the_retention_period(settings):
    settings.KOOKEE_ADDRESS_RETENTION_DAYS = 30
    old = turn_started(31, "203.0.113.7")
    recent = turn_started(29, "198.51.100.9")

    output = purge()

    old.refresh_from_db()
    recent.refresh_from_db()
    assert (old.client_address, old.client_network) == (None, "")
    assert (recent.client_address, recent.client_network) == ("198.51.100.9", "198.51.100.9/32")
    # Only the address goes: the turn and its text stay.
    assert old.user_text == "q"
    assert "1 turn(s)" in output


def test_expired_sessions_are_cleared():
    live, expired = SessionStore(), SessionStore()
    live.create()
    expired.create()
    Session.objects.filter(pk=expired.session_key).update(expire_date=timezone.now() - timedelta(seconds=1))

    purge()

    assert list(Session.objects.values_list("session_key", flat=True)) == [live.session_key]


def test_revoked_keys_are_kept_while_their_key_could_still_be_used(settings):
    settings.KOOKEE_WIDGET_IDLE_DAYS = 30
    settings.SESSION_COOKIE_AGE = 14 * 86400
    recent = RevokedKey.objects.create(visitor_hash="recent")
    old = RevokedKey.objects.create(visitor_hash="old")
    RevokedKey.objects.filter(pk=old.pk).update(revoked_at=timezone.now() - timedelta(days=31))

    purge()

    assert list(RevokedKey.objects.values_list("visitor_hash", flat=True)) == [recent.visitor_hash]


# --- what erasure and retention leave of a request for a person -----------------------------


def handoff_in(visitor_hash: str, days_ago: float = 0) -> Handoff:
    conversation = Conversation.objects.create(visitor_hash=visitor_hash, source_url="https://www.example.com/p")
    turn = Turn.objects.create(
        conversation=conversation, status="completed", user_text="SECRET question", model="m", client_network="x"
    )
    handoff = Handoff.objects.create(
        conversation=conversation,
        turn=turn,
        source="visitor",
        reason="SECRET reason",
        email="secret@example.com",
        client_network="203.0.113.7/32",
        email_status="sent",
        created_at=timezone.now() - timedelta(days=days_ago),
    )
    return handoff


@pytest.mark.django_db
def test_erasing_a_conversation_erases_its_requests():
    erased, kept = handoff_in(hash_key("erase-me")), handoff_in(hash_key("keep-me"))
    turn_id = erased.turn_id

    erasure.erase_conversations([erased.conversation_id], by="test")

    erased.refresh_from_db()
    kept.refresh_from_db()
    assert (erased.reason, erased.email, erased.client_network) == ("", "", "")
    # The request itself stays, with Support's record of it, closed for good (nobody replies in it again).
    assert (erased.status, erased.source, erased.email_status, erased.turn_id) == (
        "closed",
        "visitor",
        "sent",
        turn_id,
    )
    assert (kept.reason, kept.email, kept.client_network) == ("SECRET reason", "secret@example.com", "203.0.113.7/32")
    assert RevokedKey.objects.filter(visitor_hash=hash_key("erase-me")).exists()


@pytest.mark.django_db
def test_the_erase_command_erases_requests_too():
    handoff = handoff_in(hash_key("erase-me"))

    call_command("erase_conversation", str(handoff.conversation.public_id), stdout=io.StringIO())

    handoff.refresh_from_db()
    assert (handoff.reason, handoff.email, handoff.client_network) == ("", "", "")


@pytest.mark.django_db
def test_old_requests_lose_their_network(settings):
    settings.KOOKEE_ADDRESS_RETENTION_DAYS = 30
    old, recent = handoff_in("a", days_ago=31), handoff_in("b", days_ago=29)

    call_command("purge_expired", stdout=io.StringIO())

    old.refresh_from_db()
    recent.refresh_from_db()
    assert old.client_network == ""
    assert recent.client_network == "203.0.113.7/32"
    # Only the network goes: what the visitor asked for stays until erased.
    assert (old.reason, old.email) == ("SECRET reason", "secret@example.com")

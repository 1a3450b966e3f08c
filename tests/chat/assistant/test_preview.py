"""Staff previewing a draft of the assistant: their own conversation, by
their admin session and a preview key (`/ws/chat/?preview=1`), the same
frames as a visitor's, the draft's guidance; billed as preview, and left
out of the unanswered questions. Nobody else may open it."""

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from billing.models import LedgerEntry
from chat.assistant import versions
from chat.models import Conversation, Search
from chat.roles import ensure_roles
from chat.visitors import preview
from tests.chat.chat_client import ChatClient
from tests.provider import answer, tool_round

pytestmark = pytest.mark.django_db(transaction=True)

PREVIEW = "/ws/chat/?preview=1"


@database_sync_to_async
def staff_session(django_user_model, role: str | None = "Support", superuser: bool = False, with_key: bool = True):
    """A logged-in admin session (as the admin's login makes it), with a preview key."""
    ensure_roles()
    if superuser:
        user = django_user_model.objects.create_superuser(f"root-{role}", "root@example.com", None)
    else:
        user = django_user_model.objects.create_user(f"user-{role}", is_staff=True)
        if role:
            user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    key = client.cookies["sessionid"].value
    if with_key:
        session = SessionStore(key)
        preview.key_for(session)
        session.save()
    return key


def system_of(request) -> str:
    return request.body["messages"][0]["content"]


@database_sync_to_async
def publish_and_draft():
    versions.publish_guidance("Live words.", "test")
    versions.save_draft({"guidance": "Draft words."}, "test")


async def test_the_preview_speaks_as_the_draft_would_and_is_billed_as_preview(use_provider, django_user_model):
    await publish_and_draft()
    key = await staff_session(django_user_model)
    staff = await ChatClient.connect(key, path=PREVIEW)
    assert staff.connected
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "install widget"})]), answer("Paste the tag.")
    )
    turn_id = await staff.ask("How do I install the widget?")
    ended = await staff.finish(turn_id)  # the contract's invariants hold, as for a visitor
    assert ended["status"] == "completed" and ended["generations"] == 2
    system = system_of(use_provider.requests[0])
    assert "Draft words." in system and "Live words." not in system

    conversation = await database_sync_to_async(Conversation.objects.get)(turns__id=turn_id)
    assert conversation.preview is True
    entry = await database_sync_to_async(LedgerEntry.objects.get)(turn_id=turn_id)
    assert entry.preview is True
    assert await database_sync_to_async(Search.objects.count)() == 0  # not an unanswered question

    # A visitor meanwhile meets the live version, in a conversation of their own.
    visitor = await ChatClient.connect()
    use_provider.queue(answer("Hi."))
    visitor_turn = await visitor.ask("hi")
    await visitor.finish(visitor_turn)
    assert "Live words." in system_of(use_provider.requests[-1])
    entry = await database_sync_to_async(LedgerEntry.objects.get)(turn_id=visitor_turn)
    assert entry.preview is False
    await staff.close()
    await visitor.close()


async def test_the_preview_is_not_the_staff_members_own_chat(use_provider, django_user_model):
    key = await staff_session(django_user_model)
    own = await ChatClient.connect(key)  # the chat page, with the same cookie
    use_provider.queue(answer("Mine."), answer("Preview."))
    await own.finish(await own.ask("my own question"))
    staff = await ChatClient.connect(key, path=PREVIEW)
    await staff.send({"type": "history"})
    history = await staff.receive_until("history")
    assert history["turns"] == []
    await staff.finish(await staff.ask("a preview question"))
    rows = await database_sync_to_async(lambda: sorted(Conversation.objects.values_list("preview", flat=True)))()
    assert rows == [False, True]
    await own.close()
    await staff.close()


@pytest.mark.parametrize(
    "who",
    [
        {"role": "Finance"},
        {"role": None},  # staff with no role
        {"role": "Support", "with_key": False},  # never opened the Preview page
    ],
    ids=["finance", "no-role", "no-key"],
)
async def test_nobody_else_may_preview(use_provider, django_user_model, who):
    key = await staff_session(django_user_model, **who)
    client = await ChatClient.connect(key, path=PREVIEW)
    assert not client.connected


async def test_a_visitor_session_may_not_preview(use_provider):
    client = await ChatClient.connect(path=PREVIEW)
    assert not client.connected


async def test_a_superuser_may_preview(use_provider, django_user_model):
    key = await staff_session(django_user_model, role="root", superuser=True)
    client = await ChatClient.connect(key, path=PREVIEW)
    assert client.connected
    await client.close()


async def test_starting_over_gives_a_new_preview_key(use_provider, django_user_model):
    key = await staff_session(django_user_model)
    staff = await ChatClient.connect(key, path=PREVIEW)
    use_provider.queue(answer("One."))
    await staff.finish(await staff.ask("one"))
    await staff.send({"type": "forget"})
    assert await staff.refusal() == 4401

    @database_sync_to_async
    def fresh_key():
        session = SessionStore(key)
        old = session[preview.SESSION_KEY]
        new = preview.key_for(session)  # the Preview page, loaded again
        session.save()
        return old, new

    old, new = await fresh_key()
    assert old != new
    again = await ChatClient.connect(key, path=PREVIEW)
    assert again.connected
    await again.send({"type": "history"})
    assert (await again.receive_until("history"))["turns"] == []
    await again.close()


# --- the Preview page ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_preview_page_is_the_chat_page_speaking_as_the_draft(client, django_user_model):
    ensure_roles()
    sam = django_user_model.objects.create_user("sam", is_staff=True)
    sam.groups.add(Group.objects.get(name="Support"))
    versions.publish(versions.save_draft({"name_en": "Kiki", "guidance": "Live."}, "test"), "test")
    versions.save_draft({"name_en": "Lulu", "guidance": "Draft.", "greeting_en": "Hi, I am Lulu."}, "test")
    client.force_login(sam)
    page = client.get("/admin/chat/assistantversion/preview/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-socket="/ws/chat/?preview=1"' in html
    assert "Lulu" in html and "Hi, I am Lulu." in html  # the draft's face
    assert "Preview: not live" in html
    # What changed since the published version.
    assert "Kiki" in html and "Draft." in html and "Live." in html
    assert "Content-Security-Policy" in page.headers
    assert client.session[preview.SESSION_KEY]
    # The assistant's page links to it.
    assert "/admin/chat/assistantversion/preview/" in client.get("/admin/chat/assistantversion/").content.decode()


@pytest.mark.django_db
def test_the_preview_page_is_for_those_who_shape_the_assistant(client, django_user_model):
    ensure_roles()
    finance = django_user_model.objects.create_user("fin", is_staff=True)
    finance.groups.add(Group.objects.get(name="Finance"))
    client.force_login(finance)
    assert client.get("/admin/chat/assistantversion/preview/").status_code == 403
    client.logout()
    assert client.get("/admin/chat/assistantversion/preview/").status_code == 302  # to the login


@pytest.mark.django_db
def test_finance_sees_a_previews_cost_as_preview(client, django_user_model):
    from billing.services import bill_once
    from chat.models import Turn

    ensure_roles()
    finance = django_user_model.objects.create_user("fin", is_staff=True)
    finance.groups.add(Group.objects.get(name="Finance"))
    for preview_turn in (False, True):
        conversation = Conversation.objects.create(visitor_hash=f"v{preview_turn}", preview=preview_turn)
        turn = Turn.objects.create(conversation=conversation, user_text="q", model="gpt-4o-mini", status="completed")
        bill_once(turn.id, model="gpt-4o-mini", input_tokens=10, output_tokens=5, estimated=False, preview=preview_turn)
    client.force_login(finance)
    page = client.get("/admin/billing/ledgerentry/").content.decode()
    assert page.count("completed (preview)") == 1
    only = client.get("/admin/billing/ledgerentry/?preview__exact=1").content.decode()
    assert only.count("(preview)") == 1 and "1 ledger entry" in only


@pytest.mark.django_db
def test_support_sees_a_preview_conversation_marked(client, django_user_model):
    ensure_roles()
    sam = django_user_model.objects.create_user("sam", is_staff=True)
    sam.groups.add(Group.objects.get(name="Support"))
    from chat.models import Turn

    for flag in (False, True):
        conversation = Conversation.objects.create(visitor_hash=f"v{flag}", preview=flag)
        Turn.objects.create(conversation=conversation, user_text=f"question {flag}", model="m", status="completed")
    client.force_login(sam)
    page = client.get("/admin/chat/conversation/").content.decode()
    assert page.count('<span class="kk-flag">preview</span>') == 1
    only = client.get("/admin/chat/conversation/?preview__exact=0").content.decode()
    assert "question False" in only and "question True" not in only


async def test_a_preview_reaches_nothing_of_supports_queue(use_provider, django_user_model):
    from chat.models import Handoff

    key = await staff_session(django_user_model)
    staff = await ChatClient.connect(key, path=PREVIEW)
    use_provider.queue(tool_round([("c1", "request_human", {"reason": "wants a person"})]), answer("Someone will."))
    turn_id = await staff.ask("a person please")
    ended = await staff.finish(turn_id)
    assert ended["status"] == "completed" and "handoff" not in ended
    await staff.send({"type": "handoff", "reason": "me too"})
    assert (await staff.receive_until("error"))["code"] == "unavailable"
    assert await database_sync_to_async(Handoff.objects.count)() == 0
    await staff.close()


@pytest.mark.django_db
def test_previews_are_left_out_of_the_support_report():
    from datetime import timedelta

    from django.utils import timezone

    from chat.models import Feedback, Turn
    from chat.support import reports

    for flag in (False, True):
        conversation = Conversation.objects.create(visitor_hash=f"v{flag}", preview=flag)
        turn = Turn.objects.create(conversation=conversation, user_text="q", model="m", status="completed")
        Feedback.objects.create(turn=turn, rating="down")
    today = timezone.localdate()
    period = reports.Period(today - timedelta(days=6), today)
    figures = reports.figures(period)
    assert (figures["turns"], figures["conversations"], figures["rated_down"]) == (1, 1, 1)

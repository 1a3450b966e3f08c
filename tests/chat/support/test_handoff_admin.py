"""Support's queue of requests for a person (chat/support/handoff_admin.py): what
waits, the filters, the moves (claim, close, reopen) and their races, who may
see and move what, and the requests on the conversation's own page."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import Conversation, Handoff, Turn
from chat.roles import ensure_roles
from chat.support.handoff_admin import HandoffStatusFilter

pytestmark = pytest.mark.django_db

QUEUE = reverse("admin:chat_handoff_changelist")


def staff(django_user_model, name, group=None, *, permissions=()):
    ensure_roles()
    user = django_user_model.objects.create_user(username=name, password="a-long-test-password", is_staff=True)
    if group:
        user.groups.add(Group.objects.get(name=group))
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="chat", codename=codename))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def support(django_user_model):
    return staff(django_user_model, "sam", "Support")


@pytest.fixture
def another_agent(django_user_model):
    return staff(django_user_model, "kim", "Support")


@pytest.fixture
def finance(django_user_model):
    return staff(django_user_model, "fiona", "Finance")


def request_for_a_person(
    status="open", *, conversation=None, reason="I was charged twice.", minutes_ago=0, **fields
) -> Handoff:
    if conversation is None:
        conversation = Conversation.objects.create(visitor_hash="v")
        Turn.objects.create(conversation=conversation, status="completed", user_text="Refund?", model="m")
    return Handoff.objects.create(
        conversation=conversation,
        source=fields.pop("source", "visitor"),
        reason=reason,
        status=status,
        created_at=timezone.now() - timedelta(minutes=minutes_ago),
        **fields,
    )


def listed(client, query="") -> list[int]:
    response = client.get(QUEUE + query)
    assert response.status_code == 200, response
    return [h.pk for h in response.context["cl"].result_list]


def move(client, handoff, to):
    return client.post(reverse("admin:chat_handoff_move", args=[handoff.pk]), {"move": to})


def state(handoff) -> tuple:
    handoff.refresh_from_db()
    return handoff.status, handoff.claimed_by, handoff.claimed_at is not None, handoff.closed_at is not None


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# --- the queue --------------------------------------------------------------------------------


def test_the_queue_is_what_waits_the_longest_waiting_first(support):
    newer = request_for_a_person(minutes_ago=5)
    claimed = request_for_a_person("claimed", minutes_ago=10)
    oldest = request_for_a_person(minutes_ago=30)
    request_for_a_person("closed", minutes_ago=60)

    assert listed(support) == [oldest.pk, claimed.pk, newer.pk]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?status=pending", ["open", "claimed"]),
        ("?status=open", ["open"]),
        ("?status=claimed", ["claimed"]),
        ("?status=closed", ["closed"]),
        ("?status=all", ["open", "claimed", "closed"]),
    ],
)
def test_the_status_filter(support, query, expected):
    made = {
        status: request_for_a_person(status, minutes_ago=n)
        for n, status in ((3, "open"), (2, "claimed"), (1, "closed"))
    }

    assert listed(support, query) == [made[status].pk for status in expected]


def test_the_default_choice_is_shown_selected(support):
    request_for_a_person()

    response = support.get(QUEUE)

    [status_filter] = [f for f in response.context["cl"].filter_specs if isinstance(f, HandoffStatusFilter)]
    choices = list(status_filter.choices(response.context["cl"]))
    assert [c["display"] for c in choices if c["selected"]] == ["waiting (open or claimed)"]


def test_the_queue_filters_by_source_and_searches_reasons_and_addresses(support):
    by_visitor = request_for_a_person(reason="Invoice in euros", email="sam@example.com")
    by_model = request_for_a_person(source="assistant", reason="Bitcoin payments")

    assert listed(support, "?source__exact=assistant") == [by_model.pk]
    assert listed(support, "?q=euros") == [by_visitor.pk]
    assert listed(support, "?q=sam@example") == [by_visitor.pk]


@pytest.mark.parametrize("query", ["?client_network=203.0.113.7/32", "?email__startswith=s", "?status__in=closed"])
def test_the_queue_takes_no_filter_it_does_not_offer(support, query):
    request_for_a_person(email="sam@example.com", client_network="203.0.113.7/32")

    assert support.get(QUEUE + query).status_code == 400


def test_the_queue_shows_the_request(support):
    handoff = request_for_a_person(reason="Refund <b>now</b>", email="sam@example.com")

    page = support.get(QUEUE).content.decode()

    assert "Refund &lt;b&gt;now&lt;/b&gt;" in page
    assert "Refund <b>now</b>" not in page
    assert "sam@example.com" in page
    assert reverse("admin:chat_handoff_change", args=[handoff.pk]) in page
    assert reverse("admin:chat_conversation_change", args=[handoff.conversation_id]) in page


@pytest.mark.parametrize(
    ("fields", "told"),
    [
        (
            {"email_status": "sent", "webhook_status": "failed", "webhook_attempts": 4},
            "email: sent; webhook: failed (4 attempts)",
        ),
        ({"email_status": "pending"}, "email: pending"),
        ({}, "not configured"),
    ],
)
def test_a_request_says_how_support_was_told(support, fields, told):
    handoff = request_for_a_person(**fields)

    page = support.get(reverse("admin:chat_handoff_change", args=[handoff.pk])).content.decode()

    assert told in page


def test_the_queue_takes_the_same_queries_for_few_and_many(support, django_assert_max_num_queries):
    for _ in range(3):
        request_for_a_person("claimed", claimed_by=support.user)
    support.get(QUEUE)
    for _ in range(30):
        request_for_a_person("claimed", claimed_by=support.user)

    with django_assert_max_num_queries(12):
        assert len(listed(support)) == 33


def test_nothing_is_added_or_deleted_in_the_queue(support, admin_client):
    handoff = request_for_a_person()

    for client in (support, admin_client):
        assert client.get(reverse("admin:chat_handoff_add")).status_code == 403
        assert client.post(reverse("admin:chat_handoff_delete", args=[handoff.pk]), {"post": "yes"}).status_code == 403
    assert Handoff.objects.count() == 1


def test_the_change_form_edits_nothing_but_the_state(support):
    handoff = request_for_a_person(email="sam@example.com")
    url = reverse("admin:chat_handoff_change", args=[handoff.pk])

    support.post(url, {"status": "closed", "reason": "rewritten", "email": "eve@example.com", "source": "assistant"})

    handoff.refresh_from_db()
    assert (handoff.status, handoff.reason, handoff.email, handoff.source) == (
        "open",
        "I was charged twice.",
        "sam@example.com",
        "visitor",
    )


# --- moves ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "moves"),
    [("open", ["claim", "close"]), ("claimed", ["close", "reopen"]), ("closed", ["reopen"])],
)
def test_the_request_page_offers_the_moves_its_state_allows(support, status, moves):
    handoff = request_for_a_person(status)

    response = support.get(reverse("admin:chat_handoff_change", args=[handoff.pk]))

    page = response.content.decode()
    assert [m for m, _label in response.context["moves"]] == moves
    for offered in ("claim", "close", "reopen"):
        assert (f'name="move" value="{offered}"' in page) == (offered in moves), offered
    assert f'action="{reverse("admin:chat_handoff_move", args=[handoff.pk])}"' in page
    assert reverse("admin:chat_conversation_change", args=[handoff.conversation_id]) in page


def test_claim_then_close_then_reopen(support):
    handoff = request_for_a_person()

    response = move(support, handoff, "claim")
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:chat_handoff_change", args=[handoff.pk])
    assert state(handoff) == ("claimed", support.user, True, False)

    move(support, handoff, "close")
    assert state(handoff) == ("closed", support.user, True, True)

    move(support, handoff, "reopen")
    assert state(handoff) == ("open", None, False, False)

    log = LogEntry.objects.filter(object_id=str(handoff.pk)).order_by("id")
    assert [(e.user, e.action_flag, e.change_message) for e in log] == [
        (support.user, CHANGE, "claim"),
        (support.user, CHANGE, "close"),
        (support.user, CHANGE, "reopen"),
    ]


def test_an_open_request_is_closed_without_a_claim(support):
    handoff = request_for_a_person()

    move(support, handoff, "close")

    assert state(handoff) == ("closed", None, False, True)


def test_two_agents_claiming_at_once_one_wins(support, another_agent):
    handoff = request_for_a_person()
    page = reverse("admin:chat_handoff_change", args=[handoff.pk])
    # Both opened the request while it was open: both were offered Claim.
    for agent in (support, another_agent):
        assert [m for m, _label in agent.get(page).context["moves"]] == ["claim", "close"]

    first = move(support, handoff, "claim")
    second = move(another_agent, handoff, "claim")

    assert state(handoff) == ("claimed", support.user, True, False)
    # The request's page confirms the claim to its winner.
    assert messages_of(first) == ["Claimed: the visitor sees that you answer, and their messages come to you."]
    assert messages_of(second) == ["That request had already moved on."]
    assert LogEntry.objects.filter(object_id=str(handoff.pk)).count() == 1


def test_a_claim_that_loses_the_race_changes_nothing(support, another_agent):
    """Kim's claim lands between Sam's read of the request and Sam's write:
    Sam's conditional update finds it claimed, and leaves it to Kim."""
    handoff = request_for_a_person()
    wrapper, raced = racing(
        lambda: Handoff.objects.filter(pk=handoff.pk).update(
            status="claimed", claimed_by=another_agent.user, claimed_at=timezone.now()
        ),
        after=MOVABLE,
    )

    with wrapper:
        response = move(support, handoff, "claim")

    assert raced, "the race was run"
    assert state(handoff) == ("claimed", another_agent.user, True, False)
    assert messages_of(response) == ["That request had already moved on."]
    assert not LogEntry.objects.exists()


def test_a_claim_from_the_list_skips_what_another_agent_took(support, another_agent):
    mine = request_for_a_person()
    theirs = request_for_a_person("claimed", claimed_by=another_agent.user, claimed_at=timezone.now())
    closed = request_for_a_person("closed")

    response = support.post(QUEUE, {"action": "claim", "_selected_action": [mine.pk, theirs.pk, closed.pk]})

    assert response.status_code == 302
    assert messages_of(response) == ["1 request moved."]
    assert state(mine)[:2] == ("claimed", support.user)
    assert state(theirs)[:2] == ("claimed", another_agent.user)
    assert state(closed)[0] == "closed"


def test_closing_from_the_list(support):
    handoffs = [request_for_a_person(), request_for_a_person("claimed")]

    response = support.post(QUEUE, {"action": "close", "_selected_action": [h.pk for h in handoffs]})

    assert messages_of(response) == ["2 requests moved."]
    assert [state(h)[0] for h in handoffs] == ["closed", "closed"]


def test_reopening_never_makes_two_waiting_requests_in_a_conversation(support):
    older = request_for_a_person("closed", minutes_ago=60)
    waiting = request_for_a_person(conversation=older.conversation, reason="Again.")

    response = move(support, older, "reopen")

    assert messages_of(response) == ["That request had already moved on."]
    assert state(older)[0] == "closed"
    assert state(waiting)[0] == "open"


def test_reopening_two_closed_requests_of_one_conversation_reopens_one(support):
    first = request_for_a_person("closed", minutes_ago=60)
    second = request_for_a_person("closed", conversation=first.conversation, minutes_ago=30)

    # From the list of closed requests: the action acts on what the list shows.
    response = support.post(QUEUE + "?status=closed", {"action": "reopen", "_selected_action": [first.pk, second.pk]})

    assert messages_of(response) == ["1 request moved."]
    assert sorted(Handoff.objects.values_list("status", flat=True)) == ["closed", "open"]


def racing(write, after: str):
    """Runs write() once, right after the request's first statement that
    contains `after`: a concurrent writer landing between its read and its
    write."""
    raced = []

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if after in sql and not raced:
            raced.append(sql)
            write()
        return result

    return connection.execute_wrapper(wrapper), raced


# The queries of chat.support.handoff_admin._apply: the requests that can move, and
# (to reopen one) whether its conversation has another one waiting.
MOVABLE = 'SELECT "chat_handoff"."id", "chat_handoff"."conversation_id" FROM "chat_handoff"'
ANOTHER_WAITING = 'AS "a" FROM "chat_handoff"'


@pytest.mark.parametrize("racer", ["another agent reopens", "the visitor asks again"])
def test_a_reopen_that_loses_the_race_changes_nothing(support, racer):
    first = request_for_a_person("closed", minutes_ago=60)
    second = request_for_a_person("closed", conversation=first.conversation, minutes_ago=30)

    def write():
        if racer == "another agent reopens":
            Handoff.objects.filter(pk=second.pk).update(status="open")
        else:
            request_for_a_person(conversation=first.conversation, reason="Hello again?")

    wrapper, raced = racing(write, after=ANOTHER_WAITING)
    with wrapper:
        response = move(support, first, "reopen")

    assert raced, "the race was run"
    assert response.status_code == 302
    assert messages_of(response) == ["That request had already moved on."]
    assert state(first)[0] == "closed"
    assert Handoff.objects.filter(conversation=first.conversation, status__in=Handoff.PENDING).count() == 1


@pytest.mark.parametrize(("status", "to"), [("closed", "claim"), ("closed", "close"), ("open", "reopen")])
def test_a_move_its_state_does_not_allow_changes_nothing(support, status, to):
    handoff = request_for_a_person(status)
    before = state(handoff)

    response = move(support, handoff, to)

    assert response.status_code == 302
    assert messages_of(response) == ["That request had already moved on."]
    assert state(handoff) == before
    assert not LogEntry.objects.exists()


def test_an_unknown_move_is_refused(support):
    handoff = request_for_a_person()

    for body in ({"move": "delete"}, {"move": ""}, {}):
        response = support.post(reverse("admin:chat_handoff_move", args=[handoff.pk]), body)
        assert response.status_code == 400
    assert state(handoff)[0] == "open"


def test_a_move_is_a_post(support):
    handoff = request_for_a_person()

    response = support.get(reverse("admin:chat_handoff_move", args=[handoff.pk]) + "?move=close")

    assert response.status_code == 405
    assert state(handoff)[0] == "open"


def test_moving_a_request_that_is_not_there_is_not_found(support):
    assert support.post(reverse("admin:chat_handoff_move", args=[999_999]), {"move": "claim"}).status_code == 404


def test_a_move_needs_the_csrf_token(django_user_model):
    ensure_roles()
    user = django_user_model.objects.create_user(username="sam", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    handoff = request_for_a_person()

    assert move(client, handoff, "close").status_code == 403
    assert state(handoff)[0] == "open"


# --- who may ----------------------------------------------------------------------------------


def test_support_sees_the_queue_and_a_request(support):
    handoff = request_for_a_person()

    assert support.get(QUEUE).status_code == 200
    assert support.get(reverse("admin:chat_handoff_change", args=[handoff.pk])).status_code == 200
    assert QUEUE in support.get(reverse("admin:index")).content.decode()


def test_finance_may_neither_see_nor_move_a_request(finance):
    handoff = request_for_a_person(reason="SECRET reason", email="secret@example.com")

    for response in (
        finance.get(QUEUE),
        finance.get(reverse("admin:chat_handoff_change", args=[handoff.pk])),
        move(finance, handoff, "claim"),
        finance.post(QUEUE, {"action": "close", "_selected_action": [handoff.pk]}),
    ):
        assert response.status_code == 403
        assert "SECRET" not in response.content.decode()
    assert state(handoff)[0] == "open"
    assert QUEUE not in finance.get(reverse("admin:index")).content.decode()


def test_viewing_alone_offers_no_move_and_allows_none(django_user_model):
    viewer = staff(django_user_model, "val", permissions=["view_handoff"])
    handoff = request_for_a_person()

    page = viewer.get(reverse("admin:chat_handoff_change", args=[handoff.pk]))
    queue = viewer.get(QUEUE)

    assert page.status_code == 200 and page.context["moves"] == []
    assert queue.status_code == 200 and queue.context["action_form"] is None
    assert move(viewer, handoff, "claim").status_code == 403
    viewer.post(QUEUE, {"action": "claim", "_selected_action": [handoff.pk]})
    assert state(handoff)[0] == "open"


@pytest.mark.parametrize("who", ["anonymous", "not staff"])
def test_outsiders_are_sent_to_the_login(client, django_user_model, who):
    handoff = request_for_a_person()
    if who == "not staff":
        ensure_roles()
        user = django_user_model.objects.create_user(username="visitor", is_staff=False)
        user.groups.add(Group.objects.get(name="Support"))
        client.force_login(user)

    for response in (
        client.get(QUEUE),
        client.get(reverse("admin:chat_handoff_change", args=[handoff.pk])),
        move(client, handoff, "close"),
    ):
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert state(handoff)[0] == "open"


# --- the conversation's page ------------------------------------------------------------------


def test_the_conversation_page_lists_its_requests(support):
    closed = request_for_a_person("closed", reason="First <i>try</i>", minutes_ago=60)
    waiting = request_for_a_person(conversation=closed.conversation, source="assistant", reason="")
    elsewhere = request_for_a_person(reason="Someone else's")

    page = support.get(reverse("admin:chat_conversation_change", args=[closed.conversation_id])).content.decode()

    for handoff in (closed, waiting):
        assert reverse("admin:chat_handoff_change", args=[handoff.pk]) in page
    assert reverse("admin:chat_handoff_change", args=[elsewhere.pk]) not in page
    assert "First &lt;i&gt;try&lt;/i&gt;" in page
    assert "First <i>try</i>" not in page
    assert "Someone else's" not in page
    assert page.index(reverse("admin:chat_handoff_change", args=[closed.pk])) < page.index(
        reverse("admin:chat_handoff_change", args=[waiting.pk])
    ), "oldest first"


def test_a_conversation_with_only_a_request_is_listed_and_flagged(support):
    conversation = Conversation.objects.create(visitor_hash="v")
    handoff = request_for_a_person(conversation=conversation)

    response = support.get(reverse("admin:chat_conversation_changelist"))

    assert [c.pk for c in response.context["cl"].result_list] == [conversation.pk]
    assert "waiting for a person" in response.content.decode()
    handoff.status = "closed"
    handoff.save()
    page = support.get(reverse("admin:chat_conversation_changelist")).content.decode()
    assert "asked for a person" in page
    assert "waiting for a person" not in page

"""The admin, as a superuser sees it: changelists, counts, the read-only ledger,
and transcript text shown escaped."""

import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.admin.turns import TurnAdmin
from chat.models import Conversation, Generation, RevokedKey, ToolCall, Turn
from helpcenter.models import Article

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"


def make_turn(conversation=None, *, generations=0, **fields):
    conversation = conversation or Conversation.objects.create(visitor_hash="k")
    fields = {"user_text": "question", "model": "gpt-4o-mini", "status": "completed", **fields}
    turn = Turn.objects.create(conversation=conversation, **fields)
    for number in range(1, generations + 1):
        now = timezone.now()
        Generation.objects.create(turn=turn, round=number, started_at=now, ended_at=now)
    return turn


class ResultRows(HTMLParser):
    """The changelist's result rows: for each row, its cells' text keyed by field name
    (the `field-NAME` class Django gives every cell), and under "pk" the id
    its first change link names."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self._in_results = False
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id") == "result_list":
            self._in_results = True
        elif self._in_results and tag == "tr":
            self.rows.append({})
        elif self._in_results and tag == "a" and self.rows and "pk" not in self.rows[-1]:
            found = re.search(r"/(\d+)/change/", attrs.get("href") or "")
            if found:
                self.rows[-1]["pk"] = found[1]
        elif self._in_results and tag in ("td", "th"):
            names = [c[len("field-") :] for c in (attrs.get("class") or "").split() if c.startswith("field-")]
            self._cell = names[0] if names and self.rows else None
            if self._cell:
                self.rows[-1][self._cell] = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_results = False
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data):
        if self._cell:
            self.rows[-1][self._cell] += data.strip()


def result_rows(response) -> list[dict[str, str]]:
    parser = ResultRows()
    parser.feed(response.content.decode())
    return [row for row in parser.rows if row]


# --- every changelist opens, with its rows -------------------------------------------------


@pytest.fixture
def one_of_everything():
    Article.objects.create(title="Installing the widget", slug="install-widget", body="Paste it.")
    turn = make_turn(generations=1, assistant_text="Paste the script tag.")
    ToolCall.objects.create(
        generation=turn.generations.get(), call_id="call_1", name="search_help_center", arguments="{}"
    )
    bill_once(turn.id, model="gpt-4o-mini", input_tokens=100, output_tokens=20, estimated=False)


@pytest.mark.parametrize(
    ("url", "model"),
    [
        ("/admin/chat/turn/", Turn),
        ("/admin/chat/conversation/", Conversation),
        ("/admin/chat/generation/", Generation),
        ("/admin/chat/toolcall/", ToolCall),
        ("/admin/helpcenter/article/", Article),
        ("/admin/billing/ledgerentry/", LedgerEntry),
    ],
)
def test_each_changelist_lists_its_rows(admin_client, one_of_everything, url, model):
    response = admin_client.get(url)

    assert response.status_code == 200
    obj = model.objects.get()
    assert [o.pk for o in response.context["cl"].result_list] == [obj.pk]
    assert len(result_rows(response)) == 1
    change_url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk])
    assert change_url in response.content.decode()


# --- the Turn changelist -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        ("stopped", "Stopped by the visitor"),
        ("left", "Visitor left (every tab closed)"),
        ("shutdown", "Server shut down"),
        ("process_lost", "Server process lost"),
    ],
)
def test_the_turn_list_and_page_say_why_a_turn_was_interrupted(admin_client, reason, label):
    turn = make_turn(generations=1, status="interrupted", interrupted=True, stop_reason=reason, stopped_by="ab12cd34")
    make_turn(generations=1)  # completed: no reason

    rows = {row["pk"]: row["status_badge"] for row in result_rows(admin_client.get("/admin/chat/turn/"))}
    page = admin_client.get(f"/admin/chat/turn/{turn.pk}/change/").content.decode()
    transcript = admin_client.get(f"/admin/chat/conversation/{turn.conversation_id}/change/").content.decode()

    assert rows[str(turn.id)] == f"interrupted{label}"  # two spans, the cell text stripped
    assert [badge for badge in rows.values() if badge == "completed"] == ["completed"]
    assert label in page and "ab12cd34" in page
    assert label in transcript


def test_the_turn_list_filters_by_stop_reason(admin_client):
    left = make_turn(status="interrupted", interrupted=True, stop_reason="left")
    make_turn(status="interrupted", interrupted=True, stop_reason="stopped")
    make_turn()

    response = admin_client.get("/admin/chat/turn/?stop_reason__exact=left")

    assert [row["pk"] for row in result_rows(response)] == [str(left.id)]


def test_the_turn_changelist_shows_each_turns_generation_count(admin_client):
    one = make_turn(generations=1)
    three = make_turn(generations=3)
    none = make_turn(generations=0, status="failed")

    counts = {row["pk"]: row["generation_count"] for row in result_rows(admin_client.get("/admin/chat/turn/"))}

    # Each with the rounds that called tools: here, none.
    assert counts == {
        str(one.id): "1 (0 with tools)",
        str(three.id): "3 (0 with tools)",
        str(none.id): "0 (0 with tools)",
    }


def test_the_turn_changelist_orders_by_generation_count(admin_client):
    three = make_turn(generations=3)
    one = make_turn(generations=1)
    column = TurnAdmin.list_display.index("generation_count") + 1  # ?o= counts columns from 1

    ascending = result_rows(admin_client.get(f"/admin/chat/turn/?o={column}"))
    descending = result_rows(admin_client.get(f"/admin/chat/turn/?o=-{column}"))

    assert [r["pk"] for r in ascending] == [str(one.id), str(three.id)]
    assert [r["pk"] for r in descending] == [str(three.id), str(one.id)]


def test_the_turn_changelist_query_count_does_not_grow_with_turns(admin_client, django_assert_num_queries):
    # each turn in its own conversation, with generations: an N+1 on either shows
    for _ in range(2):
        make_turn(generations=2)
    admin_client.get("/admin/chat/turn/")  # warm caches (content types, ...)
    with CaptureQueriesContext(connection) as two:
        response = admin_client.get("/admin/chat/turn/")
    assert len(result_rows(response)) == 2

    for _ in range(10):
        make_turn(generations=2)
    with django_assert_num_queries(len(two.captured_queries)):
        response = admin_client.get("/admin/chat/turn/")

    assert len(result_rows(response)) == 12


# --- the ledger is read-only ---------------------------------------------------------------


@pytest.fixture
def entry():
    turn = make_turn(generations=1)
    return bill_once(turn.id, model="gpt-4o-mini", input_tokens=100, output_tokens=20, estimated=False)


def ledger_row(entry):
    return LedgerEntry.objects.filter(pk=entry.pk).values().get()


def test_the_ledger_add_page_is_forbidden(admin_client, entry):
    before = LedgerEntry.objects.count()

    assert admin_client.get("/admin/billing/ledgerentry/add/").status_code == 403
    response = admin_client.post(
        "/admin/billing/ledgerentry/add/",
        {"turn": entry.turn_id, "model": "x", "input_tokens": 1, "output_tokens": 1, "cost": "1"},
    )

    assert response.status_code == 403
    assert LedgerEntry.objects.count() == before


def test_the_ledger_change_page_is_view_only(admin_client, entry):
    before = ledger_row(entry)
    url = f"/admin/billing/ledgerentry/{entry.pk}/change/"

    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert 'name="_continue"' not in page.content.decode()

    response = admin_client.post(
        url,
        {
            "model": "gpt-4o",
            "input_tokens": 1,
            "output_tokens": 1,
            "estimated": "on",
            "cost": "99",
            "_save": "Save",
        },
    )

    assert response.status_code == 403
    assert ledger_row(entry) == before


def test_the_ledger_delete_page_is_forbidden(admin_client, entry):
    before = ledger_row(entry)
    url = f"/admin/billing/ledgerentry/{entry.pk}/delete/"

    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403

    assert ledger_row(entry) == before


def test_the_ledger_changelist_offers_no_bulk_delete(admin_client, entry):
    before = ledger_row(entry)

    page = admin_client.get("/admin/billing/ledgerentry/")
    assert "delete_selected" not in page.content.decode()
    admin_client.post(
        "/admin/billing/ledgerentry/",
        {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"},
    )

    assert ledger_row(entry) == before


# --- transcript text is escaped ------------------------------------------------------------


def test_the_turn_change_page_escapes_model_text(admin_client):
    turn = make_turn(generations=1, user_text=f"say {SCRIPT}", assistant_text=SCRIPT)

    response = admin_client.get(f"/admin/chat/turn/{turn.pk}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert SCRIPT not in page


def test_the_conversation_change_page_escapes_model_text(admin_client):
    turn = make_turn(assistant_text=SCRIPT)

    response = admin_client.get(f"/admin/chat/conversation/{turn.conversation_id}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert SCRIPT not in page


def test_ledger_cost_is_shown(admin_client, entry):
    # 100 x 0.15 + 20 x 0.60 = 27 per million
    assert entry.cost == Decimal("0.000027")
    assert "0.00002700" in admin_client.get("/admin/billing/ledgerentry/").content.decode()


# --- wasted generations ----------------------------------------------------------------------


def make_rounds(tool_rounds: list[bool], **fields):
    """A turn with one generation per entry; True where that round called a tool."""
    turn = make_turn(generations=len(tool_rounds), **fields)
    for generation, called in zip(turn.generations.order_by("round"), tool_rounds, strict=True):
        if called:
            ToolCall.objects.create(generation=generation, name="search_help_center", arguments="{}")
            ToolCall.objects.create(generation=generation, name="search_help_center", arguments="{}")
    return turn


def test_the_wasted_generations_filter_finds_probe_then_stream_turns_only(admin_client):
    probed = make_rounds([False, False])  # a plain answer made twice: the bug
    make_rounds([True, False])  # one tool round, then the answer
    make_rounds([False])  # a greeting
    make_rounds([True, True, False])  # two tool rounds, then the answer
    probed_after_tools = make_rounds([True, False, False])

    rows = result_rows(admin_client.get("/admin/chat/turn/?wasted=yes"))

    assert sorted(int(r["pk"]) for r in rows) == sorted([probed.id, probed_after_tools.id])


# --- conversations for support ---------------------------------------------------------------


@pytest.fixture
def conversation():
    conversation = Conversation.objects.create(visitor_hash="visitor")
    first = make_turn(conversation, generations=2, assistant_text="Let me look.\n\nPaste the tag.")
    tool_generation = first.generations.get(round=1)
    tool_generation.finish_reason = "tool_calls"
    tool_generation.input_tokens, tool_generation.output_tokens = 300, 12
    tool_generation.first_delta_at = tool_generation.started_at + timezone.timedelta(milliseconds=420)
    tool_generation.save()
    ToolCall.objects.create(
        generation=tool_generation,
        call_id="call_1",
        name="search_help_center",
        arguments='{"query": "install widget"}',
        result='{"articles": [{"title": "Installing the widget"}]}',
    )
    bill_once(first.id, model="gpt-4o-mini", input_tokens=800, output_tokens=32, estimated=False)
    second = make_turn(
        conversation, generations=1, status="interrupted", interrupted=True, assistant_text=f"Half {SCRIPT}"
    )
    bill_once(second.id, model="gpt-4o-mini", input_tokens=100, output_tokens=5, estimated=True)
    return conversation


def test_the_conversation_list_shows_counts_tokens_cost_and_flags(admin_client, conversation):
    [row] = result_rows(admin_client.get("/admin/chat/conversation/"))
    # Turns and model calls share a column; a superuser sees the cost under the tokens.
    assert (row["turn_count"], row["tokens_and_cost"][:3]) == ("2 / 3", "937")
    assert Decimal(row["tokens_and_cost"].removeprefix("937USD ")) > 0
    assert row["flags"] == "1 interrupted"
    assert row["came_from"] == "chat page"


def test_the_conversation_page_reads_like_the_chat(admin_client, conversation):
    page = admin_client.get(f"/admin/chat/conversation/{conversation.pk}/change/").content.decode()
    assert "<p>Let me look.</p>\n<p>Paste the tag.</p>" in page  # the answer rendered, as the visitor saw it
    assert "Half &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert SCRIPT not in page
    assert 'kk-badge--interrupted">interrupted' in page
    assert "2 generations" in page and "1 generation" in page
    assert "search_help_center({&quot;query&quot;: &quot;install widget&quot;})" in page
    assert "Installing the widget" in page
    assert "300 / 12" in page and "420 ms" in page and "tool_calls" in page
    assert "(estimated)" not in page.split("Half")[0]  # round 1 was reported


def test_the_conversation_page_runs_a_fixed_number_of_queries(admin_client, conversation, django_assert_num_queries):
    url = f"/admin/chat/conversation/{conversation.pk}/change/"
    admin_client.get(url)
    with CaptureQueriesContext(connection) as small:
        admin_client.get(url)
    for _ in range(5):
        make_rounds([True, False], conversation=conversation)
    with django_assert_num_queries(len(small.captured_queries)):
        admin_client.get(url)


def test_the_conversation_changelist_query_count_is_fixed(admin_client, django_assert_num_queries):
    def add_conversations(count):
        for n in range(count):
            c = Conversation.objects.create(visitor_hash=f"s{n}")
            make_rounds([True, False], conversation=c)

    add_conversations(2)
    admin_client.get("/admin/chat/conversation/")
    with CaptureQueriesContext(connection) as two:
        admin_client.get("/admin/chat/conversation/")
    add_conversations(10)
    with django_assert_num_queries(len(two.captured_queries)):
        response = admin_client.get("/admin/chat/conversation/")
    assert len(result_rows(response)) == 12


def test_conversations_are_searched_by_text_and_filtered(admin_client, conversation):
    other = Conversation.objects.create(visitor_hash="other")
    make_turn(other, generations=1, assistant_text="About refunds", model="llama3")

    def listed(query):
        return {row["pk"] for row in result_rows(admin_client.get(f"/admin/chat/conversation/?{query}"))}

    mine, theirs = str(conversation.pk), str(other.pk)
    assert listed("q=Paste+the+tag") == {mine}
    assert listed("q=refunds") == {theirs}
    assert listed("turn_status=interrupted") == {mine}
    assert listed("model=llama3") == {theirs}


# --- every page that shows model output escapes it; every list has fixed queries -------------


def test_tool_calls_and_generations_escape_model_output(admin_client):
    turn = make_turn(generations=1, user_text=SCRIPT)
    call = ToolCall.objects.create(
        generation=turn.generations.get(), name=SCRIPT, arguments=SCRIPT, result=SCRIPT, error=SCRIPT
    )
    shows_it = [
        "/admin/chat/toolcall/",
        f"/admin/chat/toolcall/{call.pk}/change/",
        f"/admin/chat/generation/{call.generation_id}/change/",
        "/admin/chat/turn/",
    ]
    for url in [*shows_it, "/admin/chat/generation/"]:
        page = admin_client.get(url).content.decode()
        assert SCRIPT not in page, url
        assert ("&lt;script&gt;" in page) == (url in shows_it), url


@pytest.mark.parametrize("url", ["/admin/chat/generation/", "/admin/chat/toolcall/", "/admin/helpcenter/article/"])
def test_other_changelists_run_a_fixed_number_of_queries(admin_client, django_assert_num_queries, url):
    def add(count):
        for n in range(count):
            turn = make_turn(generations=1)
            ToolCall.objects.create(generation=turn.generations.get(), name="search_help_center", arguments="{}")
            Article.objects.create(title=f"Article {n} {turn.pk}", slug=f"article-{turn.pk}", body="...")

    add(2)
    admin_client.get(url)
    with CaptureQueriesContext(connection) as few:
        admin_client.get(url)
    add(10)
    with django_assert_num_queries(len(few.captured_queries)):
        admin_client.get(url)


# --- what identifies a visitor is never shown ------------------------------------------------

PRIVATE_FIELDS = {"visitor_hash", "client_address", "client_network"}


def test_no_admin_names_a_field_that_identifies_a_visitor(rf, admin_user):
    request = rf.get("/")
    request.user = admin_user
    turn = make_turn(generations=1)

    assert RevokedKey not in admin.site._registry
    for model, model_admin in admin.site._registry.items():
        obj = turn if model is Turn else None
        named = [
            *model_admin.get_list_display(request),
            *model_admin.get_fields(request, obj),
            *model_admin.get_readonly_fields(request, obj),
            *model_admin.get_search_fields(request),
            *model_admin.get_list_filter(request),
        ]
        for inline in model_admin.get_inline_instances(request, obj):
            named += inline.get_fields(request, obj)
        assert [name for name in map(str, named) if any(field in name for field in PRIVATE_FIELDS)] == [], model


def test_no_admin_page_shows_what_identifies_a_visitor(admin_client):
    visitor_hash = "f00dfeed" * 8
    conversation = Conversation.objects.create(visitor_hash=visitor_hash)
    turn = make_turn(conversation, generations=1, client_address="203.0.113.77", client_network="203.0.113.77/32")
    call = ToolCall.objects.create(generation=turn.generations.get(), name="search_help_center", arguments="{}")
    pages = [
        "/admin/chat/conversation/",
        f"/admin/chat/conversation/{conversation.pk}/change/",
        "/admin/chat/turn/",
        f"/admin/chat/turn/{turn.pk}/change/",
        f"/admin/chat/generation/{call.generation_id}/change/",
        f"/admin/chat/toolcall/{call.pk}/change/",
    ]

    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        for secret in (visitor_hash, visitor_hash[:16], "203.0.113.77"):
            assert secret not in page, (url, secret)


def test_the_conversation_list_counts_rows_without_computing_each_rows_figures(admin_client):
    # The page's figures are subqueries for the rows shown; the count of all
    # rows must not compute them for every conversation (Django drops unused
    # annotations from count(), unless a filter uses them).
    make_turn(generations=1)
    with CaptureQueriesContext(connection) as queries:
        admin_client.get("/admin/chat/conversation/")
    counts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    assert counts and not any("chat_turn" in sql or "chat_handoff" in sql for sql in counts)

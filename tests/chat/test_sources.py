"""The sources of an answer: the help articles it links to or names, among
those its searches returned; in `turn.ended`, the history and the page."""

import asyncio
import io
import json

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from chat.engine import history, turns
from chat.engine.assembler import ToolRequest as ToolCall
from chat.engine.rounds import Tool
from chat.models import ToolCall as StoredToolCall
from chat.models import Turn
from chat.sources import search_results, used_articles
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer, text, tool_round

WIDGET = {"id": 1, "title": "Installing the widget", "url": "/help/install-widget/", "snippet": "Paste it."}
WIDGET_COLORS = {
    "id": 2,
    "title": "Widget colors",
    "url": "/help/install-widget-colors/",
    "snippet": "Pick a color.",
}
SSO = {"id": 3, "title": "SSO", "url": "/help/sso/", "snippet": "Use SAML."}
A = {"id": 4, "title": "Article A", "url": "/help/a/", "snippet": "a"}
A_B = {"id": 5, "title": "Article A-B", "url": "/help/a-b/", "snippet": "a-b"}


def source(article):
    return {"title": article["title"], "url": article["url"]}


def results(*articles):
    return [{"articles": list(articles)}]


# --- used_articles: links ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer_text",
    [
        "See [Installing the widget guide](/help/install-widget/).",
        "See [the guide](/help/install-widget/).",
        "See [the guide](https://chat.example.com/help/install-widget/).",
        "See [the guide](http://localhost:8000/help/install-widget/) for more.",
        "See [the guide](/help/install-widget).",
        "See /help/install-widget, then paste it.",
        "See <https://chat.example.com/help/install-widget>.",
    ],
)
def test_an_article_linked_is_a_source(answer_text):
    assert used_articles(answer_text, results(WIDGET, SSO)) == [source(WIDGET)]


# --- used_articles: the section ------------------------------------------------------------------

WIDGET_STEPS = {**WIDGET, "url": "/help/install-widget/#add-the-script-tag"}


@pytest.mark.parametrize(
    "answer_text",
    [
        "See /help/install-widget/#step-2.",
        "See [step 2](/help/install-widget/#step-2).",
        "See [step 2](https://chat.example.com/help/install-widget#step-2), then paste it.",
    ],
)
def test_a_source_links_the_section_the_answer_links(answer_text):
    for article in (WIDGET, WIDGET_STEPS):  # whatever section the search matched
        assert used_articles(answer_text, results(article)) == [
            {"title": "Installing the widget", "url": "/help/install-widget/#step-2"}
        ]


def test_else_a_source_links_the_section_the_search_matched():
    for answer_text in ("Read Installing the widget.", "See [the guide](/help/install-widget/)."):
        assert used_articles(answer_text, results(WIDGET_STEPS)) == [source(WIDGET_STEPS)]


def test_an_article_two_searches_matched_in_two_sections_is_one_source():
    other_section = {**WIDGET, "url": "/help/install-widget/#troubleshooting"}
    text = "See [step 2](/help/install-widget/#step-2) and [this](/help/install-widget/#troubleshooting)."
    found = used_articles(text, [{"articles": [WIDGET_STEPS]}, {"articles": [other_section]}])
    assert found == [{"title": "Installing the widget", "url": "/help/install-widget/#step-2"}]


@pytest.mark.parametrize(
    "answer_text",
    [
        "See [the guide](/help/a-b/).",
        "See [the guide](/help/a-b).",
        "See [the guide](https://chat.example.com/help/a-b/).",
        "See [the guide](/help/a_b/).",
        "See [the guide](/help/ab/).",
    ],
)
def test_a_link_to_a_longer_slug_is_not_a_link_to_the_shorter_one(answer_text):
    found = used_articles(answer_text, results(A, A_B))
    assert source(A) not in found


def test_the_longer_slug_is_found_alone():
    assert used_articles("See [this](/help/a-b/).", results(A, A_B)) == [source(A_B)]
    found = used_articles("See [one](/help/install-widget-colors/).", results(WIDGET, WIDGET_COLORS))
    assert found == [source(WIDGET_COLORS)]


# --- used_articles: titles ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer_text",
    [
        "Read Installing the widget.",
        "Read installing THE widget, it explains everything.",
        'The article "Installing the widget" explains it.',
        "Installing the widget: paste the script tag.",
        "(installing the widget)",
    ],
)
def test_an_article_named_by_title_is_a_source(answer_text):
    assert used_articles(answer_text, results(WIDGET, SSO)) == [source(WIDGET)]


@pytest.mark.parametrize(
    "answer_text",
    ["Our SSOs are many.", "Try ASSO first.", "The sso_enabled flag.", "Pre-installing the widgets helps."],
)
def test_a_title_inside_another_word_is_not_named(answer_text):
    assert used_articles(answer_text, results(SSO, WIDGET)) == []


def test_a_title_with_regex_characters_is_matched_literally():
    article = {"title": "Plans (monthly) + VAT?", "url": "/help/plans/"}
    assert used_articles("See plans (monthly) + vat? for details.", results(article)) == [source(article)]
    assert used_articles("Plans monthly VAT", results(article)) == []


def test_articles_the_answer_ignores_are_not_sources():
    assert used_articles("Paste the script tag before </body>.", results(WIDGET, SSO, A)) == []
    assert used_articles("", results(WIDGET)) == []


def test_no_results_no_sources():
    assert used_articles("See [the guide](/help/install-widget/).", []) == []


# --- used_articles: order and duplicates ----------------------------------------------------------


def test_sources_keep_the_search_order_not_the_answer_order():
    text = "First [SSO](/help/sso/), then [a](/help/a/), then installing the widget."
    assert used_articles(text, results(WIDGET, A, SSO)) == [source(WIDGET), source(A), source(SSO)]


def test_an_article_returned_by_several_searches_is_listed_once():
    text = "See [the guide](/help/install-widget/) and [SSO](/help/sso/). Again: /help/install-widget/."
    found = used_articles(text, [{"articles": [WIDGET, SSO]}, {"articles": [SSO, WIDGET, A]}])
    assert found == [source(WIDGET), source(SSO)]


def test_sources_across_several_searches_follow_the_searches_order():
    text = "[a](/help/a/) and [w](/help/install-widget/)"
    assert used_articles(text, [{"articles": [SSO, A]}, {"articles": [WIDGET]}]) == [source(A), source(WIDGET)]


def test_a_source_is_title_and_url_only():
    [found] = used_articles("See /help/install-widget/.", results(WIDGET))
    assert found == {"title": "Installing the widget", "url": "/help/install-widget/"}


# --- used_articles: malformed results --------------------------------------------------------------


@pytest.mark.parametrize(
    "malformed",
    [
        None,
        "text",
        42,
        ["a", "list"],
        {},
        {"error": "unknown tool"},
        {"articles": None},
        {"articles": "a string"},
        {"articles": 5},
        {"articles": {"title": "Installing the widget", "url": "/help/install-widget/"}},
        {"articles": [None, "x", 3, ["list"]]},
        {"articles": [{"title": "No url"}]},
        {"articles": [{"url": "/help/no-title/"}]},
        {"articles": [{"title": 7, "url": "/help/install-widget/"}]},
        {"articles": [{"title": "Installing the widget", "url": None}]},
        {"articles": [{"title": "", "url": "/help/empty-title/"}]},
        {"articles": [{"title": "Empty url", "url": ""}]},
        {"articles": [{"title": "Root url", "url": "/"}]},
    ],
)
def test_malformed_results_are_ignored(malformed):
    text = "Installing the widget: see /help/install-widget/ and the home page /."
    assert used_articles(text, [malformed, *results(WIDGET), malformed]) == [source(WIDGET)]


# --- search_results ------------------------------------------------------------------------------


def test_search_results_of_round_tool_calls():
    first = {"articles": [WIDGET]}
    second = {"articles": [SSO]}
    calls = [
        ToolCall("c1", "search_help_center", '{"query": "widget"}', result=first),
        ToolCall("c2", "search_help_center", '{"query": "sso"}', result=second),
    ]
    assert search_results(calls) == [first, second]


def test_search_results_of_stored_tool_calls_parse_the_json_text():
    stored = [
        StoredToolCall(name="search_help_center", result=json.dumps({"articles": [WIDGET]})),
        StoredToolCall(name="search_help_center", result=json.dumps({"articles": [SSO, A]})),
    ]
    assert search_results(stored) == [{"articles": [WIDGET]}, {"articles": [SSO, A]}]


def test_search_results_skip_failed_calls_and_unreadable_results():
    calls = [
        ToolCall("c1", "search_help_center", "{", error="bad arguments"),  # result None
        StoredToolCall(name="search_help_center", result="", error="cancelled"),
        StoredToolCall(name="search_help_center", result="{not json"),
        StoredToolCall(name="search_help_center", result=json.dumps({"articles": [A]})),
    ]
    assert search_results(calls) == [{"articles": [A]}]


def test_search_results_ignore_other_tools():
    calls = [
        ToolCall("c1", "lookup_order", "{}", result={"articles": [WIDGET]}),
        StoredToolCall(name="get_weather", result=json.dumps({"articles": [SSO]})),
        StoredToolCall(name="", result=json.dumps({"articles": [SSO]})),
        ToolCall("c2", "search_help_center", "{}", result={"articles": [A]}),
    ]
    assert search_results(calls) == [{"articles": [A]}]


def test_search_results_feed_used_articles():
    calls = [
        ToolCall("c1", "search_help_center", "{}", result={"articles": [WIDGET, SSO]}),
        ToolCall("c2", "lookup_order", "{}", result={"articles": [A]}),
    ]
    text = "See /help/install-widget/ and /help/a/."
    assert used_articles(text, search_results(calls)) == [source(WIDGET)]


# --- end to end: the scripted provider, the real search, the real demo help center ------------------


@pytest.fixture
async def help_center(transactional_db):
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())


@pytest.fixture
async def chat(use_provider, help_center):
    client = await ChatClient.connect()
    assert client.connected
    yield client
    await client.close()


def on_pages(sources):
    """Sources with their links' section anchors left out."""
    return [{**source, "url": source["url"].split("#")[0]} for source in sources]


def stored_results(turn_id):
    return database_sync_to_async(list)(
        StoredToolCall.objects.filter(generation__turn_id=turn_id).values_list("result", flat=True)
    )


@database_sync_to_async
def history_of_turn(turn_id):
    return history.history_of(Turn.objects.get(pk=turn_id).conversation_id)["turns"]


CUSTOMIZE = {
    "title": "Customizing the widget: colors, position and button text",
    "url": "/help/customize-feedback-widget/",
}


@pytest.mark.django_db(transaction=True)
async def test_turn_ended_lists_only_the_article_the_answer_links(chat, use_provider):
    use_provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "widget"})], "Let me look."),
        answer("You can change its look: see [this guide](/help/customize-feedback-widget/)."),
    )
    turn_id = await chat.ask("Can I change the widget's color?")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed"
    # The search returned three articles; the answer linked one.
    [result] = await stored_results(turn_id)
    returned = [{"title": a["title"], "url": a["url"]} for a in json.loads(result)["articles"]]
    assert len(returned) == 3
    assert CUSTOMIZE in on_pages(returned)
    # It links the article's page: its source links the section the search matched.
    matched = next(r for r in returned if r["url"].startswith(CUSTOMIZE["url"]))
    assert ended["sources"] == [matched]

    # The history (the page) and the history frame say the same.
    [entry] = await history_of_turn(turn_id)
    assert entry["sources"] == [matched]
    await chat.send({"type": "history"})
    frame = await chat.receive_until("history")
    assert [t["turn_id"] for t in frame["turns"]] == [turn_id]
    assert frame["turns"][0]["sources"] == [matched]
    assert frame["turns"] == await history_of_turn(turn_id)


@pytest.mark.django_db(transaction=True)
async def test_sources_link_the_section_the_answer_links_not_the_one_searched(chat, use_provider):
    use_provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "set up two-factor authentication"})]),
        answer("Turn it on under Account → Security: see [Turn on 2FA](/help/two-factor-authentication/#turn-on-2fa)."),
    )
    turn_id = await chat.ask("How do I set up two-factor authentication?")
    ended = await chat.finish(turn_id)

    [result] = await stored_results(turn_id)
    searched = json.loads(result)["articles"][0]["url"]
    assert searched.startswith("/help/two-factor-authentication/") and not searched.endswith("#turn-on-2fa")
    title = "Setting up two-factor authentication (2FA)"
    expected = [{"title": title, "url": "/help/two-factor-authentication/#turn-on-2fa"}]
    assert ended["sources"] == expected
    [entry] = await history_of_turn(turn_id)
    assert entry["sources"] == expected


@pytest.mark.django_db(transaction=True)
async def test_an_answer_that_uses_no_article_has_no_sources(chat, use_provider):
    use_provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "install the widget"})]),
        answer("Paste the script tag before the closing body tag."),
        answer("Hello!"),
    )
    searched = await chat.ask("How do I install the widget?")
    assert (await chat.finish(searched))["sources"] == []
    greeted = await chat.ask("hi")
    assert (await chat.finish(greeted))["sources"] == []
    assert [entry["sources"] for entry in await history_of_turn(greeted)] == [[], []]


@pytest.mark.django_db(transaction=True)
async def test_sources_from_two_rounds_of_searches(chat, use_provider):
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "refund"})]),
        tool_round([("c2", "search_help_center", {"query": "single sign-on"})]),
        answer(
            "See [SAML](/help/saml-single-sign-on/) and our Refund Policy. "
            "And [refunds](https://chat.example.com/help/refund-policy)."
        ),
    )
    turn_id = await chat.ask("Refunds and SSO?")
    ended = await chat.finish(turn_id)
    expected = [
        {"title": "Refund policy", "url": "/help/refund-policy/"},
        {"title": "SAML single sign-on (SSO) with Okta, Azure AD and others", "url": "/help/saml-single-sign-on/"},
    ]
    # Each links to the section its search matched.
    assert on_pages(ended["sources"]) == expected
    assert all("#" in source["url"] for source in ended["sources"])
    [entry] = await history_of_turn(turn_id)
    assert entry["sources"] == ended["sources"]


@pytest.mark.django_db(transaction=True)
async def test_an_interrupted_turn_lists_what_it_linked_so_far(chat, use_provider):
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "refund"})]),
        [text("See [refunds](/help/refund-policy/)"), WaitFor(asyncio.Event())],
    )
    turn_id = await chat.ask("refund?")
    while "refund-policy" not in chat.text_of(turn_id):
        await chat.receive_until("delta", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert on_pages(ended["sources"]) == [{"title": "Refund policy", "url": "/help/refund-policy/"}]
    [entry] = await history_of_turn(turn_id)
    assert entry["sources"] == ended["sources"]


@pytest.mark.django_db(transaction=True)
async def test_a_malformed_search_result_still_ends_the_turn(chat, use_provider, monkeypatch):
    """Sources are an extra: a result they cannot read must not cost the
    visitor the turn's end, nor the history."""

    async def odd_search(query):
        return {"articles": ["not an article", None, {"title": "Odd", "url": "/help/odd/"}]}

    monkeypatch.setattr(turns, "TOOLS", [Tool("search_help_center", "Search.", {"type": "object"}, odd_search)])
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "odd"})]),
        answer("See [odd](/help/odd/)."),
    )
    turn_id = await chat.ask("odd?")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert ended["sources"] == [{"title": "Odd", "url": "/help/odd/"}]
    await chat.send({"type": "history"})
    frame = await chat.receive_until("history")
    assert frame["turns"][0]["sources"] == [{"title": "Odd", "url": "/help/odd/"}]


@pytest.mark.django_db(transaction=True)
async def test_the_offline_model_cites_inline_and_its_citations_are_the_sources(help_center, settings):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND = 5000
    settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS = 0
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("How do I get a refund? And how do I export my data as CSV?")
        ended = await chat.finish(turn_id)
    finally:
        await chat.close()
    text = chat.text_of(turn_id)
    assert "Sources:" not in text
    assert "](/help/refund-policy/" in text
    assert "](/help/export-your-data/" in text
    # Each search's best article, linked inline; the other results unused.
    assert on_pages(ended["sources"]) == [
        {"title": "Refund policy", "url": "/help/refund-policy/"},
        {"title": "Exporting your data (posts, votes, users) as CSV or JSON", "url": "/help/export-your-data/"},
    ]
    [entry] = await history_of_turn(turn_id)
    assert entry["sources"] == ended["sources"]

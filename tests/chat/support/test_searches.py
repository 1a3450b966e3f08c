"""Every help-center search the model makes is stored (chat.models.Search),
for the unanswered-questions page: what was searched, its terms, how well the
best article matched, which articles came back, and whether the answer cited
one. Written when the turn ends, however it ends (chat/support/searches.py
record_searches, from finish_turn and from the stale-turn sweeper); blanked
by erasure; logged without what was searched."""

import asyncio
import io
import json
import logging
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.utils import timezone

from billing.models import LedgerEntry
from chat.engine import sweeper
from chat.models import Conversation, Generation, Search, ToolCall, Turn
from chat.support import erasure
from chat.support import searches as search_records
from helpcenter import search
from helpcenter.models import Article
from helpcenter.search import search_sync as search_help_center_sync
from tests.chat.chat_client import ChatClient
from tests.provider import HTTPError, WaitFor, answer, finish, text, tool_fragment, tool_round, usage

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERED = "how do I put the feedback widget on my website?"
WIDGET_URL = "/help/install-feedback-widget/"
UNANSWERED = "Can I pay with bitcoin?"


@pytest.fixture
async def chat(use_provider, settings):
    settings.KOOKEE_PROVIDER_RETRIES = 0
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    client = await ChatClient.connect()
    assert client.connected
    yield client
    await client.close()


@pytest.fixture
def search_log(caplog):
    """The kookee loggers' records at INFO ("kookee" does not propagate)."""
    caplog.set_level(logging.INFO, logger="kookee")
    logger = logging.getLogger("kookee")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def searches(**filters):
    return database_sync_to_async(list)(Search.objects.filter(**filters).order_by("id"))


def widget_article_id():
    return Article.objects.get(slug="install-feedback-widget").id


def searched(query, *, call_id="c1"):
    return tool_round([(call_id, "search_help_center", {"query": query})], "Let me look.")


@pytest.fixture
def turn_of(chat, use_provider):
    async def run(question, *scripts):
        use_provider.queue(*scripts)
        turn_id = await chat.ask(question)
        return turn_id, await chat.finish(turn_id)

    return run


# --- through a real turn ------------------------------------------------------------------------


async def test_a_search_that_found_the_article_and_was_cited(turn_of):
    turn_id, ended = await turn_of(
        ANSWERED,
        searched(ANSWERED),
        answer(f"Paste the script tag, as [the guide]({WIDGET_URL}) shows."),
    )
    assert ended["status"] == "completed"

    [found] = await searches()
    expected = await database_sync_to_async(search_help_center_sync)(ANSWERED)
    assert found.turn_id == turn_id
    assert found.query == ANSWERED
    assert found.terms == search.normalised(ANSWERED) == "feedback put website widget"
    assert found.top_score == expected["top_score"] > 0
    assert found.matched is True
    # The articles that cleared the floor (the closest below it are the model's to judge).
    assert found.article_ids == [a["id"] for a in expected["articles"] if a["confidence"] == "high"]
    assert found.article_ids[0] == await database_sync_to_async(widget_article_id)()
    assert found.cited is True
    assert timezone.now() - found.created_at < timedelta(minutes=1)


async def test_an_answer_that_names_the_article_by_title_cites_it(turn_of):
    title = await database_sync_to_async(lambda: Article.objects.get(slug="install-feedback-widget").title)()
    await turn_of(ANSWERED, searched(ANSWERED), answer(f"See “{title}” in the help center."))
    [found] = await searches()
    assert (found.matched, found.cited) == (True, True)


async def test_a_search_the_answer_did_not_use_is_not_cited(turn_of):
    await turn_of(ANSWERED, searched(ANSWERED), answer("I am not sure, sorry."))
    [found] = await searches()
    assert (found.matched, found.cited) == (True, False)
    assert found.article_ids  # it did find articles


async def test_a_search_with_no_good_match_is_stored_unmatched(turn_of):
    closest = (await database_sync_to_async(search_help_center_sync)(UNANSWERED))["closest"][0]
    # Naming the closest article is no citation: it was returned for the model
    # to judge, not as an answer.
    await turn_of(
        UNANSWERED,
        searched("pay with bitcoin"),
        answer(f"The help center does not cover that; the closest is {closest['title']}."),
    )

    [found] = await searches()
    assert found.query == "pay with bitcoin"
    assert found.terms == "bitcoin pay"
    assert found.matched is False
    assert found.article_ids == []
    assert found.top_score == closest["score"] > 0
    assert found.cited is False


async def test_a_search_that_shares_no_word_with_any_article_has_no_score(turn_of):
    await turn_of("sourdough?", searched("bake sourdough bread"), answer("No idea."))
    [found] = await searches()
    assert (found.matched, found.top_score, found.article_ids, found.terms) == (False, None, [], "bake bread sourdough")


async def test_parallel_searches_are_each_stored(turn_of):
    question = "refund? export?"
    turn_id, _ = await turn_of(
        question,
        tool_round(
            [
                ("c1", "search_help_center", {"query": "get my money back if I cancel"}),
                ("c2", "search_help_center", {"query": "pay with bitcoin"}),
            ]
        ),
        answer("Refunds: see [the policy](/help/refund-policy/)."),
    )
    stored = await searches(turn_id=turn_id)
    assert [(s.query, s.matched, s.cited) for s in stored] == [
        ("get my money back if I cancel", True, True),
        ("pay with bitcoin", False, False),
    ]


async def test_searches_in_several_rounds_are_each_stored(turn_of):
    turn_id, ended = await turn_of(
        ANSWERED,
        searched("pay with bitcoin", call_id="c1"),
        searched(ANSWERED, call_id="c2"),
        answer(f"See [the guide]({WIDGET_URL})."),
    )
    assert ended["generations"] == 3
    stored = await searches(turn_id=turn_id)
    assert [(s.query, s.matched, s.cited) for s in stored] == [
        ("pay with bitcoin", False, False),
        (ANSWERED, True, True),
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        '{"query": ""}',  # the tool refuses an empty query
        '{"query": "   "}',
        '{"q": "widget"}',  # a bad argument
        '{"query": "widg',  # not JSON
        '["widget"]',  # not an object
    ],
)
async def test_a_failed_search_stores_nothing(turn_of, arguments):
    turn_id, ended = await turn_of(
        "widget?",
        [tool_fragment(0, "c1", "search_help_center", arguments), finish("tool_calls"), usage(5, 5)],
        answer("Sorry, I could not search."),
    )
    assert ended["status"] == "completed"
    [call] = await database_sync_to_async(list)(ToolCall.objects.filter(generation__turn_id=turn_id))
    assert call.error  # it did fail
    assert await searches() == []


async def test_a_failed_search_beside_a_good_one_stores_only_the_good_one(turn_of):
    turn_id, _ = await turn_of(
        ANSWERED,
        tool_round(
            [
                ("c1", "search_help_center", {"query": ""}),
                ("c2", "search_help_center", {"query": ANSWERED}),
            ]
        ),
        answer("Done."),
    )
    assert [s.query for s in await searches(turn_id=turn_id)] == [ANSWERED]


async def test_a_stopped_turn_still_stores_its_searches(chat, use_provider):
    use_provider.queue(
        searched(ANSWERED),
        [text(f"See [the guide]({WIDGET_URL}) for"), WaitFor(asyncio.Event()), text(" never sent")],
    )
    turn_id = await chat.ask(ANSWERED)
    while WIDGET_URL not in chat.text_of(turn_id):
        await chat.receive_until("delta", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["reason"]) == ("interrupted", "stopped")

    [found] = await searches(turn_id=turn_id)
    assert (found.query, found.matched, found.cited) == (ANSWERED, True, True)


async def test_a_turn_that_fails_after_searching_still_stores_its_search(turn_of):
    turn_id, ended = await turn_of(
        UNANSWERED,
        searched("pay with bitcoin"),
        [HTTPError(503, {"error": {"message": "unavailable"}})],
    )
    assert ended["status"] == "failed"
    [found] = await searches(turn_id=turn_id)
    assert (found.query, found.matched, found.cited) == ("pay with bitcoin", False, False)


async def test_a_long_query_is_stored_whole_with_its_terms_cut_to_the_column(turn_of):
    query = " ".join(f"word{number:03d}" for number in range(80))
    await turn_of("many words", searched(query), answer("Nothing."))
    [found] = await searches()
    assert found.query == query
    assert len(found.terms) <= Search._meta.get_field("terms").max_length
    assert found.terms == search.normalised(query)[:200]


async def test_a_turn_without_a_search_stores_none(turn_of):
    await turn_of("hi", answer("Hello!"))
    assert await searches() == []


# --- the log ----------------------------------------------------------------------------------


async def test_each_search_is_logged_without_what_was_searched(turn_of, search_log):
    turn_id, _ = await turn_of(
        "Can I pay with zorblecoin?",
        tool_round(
            [
                ("c1", "search_help_center", {"query": "pay with zorblecoin"}),
                ("c2", "search_help_center", {"query": "feedback widget zorblecoin website"}),
            ]
        ),
        answer(f"Not zorblecoin; but see [the guide]({WIDGET_URL})."),
    )
    stored = await searches(turn_id=turn_id)
    lines = [r.getMessage() for r in search_log.records if r.name == "kookee.searches"]
    assert lines == [
        f"search turn={turn_id} top_score={s.top_score} articles={s.article_ids} matched={s.matched} cited={s.cited}"
        for s in stored
    ]
    assert lines[0].endswith("articles=[] matched=False cited=False")
    assert lines[1].endswith("matched=True cited=True")
    # Privacy: no log line carries the visitor's or the model's words.
    everything = [r.getMessage() for r in search_log.records]
    assert everything
    assert not [line for line in everything if "zorblecoin" in line.lower()]


# --- erasure ----------------------------------------------------------------------------------


async def test_erasure_blanks_what_was_searched_and_keeps_the_numbers(turn_of):
    turn_id, _ = await turn_of(ANSWERED, searched(ANSWERED), answer(f"See [the guide]({WIDGET_URL})."))
    [before] = await searches()
    conversation_id = await database_sync_to_async(lambda: Turn.objects.get(pk=turn_id).conversation_id)()

    await database_sync_to_async(erasure.erase_conversations)([conversation_id], by="test")

    [after] = await searches()
    assert (after.query, after.terms) == ("", "")
    assert (after.top_score, after.matched, after.article_ids, after.cited) == (
        before.top_score,
        before.matched,
        before.article_ids,
        before.cited,
    )


# --- the stale-turn sweeper -------------------------------------------------------------------


def stale_turn_with_searches(answer_text, *queries):
    """A turn a dead process left after its first round, which searched."""
    conversation = Conversation.objects.create(visitor_hash="dead-process")
    heartbeat = timezone.now() - timedelta(minutes=5)
    turn = Turn.objects.create(
        conversation=conversation,
        user_text="question",
        assistant_text=answer_text,
        model="gpt-4o-mini",
        heartbeat_at=heartbeat,
        checkpoint_round=2,
    )
    generation = Generation.objects.create(
        turn=turn, round=1, finish_reason="tool_calls", started_at=heartbeat, ended_at=heartbeat
    )
    for number, query in enumerate(queries):
        ToolCall.objects.create(
            generation=generation,
            call_id=f"c{number}",
            name="search_help_center",
            arguments=json.dumps({"query": query}),
            result=json.dumps(search_help_center_sync(query)),
        )
    ToolCall.objects.create(
        generation=generation,
        call_id="failed",
        name="search_help_center",
        arguments='{"query": ""}',
        error="ValueError: query must be a non-empty string",
    )
    return turn


def test_the_sweeper_stores_the_searches_of_a_turn_it_closes():
    call_command("load_demo_help_center", stdout=io.StringIO())
    turn = stale_turn_with_searches(f"Let me look.\n\nSee [the guide]({WIDGET_URL})", ANSWERED, "pay with bitcoin")

    assert sweeper.close_stale_turns(stale_after_seconds=30) == [("dead-process", turn.id)]

    stored = list(Search.objects.filter(turn=turn).order_by("id"))
    assert [(s.query, s.terms, s.matched, s.cited) for s in stored] == [
        (ANSWERED, search.normalised(ANSWERED), True, True),
        ("pay with bitcoin", "bitcoin pay", False, False),
    ]
    assert stored[0].article_ids[0] == widget_article_id()
    assert stored[0].top_score == search_help_center_sync(ANSWERED)["top_score"]
    assert stored[1].article_ids == []
    # Once: a second sweep finds nothing to close.
    assert sweeper.close_stale_turns(stale_after_seconds=30) == []
    assert Search.objects.filter(turn=turn).count() == 2


@pytest.mark.django_db(transaction=True)
async def test_a_search_that_cannot_be_recorded_costs_the_record_not_the_bill(chat, use_provider, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("the search table is gone")

    monkeypatch.setattr(search_records, "_record_searches", broken)
    use_provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "install the widget"})]),
        answer("Paste the snippet."),
    )
    turn_id = await chat.ask("How do I install the widget?")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed"
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1
    assert "its searches were not recorded" in caplog.text

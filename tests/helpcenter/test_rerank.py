"""A second reading of a search's best candidates by a provider's rerank
endpoint (helpcenter/rerank.py), scripted at the wire
(tests/rerank_server.py): its order and its scores decide the results and
their confidence; any failure keeps the search's own order and answer; what
it read is billed, with the turn or with the help pages' search."""

import io
import json
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from billing.models import EmbeddingEntry, LedgerEntry, Price
from chat.models import ToolCall
from helpcenter import fusion, index, rerank, search
from tests.chat.chat_client import ChatClient
from tests.provider import answer, tool_round
from tests.rerank_server import RerankServer

MODEL = "scripted-rerank"
QUERY = "refund for an annual plan"


@pytest.fixture
def help_center(settings, db):
    settings.KOOKEE_EMBEDDINGS = "off"  # by words: the order is the search's, known here
    call_command("load_demo_help_center", stdout=io.StringIO())


@pytest.fixture
def reranker(settings):
    with RerankServer() as server:
        settings.KOOKEE_RERANK_MODEL = MODEL
        settings.KOOKEE_RERANK_BASE_URL = server.base_url
        settings.KOOKEE_RERANK_API_KEY = "rerank-key"
        settings.KOOKEE_RERANK_TIMEOUT = 0.5
        settings.KOOKEE_RERANK_CANDIDATES = 8
        for reason in search.fallbacks:
            search.fallbacks[reason] = 0
        yield server


def own_order(query=QUERY, limit=8):
    """The search's candidates without a reranker: (title, url) best first."""
    snapshot = index.current_sync()
    return [snapshot.index.by_id[c.shown].title for c in fusion.candidates(snapshot, query, None, "", limit)]


def titles(result):
    return [a["title"] for a in result["articles"]]


def test_the_reranker_reads_the_candidates_and_its_order_decides(help_center, reranker):
    candidates = own_order()
    assert len(candidates) == 8
    chosen = candidates[5]  # sixth by words: out of the three without a reranker
    reranker.prefer = chosen

    result = search.search_sync(QUERY)

    assert titles(result)[0] == chosen
    assert [a["confidence"] for a in result["articles"]] == ["high", "low", "low"]
    assert "no_good_match" not in result
    # The two after it keep the search's own order (equal scores).
    assert titles(result)[1:] == [t for t in candidates if t != chosen][:2]
    # It read every candidate once: the passage each comes through, headed by its title.
    (request,) = reranker.requests
    assert request["path"] == "/v1/rerank" and request["auth"] == "Bearer rerank-key"
    body = request["body"]
    assert (body["model"], body["query"]) == (MODEL, QUERY)
    assert [d.split("\n")[0] for d in body["documents"]] == candidates
    assert all(0 < len(d) <= search.RERANK_CHARS for d in body["documents"])


def test_when_no_candidate_reaches_the_threshold_there_is_no_good_match(help_center, reranker):
    reranker.prefer = "no document says this"
    result = search.search_sync(QUERY)
    assert result["no_good_match"] is True
    assert [a["confidence"] for a in result["articles"]] == ["low"] * 3
    assert [c["title"] for c in result["closest"]] == own_order()[:3]


def test_the_threshold_is_a_setting(help_center, reranker, settings):
    reranker.prefer = "no document says this"  # every score 0.1
    settings.KOOKEE_RERANK_THRESHOLD = 0.05
    assert [a["confidence"] for a in search.search_sync(QUERY)["articles"]] == ["high"] * 3


@pytest.mark.parametrize("shape", ["results", "data", "list"])
def test_the_answers_of_cohere_jina_voyage_and_tei_like_endpoints_are_read(help_center, reranker, shape):
    reranker.shape = shape
    reranker.prefer = own_order()[4]
    assert titles(search.search_sync(QUERY))[0] == own_order()[4]


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 500},
        {"status": 429},
        {"stall": 1.0},  # past KOOKEE_RERANK_TIMEOUT
        {"garbage": {"results": [{"index": 99, "relevance_score": 0.9}]}},
        {"garbage": {"results": [{"index": 0, "relevance_score": "high"}]}},
        {"garbage": {"results": []}},
        {"garbage": {"detail": "not a ranking"}},
    ],
)
def test_a_failed_rerank_keeps_the_search_as_it_was_and_bills_nothing(help_center, reranker, settings, fault):
    settings.KOOKEE_RERANK_MODEL = ""
    before = search.search_sync(QUERY)
    settings.KOOKEE_RERANK_MODEL = MODEL
    for name, value in fault.items():
        setattr(reranker, name, value)
    reranker.prefer = own_order()[5]

    after = search.search_sync(QUERY)

    assert after == before
    assert len(reranker.requests) == 1
    reason = "rerank_timeout" if "stall" in fault else "rerank_error"
    assert search.fallbacks[reason] == 1
    assert not EmbeddingEntry.objects.exists()


def test_the_help_pages_rerank_is_billed_without_a_turn(help_center, reranker):
    Price.objects.create(model=MODEL, input_per_million=Decimal("2"), output_per_million=Decimal("0"))
    reranker.prefer = own_order()[1]
    search.search_sync(QUERY)
    entry = EmbeddingEntry.objects.get()
    body = reranker.requests[0]["body"]
    tokens = len(QUERY.split()) * len(body["documents"]) + sum(len(d.split()) for d in body["documents"])
    assert (entry.purpose, entry.turn_id, entry.model, entry.input_tokens) == ("rerank", None, MODEL, tokens)
    assert entry.cost == Decimal(tokens) * Decimal("2") / 1_000_000


def test_a_rerank_without_usage_is_billed_an_estimate(help_center, reranker):
    reranker.usage = False
    search.search_sync(QUERY)
    entry = EmbeddingEntry.objects.get()
    assert entry.purpose == "rerank" and entry.input_tokens > len(QUERY.split()) and entry.cost is None


def test_the_help_page_lists_what_the_reranker_judged_an_answer(help_center, reranker, client):
    chosen = own_order()[6]
    reranker.prefer = chosen
    page = client.get("/help/", {"q": QUERY}).content.decode()
    assert chosen in page
    assert own_order()[0] not in page  # the search's own first: scored 0.1, not an answer


def test_off_without_a_model(help_center, reranker, settings):
    settings.KOOKEE_RERANK_MODEL = ""
    assert rerank.reranker() is None
    search.search_sync(QUERY)
    assert reranker.requests == []


# --- the endpoint's answers, read --------------------------------------------------------------


def test_scores_come_back_in_the_documents_order_and_any_left_out_rank_last():
    found = rerank.ranking_of({"results": [{"index": 2, "relevance_score": 0.7}, {"index": 0, "score": 0.2}]}, 3)
    assert found.scores == [0.2, float("-inf"), 0.7] and found.tokens is None
    voyage = {"data": [{"index": 0, "relevance_score": 1}], "usage": {"total_tokens": 9}}
    assert rerank.ranking_of(voyage, 1).tokens == 9


@pytest.mark.parametrize(
    "body",
    [
        None,
        "ranked",
        {"results": None},
        {"results": [{"index": True, "relevance_score": 0.5}]},
        {"results": [{"index": -1, "relevance_score": 0.5}]},
        {"results": [{"index": 0, "relevance_score": float("nan")}]},
        {"results": [{"index": 0}]},
        {"results": ["0.5"]},
    ],
)
def test_an_answer_that_is_not_a_ranking_is_refused(body):
    with pytest.raises(rerank.RerankError):
        rerank.ranking_of(body, 2)


# --- through a visitor's turn ---------------------------------------------------------------------


@pytest.fixture
async def chat(use_provider, reranker, settings, transactional_db):
    settings.KOOKEE_EMBEDDINGS = "off"
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    client = await ChatClient.connect()
    yield client
    await client.close()


def searched(query):
    return [tool_round([("call_1", "search_help_center", {"query": query})]), answer("See the refund policy.")]


@pytest.mark.django_db(transaction=True)
async def test_a_turns_rerank_is_billed_with_the_turn_and_its_order_is_what_the_model_reads(
    chat, use_provider, reranker
):
    chosen = (await database_sync_to_async(own_order)())[4]
    reranker.prefer = chosen
    use_provider.queue(*searched(QUERY))
    turn_id = await chat.ask("Can I get a refund for my annual plan?")
    assert (await chat.finish(turn_id))["status"] == "completed"
    entry = await database_sync_to_async(EmbeddingEntry.objects.get)()
    assert (entry.purpose, entry.turn_id, entry.model) == ("rerank", turn_id, MODEL)
    result = await database_sync_to_async(lambda: ToolCall.objects.get(generation__turn_id=turn_id).result)()
    assert json.loads(result)["articles"][0]["title"] == chosen


@pytest.mark.django_db(transaction=True)
async def test_a_stop_while_reranking_ends_the_turn_once_and_bills_it_once(chat, use_provider, reranker):
    reranker.stall = 0.4  # the endpoint is slow; the visitor stops meanwhile
    use_provider.queue(*searched(QUERY))
    turn_id = await chat.ask("Can I get a refund for my annual plan?")
    await chat.receive_until("tool", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert [f["type"] for f in chat.frames if f.get("turn_id") == turn_id].count("turn.ended") == 1
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1

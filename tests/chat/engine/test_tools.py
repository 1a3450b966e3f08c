"""The search tool (chat/engine/tools.py): a visitor's turn searching by
meaning through a provider's /v1/embeddings (scripted at the wire,
tests/embeddings_server.py): the query's embedding is billed with the turn,
and a search whose query cannot be embedded still answers, by words."""

import io
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from billing.models import EmbeddingEntry, LedgerEntry, Price
from chat.models import ToolCall
from helpcenter import embeddings, indexer
from tests.chat.chat_client import ChatClient
from tests.embeddings_server import EmbeddingsServer, Fault
from tests.provider import answer, tool_round

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def embedded(settings, transactional_db):
    with EmbeddingsServer() as server:
        settings.KOOKEE_EMBEDDINGS = "provider"
        settings.KOOKEE_EMBEDDINGS_MODEL = "scripted-embed"
        settings.KOOKEE_EMBEDDINGS_BASE_URL = server.base_url
        settings.KOOKEE_EMBEDDINGS_TIMEOUT = 0.5
        embeddings._queries.clear()
        await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
        await database_sync_to_async(indexer.embed_missing)()
        server.requests.clear()
        yield server


@pytest.fixture
async def chat(use_provider, embedded):
    client = await ChatClient.connect()
    yield client
    await client.close()


def searched(query: str) -> list:
    return [tool_round([("call_1", "search_help_center", {"query": query})]), answer("See the refund policy.")]


async def test_a_turns_query_embedding_is_billed_with_the_turn(chat, use_provider, embedded):
    await database_sync_to_async(Price.objects.create)(
        model="scripted-embed", input_per_million=Decimal("0.02"), output_per_million=Decimal("0")
    )
    use_provider.queue(*searched("refund for an annual plan"))
    turn_id = await chat.ask("Can I get a refund for my annual plan?")
    assert (await chat.finish(turn_id))["status"] == "completed"
    assert embedded.inputs() == [["refund for an annual plan"]]
    entry = await database_sync_to_async(EmbeddingEntry.objects.get)(purpose="search")
    assert (entry.turn_id, entry.model, entry.input_tokens) == (turn_id, "scripted-embed", 5)
    assert entry.cost == Decimal(5) * Decimal("0.02") / 1_000_000
    # The turn's own ledger entry is as before: one, for the chat model.
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1
    result = await database_sync_to_async(lambda: ToolCall.objects.get(generation__turn_id=turn_id).result)()
    assert '"similarity"' in result and "/help/refund-policy/#" in result


async def test_a_search_whose_query_cannot_be_embedded_still_answers_by_words(chat, use_provider, embedded):
    embedded.always = Fault(status=500)
    use_provider.queue(*searched("refund for an annual plan"))
    turn_id = await chat.ask("Can I get a refund for my annual plan?")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    result = await database_sync_to_async(lambda: ToolCall.objects.get(generation__turn_id=turn_id).result)()
    assert '"by_words_only": true' in result and "/help/refund-policy/" in result
    assert not await database_sync_to_async(EmbeddingEntry.objects.filter(purpose="search").exists)()


async def test_a_stop_while_the_query_is_being_embedded_ends_the_turn_once(chat, use_provider, embedded):
    embedded.always = Fault(stall=0.4)  # the endpoint is slow; the visitor stops meanwhile
    use_provider.queue(*searched("refund for an annual plan"))
    turn_id = await chat.ask("Can I get a refund for my annual plan?")
    await chat.receive_until("tool", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert [f["type"] for f in chat.frames if f.get("turn_id") == turn_id].count("turn.ended") == 1
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1

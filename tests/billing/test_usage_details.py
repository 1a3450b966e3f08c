"""Cached input and reasoning tokens, from the provider's chunk to the
generation, the ledger entry, its cost and finance's CSV."""

import csv
import io
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.urls import reverse

from billing.models import LedgerEntry, Price
from chat.models import Generation
from tests.chat.chat_client import ChatClient
from tests.provider import CHUNK_BASE, DONE, _usage, chunk, finish, text, tool_round

pytestmark = pytest.mark.django_db(transaction=True)


def detailed_usage(prompt, completion, cached, reasoning):
    usage = {
        **_usage(prompt, completion),
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
    }
    return {**CHUNK_BASE, "choices": [], "usage": usage}


@database_sync_to_async
def export(django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "a-long-test-password")
    client = Client()
    client.force_login(user)
    response = client.get(reverse("admin:billing_ledgerentry_export"))
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


async def test_cached_and_reasoning_tokens_flow_from_chunk_to_csv(use_provider, django_user_model):
    await database_sync_to_async(Price.objects.create)(
        model="gpt-4o-mini", input_per_million="0.15", cached_input_per_million="0.075", output_per_million="0.60"
    )
    search_round = tool_round([("c1", "search_help_center", {"query": "export"})])
    search_round[-2] = detailed_usage(1200, 40, 1024, 30)  # its usage chunk, before [DONE]
    use_provider.queue(
        search_round,
        [
            chunk(delta={"role": "assistant"}),
            text("Use Export."),
            finish("stop"),
            detailed_usage(1400, 90, 1152, 60),
            DONE,
        ],
    )
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("How do I export?")
        ended = await chat.finish(turn_id)
    finally:
        await chat.close()
    assert ended["usage"] == {"input_tokens": 2600, "output_tokens": 130, "estimated": False}

    generations = await database_sync_to_async(
        lambda: list(Generation.objects.order_by("round").values_list("cached_input_tokens", "reasoning_tokens"))
    )()
    assert generations == [(1024, 30), (1152, 60)]
    entry = await database_sync_to_async(LedgerEntry.objects.get)(turn_id=turn_id)
    assert (entry.cached_input_tokens, entry.reasoning_tokens) == (2176, 90)
    # 424 uncached x 0.15 + 2,176 cached x 0.075 + 130 x 0.60, per million
    assert entry.cost == Decimal("0.0003048")
    [row] = await export(django_user_model)
    assert (row["cached_input_tokens"], row["reasoning_tokens"], row["cost"]) == ("2176", "90", "0.0003048")
    assert (row["input_per_million"], row["cached_input_per_million"]) == ("0.15", "0.075")

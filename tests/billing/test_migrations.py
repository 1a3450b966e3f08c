"""The billing migrations run on ledgers written before them."""

from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("billing", "0003_initial_prices"), ("chat", "0006_turn_stop_reason_owner")]
AFTER = [("billing", "0005_seeded_cached_input_rates")]


@pytest.mark.django_db(transaction=True)
def test_silent_zeros_become_unpriced_and_used_seed_prices_are_superseded():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Conversation, Turn = old.get_model("chat", "Conversation"), old.get_model("chat", "Turn")
    LedgerEntry, Price = old.get_model("billing", "LedgerEntry"), old.get_model("billing", "Price")
    Price.objects.filter(model="gpt-4.1").update(input_per_million=3)  # finance's own price
    conversation = Conversation.objects.create(visitor_hash="h")

    def entry(model, cost):
        turn = Turn.objects.create(conversation=conversation, user_text="q", model=model, status="completed")
        return LedgerEntry.objects.create(
            turn=turn, model=model, input_tokens=10, output_tokens=5, estimated=False, cost=cost
        )

    unknown = entry("mystery-model", 0)  # billed 0 for want of a price
    offline = entry("kookee-offline", 0)  # free by its price
    empty = entry("gpt-4o", 0)  # priced, and 0 for want of tokens... as if refused
    LedgerEntry.objects.filter(pk=empty.pk).update(input_tokens=0, output_tokens=0)
    priced = entry("gpt-4o-mini", Decimal("0.0000045"))  # 10 x 0.15 + 5 x 0.60 per million
    edited = entry("gpt-4.1-nano", Decimal("0.0000099"))  # its price has changed since: not reproducible

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    LedgerEntry, Price = new.get_model("billing", "LedgerEntry"), new.get_model("billing", "Price")

    costs = dict(LedgerEntry.objects.values_list("pk", "cost"))
    assert costs == {
        unknown.pk: None,
        offline.pk: Decimal(0),
        empty.pk: Decimal(0),
        priced.pk: Decimal("0.0000045"),
        edited.pk: Decimal("0.0000099"),
    }
    recorded = {e.pk: (e.price and e.price.model, e.input_per_million) for e in LedgerEntry.objects.all()}
    assert recorded[priced.pk] == ("gpt-4o-mini", Decimal("0.15"))
    assert recorded[offline.pk] == ("kookee-offline", Decimal(0))
    assert recorded[unknown.pk] == recorded[edited.pk] == (None, None)
    # A seeded price that billed entries is superseded by one with the cached
    # rate; one that billed none takes the rate in place; finance's own is left.
    mini = list(Price.objects.filter(model="gpt-4o-mini").order_by("effective_from"))
    assert [p.cached_input_per_million for p in mini] == [None, Decimal("0.075")]
    assert Price.objects.get(model="gpt-4.1-mini").cached_input_per_million == Decimal("0.10")
    assert Price.objects.get(model="gpt-4.1").cached_input_per_million is None

    # And back: an unpriced cost is 0 again, as the column then requires.
    executor.loader.build_graph()
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    assert old.get_model("billing", "LedgerEntry").objects.get(pk=unknown.pk).cost == 0

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_a_used_seed_price_is_superseded_not_edited():
    middle = [
        ("billing", "0004_usage_details_price_record_calibration"),
        ("chat", "0007_generation_cached_reasoning_tokens"),
    ]
    executor = MigrationExecutor(connection)
    executor.migrate(middle)
    old = executor.loader.project_state(middle).apps
    Conversation, Turn = old.get_model("chat", "Conversation"), old.get_model("chat", "Turn")
    LedgerEntry, Price = old.get_model("billing", "LedgerEntry"), old.get_model("billing", "Price")
    # As on a site that billed before 0005 (the test database ran it on no entries).
    Price.objects.filter(model="gpt-4o").update(cached_input_per_million=None)
    seed = Price.objects.get(model="gpt-4o")
    turn = Turn.objects.create(
        conversation=Conversation.objects.create(visitor_hash="h"), user_text="q", model="gpt-4o", status="completed"
    )
    LedgerEntry.objects.create(
        turn=turn, model="gpt-4o", input_tokens=1, output_tokens=1, estimated=False, cost=0, price=seed
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    Price = executor.loader.project_state(AFTER).apps.get_model("billing", "Price")

    rows = list(Price.objects.filter(model="gpt-4o").order_by("effective_from"))
    assert [(p.pk, p.cached_input_per_million) for p in rows] == [(seed.pk, None), (rows[1].pk, Decimal("1.25"))]
    assert (rows[1].input_per_million, rows[1].output_per_million) == (seed.input_per_million, seed.output_per_million)

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

"""Billing: one append-only ledger entry per turn, priced from the price table."""

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import LedgerEntry, Price, PriceInUse
from billing.services import bill_once, cost_of, price_for
from chat.engine import records
from chat.engine.rounds import Round
from chat.models import Generation, Turn
from chat.visitors.identity import Visitor, hash_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def turn_id():
    visitor = Visitor.of(hash_key("k"), "203.0.113.7")
    turn_id = records.start_turn(visitor, None, "question", "gpt-4o-mini").turn_id
    return turn_id


@pytest.fixture
def billing_log(caplog):
    caplog.set_level(logging.WARNING, logger="kookee.billing")
    return caplog


def bill(turn_id, **overrides):
    figures = {"model": "gpt-4o-mini", "input_tokens": 1000, "output_tokens": 500, "estimated": False}
    return bill_once(turn_id, **{**figures, **overrides})


def row(entry):
    return LedgerEntry.objects.filter(pk=entry.pk).values().get()


# --- exactly once ----------------------------------------------------------------------------


def test_bill_once_writes_one_entry(turn_id):
    entry = bill(turn_id)

    stored = LedgerEntry.objects.get()
    assert stored.pk == entry.pk
    assert stored.turn_id == turn_id
    assert stored.model == "gpt-4o-mini"
    assert (stored.input_tokens, stored.output_tokens, stored.estimated) == (1000, 500, False)
    assert stored.cost == Decimal("0.00045")


def test_a_second_bill_once_returns_the_first_entry_unchanged(turn_id):
    first = bill(turn_id)
    before = row(first)

    second = bill(turn_id, model="gpt-4o", input_tokens=9, output_tokens=9, estimated=True)

    assert second.pk == first.pk
    assert (second.model, second.input_tokens, second.output_tokens, second.estimated) == (
        "gpt-4o-mini",
        1000,
        500,
        False,
    )
    assert second.cost == Decimal("0.00045")
    assert LedgerEntry.objects.count() == 1
    assert row(first) == before


def test_the_database_refuses_a_second_entry_for_a_turn(turn_id):
    bill(turn_id)

    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerEntry.objects.create(
            turn_id=turn_id, model="gpt-4o", input_tokens=1, output_tokens=1, estimated=False, cost=0
        )

    assert LedgerEntry.objects.count() == 1


# --- prices ----------------------------------------------------------------------------------


def priced(model, input_tokens, output_tokens, cached_input_tokens=0):
    price = price_for(model)
    return None if price is None else cost_of(price, input_tokens, output_tokens, cached_input_tokens)


def test_cost_is_an_exact_decimal_per_million_tokens():
    # 1,234,567 x 0.15 + 89,012 x 0.60 = 185,185.05 + 53,407.2 = 238,592.25 per million
    cost = priced("gpt-4o-mini", 1_234_567, 89_012)

    assert isinstance(cost, Decimal)
    assert cost == Decimal("0.23859225")


def test_a_dated_snapshot_is_priced_as_its_model():
    assert priced("gpt-4o-mini-2024-07-18", 1_000_000, 1_000_000) == Decimal("0.75")
    # and not as the shorter prefix "gpt-4o" (2.50 + 10.00)
    assert priced("gpt-4o-2024-08-06", 1_000_000, 1_000_000) == Decimal("12.50")


def test_the_longest_matching_name_wins():
    assert priced("gpt-4.1-mini", 1_000_000, 1_000_000) == Decimal("2.00")
    assert priced("gpt-4.1-mini-2025-04-14", 1_000_000, 1_000_000) == Decimal("2.00")
    assert priced("gpt-4.1", 1_000_000, 1_000_000) == Decimal("10.00")
    assert priced("gpt-4.1-2025-04-14", 1_000_000, 1_000_000) == Decimal("10.00")


def test_the_offline_model_costs_nothing(billing_log, turn_id):
    entry = bill(turn_id, model="kookee-offline")

    assert entry.cost == Decimal(0)
    assert entry.price.model == "kookee-offline"
    assert billing_log.records == []


def test_an_unknown_model_is_unpriced_not_free_and_is_logged(billing_log, turn_id):
    entry = bill(turn_id, model="mystery-model-7b")

    stored = LedgerEntry.objects.get()
    assert entry.cost is None
    assert stored.cost is None
    assert (stored.price, stored.input_per_million, stored.output_per_million) == (None, None, None)
    assert (stored.input_tokens, stored.output_tokens) == (1000, 500)  # the usage is kept whole
    warnings = [r for r in billing_log.records if r.name == "kookee.billing"]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "mystery-model-7b" in warnings[0].getMessage()
    assert "unpriced" in warnings[0].getMessage()


def test_a_known_model_is_not_logged(billing_log, turn_id):
    bill(turn_id, model="gpt-4o-mini")

    assert billing_log.records == []


@pytest.mark.parametrize("model", ["GPT-4o-mini", "gpt-4O-MINI-2024-07-18", "OpenAI/GPT-4o-mini"])
def test_model_names_match_prices_in_any_case(model):
    assert price_for(model).model == "gpt-4o-mini"


def test_a_price_name_in_another_case_prices_the_model():
    Price.objects.create(model="Mistral-Large", input_per_million=2, output_per_million=6)

    assert price_for("mistral-large-2407").model == "Mistral-Large"


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o-audio-preview",  # not gpt-4o's rates: another model
        "gpt-4o-realtime-preview-2024-12-17",
        "gpt-4.1-turbo",
        "gpt-4o-mini-tts",
        "gpt-4omega",
        "gpt-4.10",
    ],
)
def test_a_longer_model_name_is_not_priced_as_a_shorter_price(model):
    assert price_for(model) is None


def test_a_price_for_the_longer_name_is_used_once_there_is_one():
    Price.objects.create(model="gpt-4o-audio-preview", input_per_million=40, output_per_million=80)

    assert price_for("gpt-4o-audio-preview-2024-12-17").model == "gpt-4o-audio-preview"
    assert price_for("gpt-4o-2024-08-06").model == "gpt-4o"


def test_a_price_name_is_unique_whatever_its_case():
    Price.objects.create(model="Acme-1", input_per_million=1, output_per_million=1, effective_from=START)
    with pytest.raises(IntegrityError), transaction.atomic():
        Price.objects.create(model="acme-1", input_per_million=2, output_per_million=2, effective_from=START)


START = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("model", "priced_as"),
    [
        ("openai/gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini:latest", "gpt-4o-mini"),
        ("gpt-4o-mini@20240718", "gpt-4o-mini"),
        ("gpt-4o-mini-0718", "gpt-4o-mini"),
        ("gpt-4.10", None),
        ("gpt-4omega", None),
    ],
)
def test_model_names_match_prices_at_word_boundaries(model, priced_as):
    price = price_for(model)
    assert (price.model if price else None) == priced_as


# --- cached input, reasoning ------------------------------------------------------------------


def test_the_seeded_openai_prices_have_their_cached_rates(turn_id):
    entry = bill(turn_id, input_tokens=1_000_000, cached_input_tokens=1_000_000, output_tokens=0)

    assert entry.cost == Decimal("0.075")  # gpt-4o-mini's cached input: half its input rate


def test_cached_input_costs_the_cached_rate(turn_id):
    Price.objects.create(
        model="cachey",
        input_per_million=Decimal("1.00"),
        cached_input_per_million=Decimal("0.10"),
        output_per_million=Decimal("4.00"),
    )

    entry = bill(turn_id, model="cachey", input_tokens=1_000_000, cached_input_tokens=600_000, output_tokens=0)

    # 400,000 x 1.00 + 600,000 x 0.10 per million
    assert entry.cost == Decimal("0.46")
    stored = LedgerEntry.objects.get()
    assert (stored.cached_input_tokens, stored.cached_input_per_million) == (600_000, Decimal("0.10"))


def test_without_a_cached_rate_cached_input_costs_the_input_rate(turn_id):
    Price.objects.create(model="plain", input_per_million=Decimal("0.15"), output_per_million=Decimal("0.60"))

    entry = bill(turn_id, model="plain", input_tokens=1_000_000, cached_input_tokens=600_000, output_tokens=0)

    assert entry.cost == Decimal("0.15")
    assert LedgerEntry.objects.get().cached_input_per_million is None


def test_reasoning_tokens_are_recorded_and_billed_as_the_output_they_are_part_of(turn_id):
    entry = bill(turn_id, input_tokens=0, output_tokens=1_000_000, reasoning_tokens=700_000)

    assert entry.cost == Decimal("0.60")
    assert LedgerEntry.objects.get().reasoning_tokens == 700_000


def test_parts_never_exceed_their_whole(turn_id):
    bill(turn_id, input_tokens=10, cached_input_tokens=50, output_tokens=5, reasoning_tokens=9)

    stored = LedgerEntry.objects.get()
    assert (stored.cached_input_tokens, stored.reasoning_tokens) == (10, 5)


# --- reproducible costs -------------------------------------------------------------------------


def test_an_entry_records_the_price_and_rates_it_used(turn_id):
    entry = bill(turn_id)

    stored = LedgerEntry.objects.get()
    price = price_for("gpt-4o-mini")
    assert stored.price_id == price.pk
    assert (stored.input_per_million, stored.output_per_million) == (Decimal("0.15"), Decimal("0.60"))
    # The cost is reproducible from the entry alone.
    assert (
        stored.cost
        == (stored.input_tokens * stored.input_per_million + stored.output_tokens * stored.output_per_million)
        / 1_000_000
    )
    assert entry.cost == stored.cost


def test_a_used_price_cannot_be_edited_or_deleted(turn_id):
    bill(turn_id)
    price = Price.objects.get(pk=price_for("gpt-4o-mini").pk)
    before = Price.objects.filter(pk=price.pk).values().get()

    price.input_per_million = Decimal("9")
    with pytest.raises(PriceInUse):
        price.save()
    with pytest.raises(PriceInUse):
        Price.objects.filter(pk=price.pk).update(input_per_million=9)
    with pytest.raises(ProtectedError):
        Price.objects.get(pk=price.pk).delete()

    assert Price.objects.filter(pk=price.pk).values().get() == before


def test_an_unused_price_can_still_be_corrected():
    price = Price.objects.create(model="new-model", input_per_million=1, output_per_million=1)

    price.input_per_million = Decimal("2")
    price.save()
    Price.objects.filter(pk=price.pk).update(output_per_million=3)
    assert Price.objects.filter(pk=price.pk).values_list("input_per_million", "output_per_million").get() == (2, 3)
    Price.objects.get(pk=price.pk).delete()


def test_a_turn_is_priced_at_its_start(turn_id):
    started_at = Turn.objects.get(pk=turn_id).started_at
    # A new price that takes effect while the turn runs does not apply to it.
    Price.objects.create(
        model="gpt-4o-mini", input_per_million=9, output_per_million=9, effective_from=started_at + timedelta(seconds=1)
    )

    entry = bill(turn_id, priced_at=started_at)

    assert entry.input_per_million == Decimal("0.15")
    assert entry.cost == Decimal("0.00045")


def test_finish_turn_prices_the_turn_at_its_start(turn_id):
    started_at = Turn.objects.get(pk=turn_id).started_at
    Price.objects.create(
        model="gpt-4o-mini", input_per_million=9, output_per_million=9, effective_from=started_at + timedelta(seconds=1)
    )

    finish(turn_id, [make_round(1, usage={"prompt_tokens": 1000, "completion_tokens": 500})])

    assert LedgerEntry.objects.get().cost == Decimal("0.00045")


def test_a_new_price_applies_from_its_date_and_never_rewrites_the_past(turn_id):
    old_entry = bill(turn_id, input_tokens=1_000_000, output_tokens=0)
    assert old_entry.cost == Decimal("0.15")
    Price.objects.create(
        model="gpt-4o-mini",
        input_per_million=Decimal("0.30"),
        output_per_million=Decimal("1.20"),
        effective_from=timezone.now(),
    )
    Price.objects.create(
        model="gpt-4o-mini",
        input_per_million=Decimal("9.99"),
        output_per_million=Decimal("9.99"),
        effective_from=timezone.now() + timedelta(days=30),  # not yet
    )
    assert priced("gpt-4o-mini", 1_000_000, 0) == Decimal("0.30")
    assert LedgerEntry.objects.get(pk=old_entry.pk).cost == Decimal("0.15")
    assert price_for("gpt-4o-mini", at=timezone.now() - timedelta(days=1)).input_per_million == Decimal("0.15")


# --- append-only -----------------------------------------------------------------------------


def test_an_entry_cannot_be_saved_again(turn_id):
    entry = bill(turn_id)
    before = row(entry)

    entry.cost = Decimal("99")
    entry.input_tokens = 1
    with pytest.raises(ValueError, match="append-only"):
        entry.save()

    assert row(entry) == before


def test_an_entry_cannot_be_deleted(turn_id):
    entry = bill(turn_id)
    before = row(entry)

    with pytest.raises(ValueError, match="append-only"):
        entry.delete()

    assert row(entry) == before


# --- finish_turn -----------------------------------------------------------------------------


def make_round(number, *, usage, content="", finish_reason="stop", prompt_chars=400):
    rnd = Round(number=number, prompt_chars=prompt_chars)
    rnd.finish_reason = finish_reason
    rnd.content = content
    rnd.reported_usage = usage
    rnd.ended_at = datetime.now(UTC)
    return rnd


def finish(turn_id, rounds, *, status="completed", text="The answer."):
    record = records.TurnRecord.load(turn_id)
    return records.finish_turn(record, status=status, text=text, error="", rounds=rounds, model="gpt-4o-mini")


def test_finish_turn_sums_reported_usage_over_rounds(turn_id):
    rounds = [
        make_round(1, usage={"prompt_tokens": 100, "completion_tokens": 20}, finish_reason="tool_calls"),
        make_round(2, usage={"prompt_tokens": 300, "completion_tokens": 45}, content="The answer."),
    ]

    usage = finish(turn_id, rounds)

    assert usage == {"input_tokens": 400, "output_tokens": 65, "estimated": False}
    entry = LedgerEntry.objects.get(turn_id=turn_id)
    assert (entry.model, entry.input_tokens, entry.output_tokens, entry.estimated) == (
        "gpt-4o-mini",
        400,
        65,
        False,
    )
    assert entry.cost == (400 * Decimal("0.15") + 65 * Decimal("0.60")) / 1_000_000


def test_finish_turn_flags_the_entry_estimated_when_a_round_lacks_usage(turn_id):
    rounds = [
        make_round(1, usage={"prompt_tokens": 100, "completion_tokens": 20}, finish_reason="tool_calls"),
        # cut short: no usage; estimated from 400 prompt chars and 8 content chars
        make_round(2, usage=None, content="Partial.", finish_reason=""),
    ]

    usage = finish(turn_id, rounds, status="interrupted", text="Partial.")

    assert usage == {"input_tokens": 200, "output_tokens": 22, "estimated": True}
    entry = LedgerEntry.objects.get(turn_id=turn_id)
    assert (entry.input_tokens, entry.output_tokens, entry.estimated) == (200, 22, True)
    estimated = dict(Generation.objects.filter(turn_id=turn_id).values_list("round", "usage_estimated"))
    assert estimated == {1: False, 2: True}


def test_finish_turn_stores_the_text_and_status(turn_id):
    finish(turn_id, [make_round(1, usage={"prompt_tokens": 1, "completion_tokens": 1})], text="Hello.")

    turn = Turn.objects.get(pk=turn_id)
    assert turn.assistant_text == "Hello."
    assert turn.status == "completed"
    assert turn.interrupted is False
    assert turn.ended_at is not None


@pytest.mark.parametrize(
    ("status", "interrupted"),
    [("completed", False), ("interrupted", True), ("truncated", False), ("failed", False)],
)
def test_finish_turn_marks_only_an_interrupted_turn_interrupted(turn_id, status, interrupted):
    finish(turn_id, [make_round(1, usage=None, finish_reason="")], status=status)

    turn = Turn.objects.get(pk=turn_id)
    assert turn.status == status
    assert turn.interrupted is interrupted


def test_finish_turn_writes_one_generation_per_round(turn_id):
    rounds = [
        make_round(1, usage={"prompt_tokens": 100, "completion_tokens": 20}, finish_reason="tool_calls"),
        make_round(2, usage={"prompt_tokens": 200, "completion_tokens": 5}, finish_reason="tool_calls"),
        make_round(3, usage={"prompt_tokens": 300, "completion_tokens": 30}, content="Done."),
    ]

    finish(turn_id, rounds)

    generations = list(
        Generation.objects.filter(turn_id=turn_id)
        .order_by("round")
        .values_list("round", "finish_reason", "input_tokens", "output_tokens")
    )
    assert generations == [(1, "tool_calls", 100, 20), (2, "tool_calls", 200, 5), (3, "stop", 300, 30)]


def test_finish_turn_twice_bills_and_records_once(turn_id):
    rounds = [
        make_round(1, usage={"prompt_tokens": 100, "completion_tokens": 20}, finish_reason="tool_calls"),
        make_round(2, usage={"prompt_tokens": 300, "completion_tokens": 45}, content="The answer."),
    ]
    first = finish(turn_id, rounds)
    entry = LedgerEntry.objects.get(turn_id=turn_id)
    before = row(entry)

    again = [
        make_round(1, usage={"prompt_tokens": 7, "completion_tokens": 7}),
        make_round(2, usage={"prompt_tokens": 7, "completion_tokens": 7}),
    ]
    second = finish(turn_id, again)

    assert second == first
    assert LedgerEntry.objects.filter(turn_id=turn_id).count() == 1
    assert row(entry) == before
    generations = list(
        Generation.objects.filter(turn_id=turn_id).order_by("round").values_list("round", "input_tokens")
    )
    assert generations == [(1, 100), (2, 300)]


def test_finish_turn_twice_leaves_the_ended_turn_as_it_was(turn_id):
    finish(turn_id, [make_round(1, usage=None)], status="interrupted", text="Half")
    finish(turn_id, [make_round(1, usage=None), make_round(2, usage=None)], status="completed", text="Other")
    turn = Turn.objects.get(pk=turn_id)
    assert (turn.status, turn.interrupted, turn.assistant_text) == ("interrupted", True, "Half")
    assert turn.generations.count() == 1


def test_the_ledger_refuses_bulk_updates_and_deletes(turn_id):
    entry = bill(turn_id)
    before = row(entry)
    with pytest.raises(ValueError):
        LedgerEntry.objects.filter(pk=entry.pk).update(cost=0)
    with pytest.raises(ValueError):
        LedgerEntry.objects.all().delete()
    assert row(entry) == before


# --- prices cached by a process, changed by another ------------------------------------------------


def _behind_the_cache(sql, params):
    """Changes the price table as another process would: this one's cache
    is not told."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_a_price_deleted_elsewhere_is_not_billed_from_the_cache(turn_id):
    newer = Price.objects.create(model="gpt-4o-mini", input_per_million=1, output_per_million=1)
    assert price_for("gpt-4o-mini") == newer  # cached
    _behind_the_cache("DELETE FROM billing_price WHERE id = %s", [newer.pk])

    with transaction.atomic():  # as in finish_turn: the foreign key is checked at commit
        entry = bill(turn_id)

    assert entry.price.input_per_million == Decimal("0.15")  # the price still in force
    assert LedgerEntry.objects.get().price_id == entry.price_id


def test_a_price_corrected_elsewhere_bills_its_new_rates(turn_id):
    newer = Price.objects.create(model="gpt-4o-mini", input_per_million=1, output_per_million=1)
    assert price_for("gpt-4o-mini") == newer
    _behind_the_cache("UPDATE billing_price SET input_per_million = 2 WHERE id = %s", [newer.pk])

    entry = bill(turn_id, input_tokens=1_000_000, output_tokens=0)

    assert (entry.price_id, entry.input_per_million, entry.cost) == (newer.pk, Decimal(2), Decimal(2))


def test_the_first_gpt_4o_snapshot_has_its_own_price():
    assert price_for("gpt-4o-2024-05-13").input_per_million == Decimal("5.00")
    assert price_for("gpt-4o-2024-08-06").input_per_million == Decimal("2.50")


def test_a_used_price_is_billed_without_reading_it_again(django_capture_on_commit_callbacks):
    visitor = Visitor.of(hash_key("k2"), "203.0.113.8")
    turns = []
    for text in ("one", "two", "three"):
        turn_id = records.start_turn(visitor, None, text, "gpt-4o-mini").turn_id
        Turn.objects.filter(pk=turn_id).update(status="completed")
        turns.append(turn_id)
    with django_capture_on_commit_callbacks(execute=True):
        bill(turns[0])  # the cache read it as unused: read again, then known used
    bill(turns[1])

    with CaptureQueriesContext(connection) as queries:
        bill(turns[2])

    assert not [q for q in queries.captured_queries if "billing_price" in q["sql"]]
    assert LedgerEntry.objects.filter(price__model="gpt-4o-mini").count() == 3

"""Billing: what a turn cost, written exactly once.

Billing knows turns only by id; it never imports chat code.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from billing.models import EmbeddingEntry, LedgerEntry, Price

logger = logging.getLogger("kookee.billing")

MILLION = Decimal(1_000_000)

# What may follow a price's name in a model name it prices: a dated or
# numbered snapshot of the same model (gpt-4o-2024-08-06, claude-3-5-sonnet@20240620,
# mistral-large-2407, gemini-1.5-pro-002, llama3.1:latest). Never a word:
# gpt-4o-mini and gpt-4o-audio-preview are other models, at other prices.
SNAPSHOT = re.compile(r"(?:[-@:](?:\d{4}-\d{2}-\d{2}|\d{2}-\d{2}|\d{3,8}|v\d+(?:\.\d+)*|latest))+")


def price_for(model: str, at: datetime | None = None) -> Price | None:
    """The price in force at `at` (now by default) for a model name.

    Names match case-insensitively, with or without a router's vendor part
    ("openai/"). A price names the model itself or the start of it up to a
    snapshot suffix; the longest, most specific name wins, and among its
    prices the latest effective one."""
    names = {model.lower(), model.lower().rsplit("/", 1)[-1]}
    at = at or timezone.now()
    matching = [p for p in _all_prices() if p.effective_from <= at and _prices_model(p.model.lower(), names)]
    # Prices are latest first, and max keeps the first of equals.
    return max(matching, key=lambda p: len(p.model), default=None)


def _prices_model(price_name: str, names: set[str]) -> bool:
    return any(
        name == price_name or (name.startswith(price_name) and SNAPSHOT.fullmatch(name, len(price_name)))
        for name in names
    )


# Every price, latest first, read at most once a minute per process: a turn
# should not query the price list to bill. A price saved in this process
# shows at once; one saved elsewhere within a minute (prices are usually
# entered ahead of their effective date, which is applied here, exactly).
# Each knows whether an entry used it: a used price can no longer change.
PRICES_RECHECK_SECONDS = 60
_prices: tuple[float, list[Price]] | None = None


def _all_prices() -> list[Price]:
    global _prices
    cached = _prices
    if cached is not None and time.monotonic() - cached[0] < PRICES_RECHECK_SECONDS:
        return cached[1]
    used = Exists(LedgerEntry.objects.filter(price=OuterRef("pk"))) | Exists(
        EmbeddingEntry.objects.filter(price=OuterRef("pk"))
    )
    prices = list(Price.objects.annotate(used=used).order_by("-effective_from", "-id"))
    _prices = (time.monotonic(), prices)
    return prices


@receiver(post_save, sender=Price)
@receiver(post_delete, sender=Price)
def forget_prices(**kwargs: Any) -> None:
    global _prices
    _prices = None


def cost_of(price: Price, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> Decimal:
    """USD for the tokens at the price's rates. Cached input, part of the
    input, costs the cached rate where the price has one."""
    cached = min(cached_input_tokens, input_tokens)
    cached_rate = price.input_per_million if price.cached_input_per_million is None else price.cached_input_per_million
    return (
        (input_tokens - cached) * price.input_per_million
        + cached * cached_rate
        + output_tokens * price.output_per_million
    ) / MILLION


def _price_in_force(model: str, at: datetime | None) -> Price | None:
    """price_for, checked against the database: the cache may hold a price
    that another process has since corrected or deleted (only an unused one
    can be), and an entry must never point at rates it was not billed at,
    nor at a row that is gone. A used price is as cached: it cannot change."""
    price = price_for(model, at)
    if price is None or getattr(price, "used", False):
        return price
    fresh = Price.objects.filter(pk=price.pk).first()
    if fresh is not None and _same(fresh, price):
        return fresh
    forget_prices()
    price = price_for(model, at)
    return price and Price.objects.filter(pk=price.pk).first()


def _mark_used(price_id: int) -> None:
    cached = _prices
    for price in cached[1] if cached else ():
        if price.pk == price_id:
            # The annotation _all_prices reads them with; the stubs type no annotation on a plain Price.
            price.used = True  # type: ignore[attr-defined]


def _same(fresh: Price, cached: Price) -> bool:
    fields = ("model", "input_per_million", "cached_input_per_million", "output_per_million", "effective_from")
    return all(getattr(fresh, name) == getattr(cached, name) for name in fields)


def bill_once(
    turn_id: int,
    *,
    model: str,
    input_tokens: int,
    output_tokens: int,
    estimated: bool,
    cached_input_tokens: int = 0,
    reasoning_tokens: int = 0,
    priced_at: datetime | None = None,
    preview: bool = False,
) -> LedgerEntry:
    """Writes the turn's ledger entry, or returns the one already written.
    `preview`: staff trying a draft of the assistant, not a visitor.

    The turn is priced at `priced_at`, its start: a price that takes effect
    while it runs does not apply to it. With no price in force the cost is
    NULL, unpriced, and said loudly. The entry keeps the price and its rates.

    The one-to-one column makes a second entry impossible: a second call,
    concurrent or not, gets the first entry back.
    """
    price = _price_in_force(model, priced_at)
    if price is None:
        logger.warning("billing: no price for model=%s; turn=%s recorded as unpriced", model, turn_id)
    if price is not None and not getattr(price, "used", False):
        # Once this entry is in, the price is history: no need to read it again.
        transaction.on_commit(lambda: _mark_used(price.pk))
    try:
        with transaction.atomic():
            return LedgerEntry.objects.create(
                turn_id=turn_id,
                model=model,
                input_tokens=input_tokens,
                cached_input_tokens=min(cached_input_tokens, input_tokens),
                output_tokens=output_tokens,
                reasoning_tokens=min(reasoning_tokens, output_tokens),
                estimated=estimated,
                preview=preview,
                cost=None if price is None else cost_of(price, input_tokens, output_tokens, cached_input_tokens),
                price=price,
                input_per_million=None if price is None else price.input_per_million,
                cached_input_per_million=None if price is None else price.cached_input_per_million,
                output_per_million=None if price is None else price.output_per_million,
            )
    except IntegrityError:
        return LedgerEntry.objects.get(turn_id=turn_id)


def bill_embedding(
    purpose: str, model: str, input_tokens: int, *, turn_id: int | None = None, passages: int = 0
) -> EmbeddingEntry:
    """Writes one embedding entry: an indexing batch, or a turn's search.
    Priced now, by the model's input rate; NULL when unpriced."""
    price = _price_in_force(model, None)
    if price is None:
        logger.warning("billing: no price for embedding model=%s; recorded as unpriced", model)
    elif not getattr(price, "used", False):
        transaction.on_commit(lambda: _mark_used(price.pk))
    return EmbeddingEntry.objects.create(
        purpose=purpose,
        turn_id=turn_id,
        model=model,
        input_tokens=input_tokens,
        passages=passages,
        cost=None if price is None else cost_of(price, input_tokens, 0),
        price=price,
        input_per_million=None if price is None else price.input_per_million,
    )

"""Billing: what a turn cost, written exactly once.

Billing knows turns only by id; it never imports chat code.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from billing.models import LedgerEntry, Price

logger = logging.getLogger("kookee.billing")

MILLION = Decimal(1_000_000)


def price_for(model: str, at: datetime | None = None) -> Price | None:
    """The price in force for a model name. The longest price name that the
    model name starts with, ending at a word boundary, wins: dated snapshots
    ("gpt-4o-mini-2024-07-18") match, and a router's vendor part ("openai/")
    is ignored. Among that name's prices, the latest effective one."""
    name = model.rsplit("/", 1)[-1]
    at = at or timezone.now()
    prices = [p for p in _all_prices() if p.effective_from <= at]
    matching = [p for p in prices if re.match(re.escape(p.model) + r"(?:$|[-:@])", name)]
    return max(matching, key=lambda p: len(p.model), default=None)


# Every price, latest first, read at most once a minute per process: a turn
# should not query the price list to bill. A price saved in this process
# shows at once; one saved elsewhere within a minute (prices are usually
# entered ahead of their effective date, which is applied here, exactly).
PRICES_RECHECK_SECONDS = 60
_prices: tuple[float, list[Price]] | None = None


def _all_prices() -> list[Price]:
    global _prices
    cached = _prices
    if cached is not None and time.monotonic() - cached[0] < PRICES_RECHECK_SECONDS:
        return cached[1]
    prices = list(Price.objects.order_by("-effective_from"))
    _prices = (time.monotonic(), prices)
    return prices


@receiver(post_save, sender=Price)
@receiver(post_delete, sender=Price)
def forget_prices(**kwargs) -> None:
    global _prices
    _prices = None


def cost_of(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price = price_for(model)
    if price is None:
        # Billed at zero, and said loudly: finance must add the price.
        logger.warning("billing: no price for model=%s; cost recorded as 0", model)
        return Decimal(0)
    return (input_tokens * price.input_per_million + output_tokens * price.output_per_million) / MILLION


def bill_once(turn_id: int, *, model: str, input_tokens: int, output_tokens: int, estimated: bool) -> LedgerEntry:
    """Writes the turn's ledger entry, or returns the one already written.

    The one-to-one column makes a second entry impossible: a second call,
    concurrent or not, gets the first entry back.
    """
    try:
        with transaction.atomic():
            return LedgerEntry.objects.create(
                turn_id=turn_id,
                model=model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                estimated=estimated,
                cost=cost_of(model, input_tokens, output_tokens),
            )
    except IntegrityError:
        return LedgerEntry.objects.get(turn_id=turn_id)

"""Billing: what a turn cost, written exactly once.

Billing knows turns only by id; it never imports chat code.
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal

from django.db import IntegrityError, transaction

from billing.models import LedgerEntry

logger = logging.getLogger("kookee.billing")

MILLION = Decimal(1_000_000)

# USD per million tokens: (input, output). The longest prefix of the model
# name that ends at a word boundary wins, so dated snapshots
# ("gpt-4o-mini-2024-07-18") match; a router's vendor part ("openai/") is
# ignored.
PRICES: dict[str, tuple[Decimal, Decimal]] = {
    "kookee-offline": (Decimal("0"), Decimal("0")),
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
    "gpt-4.1-nano": (Decimal("0.10"), Decimal("0.40")),
    "gpt-4.1-mini": (Decimal("0.40"), Decimal("1.60")),
    "gpt-4.1": (Decimal("2.00"), Decimal("8.00")),
}


def price_for(model: str) -> tuple[Decimal, Decimal] | None:
    name = model.rsplit("/", 1)[-1]
    matches = [prefix for prefix in PRICES if re.match(re.escape(prefix) + r"(?:$|[-:@])", name)]
    return PRICES[max(matches, key=len)] if matches else None


def cost_of(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price = price_for(model)
    if price is None:
        # Billed at zero, and said loudly: finance must add the price.
        logger.warning("billing: no price for model=%s; cost recorded as 0", model)
        return Decimal(0)
    return (input_tokens * price[0] + output_tokens * price[1]) / MILLION


def bill_once(turn_id: int, *, model: str, input_tokens: int, output_tokens: int, estimated: bool) -> LedgerEntry:
    """Writes the turn's ledger entry, or returns the one already written.

    The one-to-one column makes a second entry impossible; a concurrent
    second call gets the first entry back.
    """
    existing = LedgerEntry.objects.filter(turn_id=turn_id).first()
    if existing is not None:
        return existing
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

"""Billing: what a turn cost, written exactly once.

Billing knows turns only by id; it never imports chat code.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
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
    prices = Price.objects.filter(effective_from__lte=at or timezone.now()).order_by("-effective_from")
    matching = [p for p in prices if re.match(re.escape(p.model) + r"(?:$|[-:@])", name)]
    return max(matching, key=lambda p: len(p.model), default=None)


def cost_of(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price = price_for(model)
    if price is None:
        # Billed at zero, and said loudly: finance must add the price.
        logger.warning("billing: no price for model=%s; cost recorded as 0", model)
        return Decimal(0)
    return (input_tokens * price.input_per_million + output_tokens * price.output_per_million) / MILLION


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

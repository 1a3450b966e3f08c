"""Limits on what one visitor can ask of the model.

Frame floods are counted per connection, in memory (a connection lives in
one process). Turn rates and token budgets are counted from the database,
so they hold across every server process.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Sum
from django.utils import timezone

from billing.models import LedgerEntry
from chat.models import Turn


class LimitReached(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FrameBudget:
    """A token bucket: `burst` frames at once, refilled at `per_second`."""

    def __init__(self, burst: int, per_second: float) -> None:
        self.burst = burst
        self.per_second = per_second
        self.tokens = float(burst)
        self.updated = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.per_second)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def check_turn_allowed(session_key: str, conversation_id: int, client_address: str | None) -> None:
    """Raises LimitReached when this visitor may not start a turn now."""
    minute_ago = timezone.now() - timedelta(minutes=1)
    recent = Turn.objects.filter(started_at__gte=minute_ago)
    if recent.filter(conversation__session_key=session_key).count() >= settings.KOOKEE_TURNS_PER_MINUTE:
        raise LimitReached("rate_limited", "You're sending messages quickly. Please wait a minute and try again.")
    if (
        client_address
        and recent.filter(client_address=client_address).count() >= settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS
    ):
        raise LimitReached("rate_limited", "Many messages are coming from your network. Please try again shortly.")
    if _tokens(LedgerEntry.objects.filter(turn__conversation_id=conversation_id)) >= (
        settings.KOOKEE_TOKENS_PER_CONVERSATION
    ):
        raise LimitReached(
            "conversation_full",
            "This conversation has reached its length limit. Please send your message again: it starts a new one.",
        )
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    if _tokens(LedgerEntry.objects.filter(created_at__gte=today)) >= settings.KOOKEE_TOKENS_PER_DAY:
        raise LimitReached(
            "budget_exhausted", "The assistant has answered all it can for today. Please come back tomorrow."
        )


def _tokens(entries) -> int:
    return entries.aggregate(total=Sum(F("input_tokens") + F("output_tokens")))["total"] or 0

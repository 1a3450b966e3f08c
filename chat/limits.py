"""Limits on what one visitor can ask of the model.

Frame floods are counted per connection and open sockets per process, in
memory (a connection lives in one process). Turn rates and token budgets are
counted from the database, so they hold across every server process.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from billing import days
from billing.models import LedgerEntry
from chat import errors
from chat.models import Turn
from chat.visitors import Visitor


class LimitReached(Exception):
    """A limit refused the visitor: `code` for their page, and the message
    they read (chat/errors.py), by `key` when one code has several."""

    def __init__(self, code: str, key: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.key = key or code

    def message(self, language: str | None = None) -> str:
        return errors.message(self.key, language)


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


class SocketCount:
    """Open sockets per visitor and per network in this process."""

    def __init__(self) -> None:
        self.visitors: Counter[str] = Counter()
        self.networks: Counter[str] = Counter()

    def open(self, visitor: Visitor) -> bool:
        """Counts the socket in; False (and nothing counted) when the
        visitor or their network has as many open as they may."""
        if self.visitors[visitor.hash] >= settings.KOOKEE_SOCKETS_PER_VISITOR:
            return False
        if visitor.network and self.networks[visitor.network] >= settings.KOOKEE_SOCKETS_PER_NETWORK:
            return False
        self.visitors[visitor.hash] += 1
        self.networks[visitor.network] += 1
        return True

    def close(self, visitor: Visitor) -> None:
        for counter, key in ((self.visitors, visitor.hash), (self.networks, visitor.network)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]  # an abuser's rotating keys must not pile up


sockets = SocketCount()


class DayTotals:
    """Tokens billed today, for the whole site and per network, cached for
    KOOKEE_BUDGET_CACHE_SECONDS: summing the day's ledger on every turn
    costs time that grows with the day's traffic. What this process bills is
    added as it is billed, so one process alone is exact; what other
    processes bill shows within the cache time."""

    MAX_KEYS = 10_000  # an abuser's rotating networks must not pile up

    def __init__(self) -> None:
        self._day = None
        self._totals: dict[str, tuple[int, float]] = {}

    def get(self, key: str, entries) -> int:
        self._roll_over()
        now = time.monotonic()
        cached = self._totals.get(key)
        if cached is not None and now - cached[1] < settings.KOOKEE_BUDGET_CACHE_SECONDS:
            return cached[0]
        if len(self._totals) >= self.MAX_KEYS:
            self._totals.clear()
        tokens = _tokens(entries)
        self._totals[key] = (tokens, now)
        return tokens

    def add(self, keys: list[str], tokens: int) -> None:
        self._roll_over()
        for key in keys:
            if key in self._totals:
                total, fetched_at = self._totals[key]
                self._totals[key] = (total + tokens, fetched_at)

    def clear(self) -> None:
        self._totals.clear()

    def _roll_over(self) -> None:
        day = _start_of_day()
        if day != self._day:
            self._day, self._totals = day, {}


day_totals = DayTotals()
SITE = "site"


def network_key(network: str) -> str:
    return f"network:{network}"


def check_turn_allowed(visitor: Visitor, conversation_id: int) -> None:
    """Raises LimitReached when this visitor may not start a turn now.

    Rates and budgets are counted per visitor and per network: a new cookie
    or widget token starts a new visitor, but not a new network. Two small
    queries; the network's and the site's day come from `day_totals`.
    """
    # The visitor's figures in one query over their own turns (an index
    # away), the network's minute in one over its own: none of them grows
    # with the site's traffic.
    minute_ago = timezone.now() - timedelta(minutes=1)
    tokens = F("ledger_entry__input_tokens") + F("ledger_entry__output_tokens")
    mine = Turn.objects.filter(conversation__visitor_hash=visitor.hash).aggregate(
        minute=Count("id", filter=Q(started_at__gte=minute_ago)),
        conversation=Sum(tokens, filter=Q(conversation_id=conversation_id)),
        today=Sum(tokens, filter=Q(ledger_entry__created_at__gte=_start_of_day())),
    )
    if mine["minute"] >= settings.KOOKEE_TURNS_PER_MINUTE:
        raise LimitReached("rate_limited")
    if (
        visitor.network
        and Turn.objects.filter(client_network=visitor.network, started_at__gte=minute_ago).count()
        >= settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS
    ):
        raise LimitReached("rate_limited", "network_rate_limited")
    if (mine["conversation"] or 0) >= settings.KOOKEE_TOKENS_PER_CONVERSATION:
        raise LimitReached("conversation_full")
    if (mine["today"] or 0) >= settings.KOOKEE_TOKENS_PER_VISITOR_PER_DAY:
        raise LimitReached("visitor_budget_exhausted")
    today = LedgerEntry.objects.filter(created_at__gte=_start_of_day())
    network_budget = settings.KOOKEE_NETWORK_SHARE_OF_DAY * settings.KOOKEE_TOKENS_PER_DAY
    if visitor.network and (
        day_totals.get(network_key(visitor.network), today.filter(turn__client_network=visitor.network))
        >= network_budget
    ):
        raise LimitReached("network_budget_exhausted")
    if day_totals.get(SITE, today) >= settings.KOOKEE_TOKENS_PER_DAY:
        raise LimitReached("budget_exhausted")


def _start_of_day():
    # The site's day (TIME_ZONE), as finance's reports count it.
    return days.start_of_today()


def _tokens(entries) -> int:
    return entries.aggregate(total=Sum(F("input_tokens") + F("output_tokens")))["total"] or 0

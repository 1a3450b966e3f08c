"""Limits on what one visitor can ask of the model.

Frame floods are counted per connection and open sockets per process, in
memory (a connection lives in one process). Turn rates and token budgets are
counted in the database, so they hold across every server process.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from billing import days
from billing.models import LedgerEntry
from chat import errors
from chat.models import Conversation, DayBudget, Turn
from chat.visitors.identity import Visitor, networks_of, share_of
from chat.vocabulary import Code


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
    """What one socket's frames may cost: two token buckets, `burst` frames
    at once refilled at `per_second`, and `byte_burst` bytes refilled at
    `bytes_per_second`. Bytes count what the client sends and what its
    frames make us send back (a history page): a frame of a few bytes can
    ask for a large reply, so counting frames alone bounds nothing."""

    def __init__(self, burst: int, per_second: float, byte_burst: int = 0, bytes_per_second: float = 0.0) -> None:
        self.burst = burst
        self.per_second = per_second
        self.byte_burst = byte_burst
        self.bytes_per_second = bytes_per_second
        self.tokens = float(burst)
        self.bytes = float(byte_burst)
        self.updated = time.monotonic()

    def take(self, size: int = 0) -> bool:
        """A frame of `size` bytes arrived: False when the socket is over
        either budget (the frame is not counted then)."""
        now = time.monotonic()
        elapsed = now - self.updated
        self.updated = now
        self.tokens = min(self.burst, self.tokens + elapsed * self.per_second)
        if self.byte_burst:
            self.bytes = min(self.byte_burst, self.bytes + elapsed * self.bytes_per_second)
            if self.bytes <= 0:
                return False
        if self.tokens < 1:
            return False
        self.tokens -= 1
        self.charge(size)
        return True

    def charge(self, size: int) -> None:
        """Bytes a frame cost after it was taken (its reply): the budget may
        go into debt, which refuses the next frames until it is paid off."""
        if self.byte_burst:
            self.bytes -= size


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


SITE = "site"


def network_key(network: str) -> str:
    return f"network:{network}"


def check_turn_allowed(visitor: Visitor, conversation_id: int) -> None:
    """Raises LimitReached when this visitor may not start a turn now, by
    their own rate and budgets or their network's rate. (The site's and the
    networks' daily budgets are held with `reserve`.)

    Rates and budgets are counted per visitor and per network: a new cookie
    or widget token starts a new visitor, but not a new network. One
    statement, none of whose parts grows with the site's traffic.
    """
    minute_ago = timezone.now() - timedelta(minutes=1)
    at = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            _counts_sql(),
            [at(minute_ago), conversation_id, at(_start_of_day()), visitor.network, at(minute_ago), visitor.hash],
        )
        minute, conversation, today, network_minute = cursor.fetchone()
    if minute >= settings.KOOKEE_TURNS_PER_MINUTE:
        raise LimitReached(Code.RATE_LIMITED)
    if visitor.network and network_minute >= settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS:
        raise LimitReached(Code.RATE_LIMITED, Code.NETWORK_RATE_LIMITED)
    if (conversation or 0) >= settings.KOOKEE_TOKENS_PER_CONVERSATION:
        raise LimitReached(Code.CONVERSATION_FULL)
    if (today or 0) >= settings.KOOKEE_TOKENS_PER_VISITOR_PER_DAY:
        raise LimitReached(Code.VISITOR_BUDGET_EXHAUSTED)


@functools.cache
def _counts_sql() -> str:
    """The visitor's turns in the last minute, tokens in the conversation
    and today, and their network's turns in the last minute. Written out
    rather than built by the ORM, which compiled these aggregates on every
    turn's start: 8% of a loaded process's CPU (py-spy, 200 visitors), on
    the path of the first character."""
    quote = connection.ops.quote_name
    turn, conversation, ledger = (quote(m._meta.db_table) for m in (Turn, Conversation, LedgerEntry))
    tokens = "l.input_tokens + l.output_tokens"
    return (
        "SELECT COUNT(CASE WHEN t.started_at >= %s THEN 1 END),"
        f" SUM(CASE WHEN t.conversation_id = %s THEN {tokens} END),"
        f" SUM(CASE WHEN l.created_at >= %s THEN {tokens} END),"
        f" (SELECT COUNT(*) FROM {turn} n WHERE n.client_network = %s AND n.started_at >= %s)"
        f" FROM {turn} t INNER JOIN {conversation} c ON c.id = t.conversation_id"
        f" LEFT OUTER JOIN {ledger} l ON l.turn_id = t.id"
        " WHERE c.visitor_hash = %s"
    )


# --- the site's and the networks' daily budgets --------------------------------------------
#
# Counted in DayBudget rows, one per budget and day, in the database every
# process shares. A turn holds its worst case (its prompt's estimate and the
# most it may write) before it starts and before each later round, and
# settles to what it spent when it ends. A hold that does not fit is refused,
# so turns at once cannot pass a budget together; at worst a budget ends by
# one worst case early. The hold is recorded on the turn (Turn.budget), in
# the same transaction, so that the sweeper settles a turn whose process died.


def budgets_of(visitor: Visitor) -> list[str]:
    """The daily budgets a turn of the visitor counts against: its networks,
    smallest first, then the site, so that a refusal names the most precise
    budget spent."""
    return [*(network_key(network) for network in networks_of(visitor.address)), SITE]


def reserve(visitor: Visitor, tokens: int) -> dict[str, Any]:
    """Holds `tokens` in each of the visitor's daily budgets, in the caller's
    transaction. Returns the hold, for Turn.budget; raises LimitReached (and
    holds nothing) when one of them cannot take it."""
    keys = budgets_of(visitor)
    day = days.today()
    _hold(day, keys, tokens)
    return {"day": day.isoformat(), "keys": keys, "tokens": tokens}


def top_up(budget: dict[str, Any], worst: int) -> dict[str, Any]:
    """Before a later round: the hold grows to `worst` (what the turn spent
    so far and the next round's worst case), when it is below. Raises
    LimitReached when a budget cannot take the difference."""
    more = worst - budget.get("tokens", 0)
    if not budget.get("keys") or more <= 0:
        return budget
    _hold(date.fromisoformat(budget["day"]), budget["keys"], more)
    return {**budget, "tokens": worst}


def settle(budget: dict[str, Any], spent: int) -> None:
    """The turn ended having spent `spent`: its hold becomes that."""
    if not budget.get("keys"):
        return
    _add(date.fromisoformat(budget["day"]), budget["keys"], spent - budget.get("tokens", 0), within=None)


def forget_old_budgets() -> int:
    """Drops the day counters before yesterday (a turn running over midnight
    settles on its first day's): they name networks, and nothing reads them."""
    deleted, _ = DayBudget.objects.filter(day__lt=days.today() - timedelta(days=1)).delete()
    return deleted


def _limit_of(key: str) -> tuple[int, str]:
    """A budget's size, and the code that refuses a turn past it."""
    day = settings.KOOKEE_TOKENS_PER_DAY
    if key == SITE:
        return day, Code.BUDGET_EXHAUSTED
    return int(share_of(key.removeprefix(network_key(""))) * day), Code.NETWORK_BUDGET_EXHAUSTED


def _hold(day: date, keys: list[str], tokens: int) -> None:
    """Adds `tokens` to each of the day's counters where the sum stays
    within the budget; raises LimitReached for the first budget (in `keys`'
    order) that cannot take them. The caller's transaction then rolls back
    what the others took."""
    limits = {key: _limit_of(key) for key in keys}
    for key in keys:
        if tokens > limits[key][0]:
            raise LimitReached(limits[key][1])
    held = _add(day, keys, tokens, within={key: limit for key, (limit, _) in limits.items()})
    for key in keys:
        if key not in held:
            raise LimitReached(limits[key][1])


def _add(day: date, keys: list[str], tokens: int, within: dict[str, int] | None) -> set[str]:
    """Adds `tokens` to the day's counters of `keys`, creating them, in one
    statement; with `within`, only to those that stay within their limit.
    Returns the keys it added to.

    One upsert, not an ORM read and write: it runs on every turn's start,
    tool round and end, on the one database thread (9% of a loaded server's
    CPU through the ORM). It locks the rows itself, in key order, as every
    writer of the counters does, so that two turns never wait on each other
    in a circle (an UPDATE ... IN () locked them in the table's order, and
    deadlocked with a hold on PostgreSQL). SQLite 3.35 or later, or PostgreSQL."""
    rows = sorted(keys)
    table, day_column, key_column, tokens_column = _names()
    values = ", ".join(["(%s, %s, %s)"] * len(rows))
    sql = (
        f"INSERT INTO {table} ({day_column}, {key_column}, {tokens_column}) VALUES {values} "
        f"ON CONFLICT ({day_column}, {key_column}) DO UPDATE SET {tokens_column} = {table}.{tokens_column} + %s"
    )
    params: list[Any] = [value for key in rows for value in (_day(day), key, tokens)]
    params.append(tokens)
    if within is not None:
        cases = " ".join(["WHEN %s THEN %s"] * len(rows))
        sql += f" WHERE {table}.{tokens_column} + %s <= CASE {table}.{key_column} {cases} END"
        params += [tokens, *(value for key in rows for value in (key, within[key]))]
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {key_column}", params)
        return {row[0] for row in cursor.fetchall()}


def _names() -> tuple[str, str, str, str]:
    quote = connection.ops.quote_name
    return quote(DayBudget._meta.db_table), quote("day"), quote("key"), quote("tokens")


def _day(day: date) -> Any:
    return connection.ops.adapt_datefield_value(day)


def _start_of_day() -> datetime:
    # The site's day (TIME_ZONE), as finance's reports count it.
    return days.start_of_today()

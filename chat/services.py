"""Database work for chat: sync functions, each one unit of work, called from
async code through `database_sync_to_async`."""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.db import IntegrityError, connection, transaction
from django.db.models import Prefetch, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext

from billing import calibration
from billing.models import LedgerEntry
from billing.services import bill_once
from chat import embed, fastjson, limits, prompt, search
from chat.limits import LimitReached, check_turn_allowed
from chat.models import Conversation, Feedback, Generation, Handoff, RevokedKey, Search, ToolCall, Turn
from chat.rounds import Ratios, Round, prompt_tokens, storable
from chat.sources import SEARCH_TOOL, search_results, used_articles
from chat.visitors import Visitor, hash_key

logger = logging.getLogger("kookee.generations")
search_log = logging.getLogger("kookee.searches")
# Starting over and erasure: ids only, never a key, a hash or any text.
privacy_log = logging.getLogger("kookee.privacy")

ACTIVITY_RESOLUTION = timedelta(minutes=1)


class Busy(Exception):
    """The conversation has a turn running already (on any process)."""


class NotFound(Exception):
    """No such turn among the visitor's finished turns."""


class Refused(Exception):
    """The visitor's key is known and no longer good (a widget token that is
    forged, idle or revoked; a revoked session; a conversation taken away
    from it): the socket is closed with 4401, and the page starts afresh."""


def visitor_for_session(session: SessionBase) -> str | None:
    """The hash of a live session's key; None when there is no live session
    (none, or expired). Raises Refused for a live session whose key was
    revoked: its visitor started over, or their conversation was erased."""
    key = session.session_key
    if not key:
        return None
    session.load()  # forgets the key of a session that is missing or expired
    if session.session_key != key:
        return None
    visitor = hash_key(key)
    if RevokedKey.objects.filter(visitor_hash=visitor).exists():
        raise Refused
    return visitor


def visitor_for_token(token: str) -> str | None:
    """The hash of a widget token's key, or None: forged, revoked, or idle
    for longer than KOOKEE_WIDGET_IDLE_DAYS (since it was made, or since its
    conversation last moved)."""
    key = embed.visitor_key(token)
    if key is None:
        return None
    visitor = hash_key(key)
    if RevokedKey.objects.filter(visitor_hash=visitor).exists():
        return None
    if embed.is_fresh(token):
        return visitor
    idle_since = timezone.now() - timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS)
    active = Conversation.objects.filter(visitor_hash=visitor, updated_at__gte=idle_since).exists()
    return visitor if active else None


def conversation_of(visitor: str) -> int | None:
    """The visitor's latest conversation; None before their first message
    (a page view stores nothing)."""
    return Conversation.objects.filter(visitor_hash=visitor).order_by("-id").values_list("id", flat=True).first()


@transaction.atomic
def forget_visitor(visitor: str) -> None:
    """The visitor starts over: their key can no longer reach anything, and
    their conversations, kept for support and billing, belong to nobody."""
    detached = Conversation.objects.filter(visitor_hash=visitor).update(visitor_hash="")
    RevokedKey.objects.get_or_create(visitor_hash=visitor)
    privacy_log.info("a visitor started over: key revoked, %s conversation(s) detached", detached)


def visitors_history(visitor: str, conversation_id: int | None, before: int | None) -> tuple[int | None, dict]:
    """A page of the visitor's conversation (see history_of), and its id:
    found now if another tab of theirs has written first since this one
    connected. Raises Refused when the conversation is no longer theirs
    (they started over in another tab, or it was erased)."""
    if conversation_id is None:
        conversation_id = conversation_of(visitor)
    elif not Conversation.objects.filter(pk=conversation_id, visitor_hash=visitor).exists():
        raise Refused
    return conversation_id, history_of(conversation_id, before)


def history_of(conversation_id: int | None, before: int | None = None) -> dict[str, Any]:
    """A page of the conversation as the chat page shows it: the latest
    KOOKEE_HISTORY_PAGE_TURNS turns (before the turn `before`, when given),
    oldest first, and whether there are older ones."""
    if conversation_id is None:
        return {"turns": [], "more": False, "handoff": None}
    turns = Turn.objects.filter(conversation_id=conversation_id)
    if before is not None:
        turns = turns.filter(id__lt=before)
    size = settings.KOOKEE_HISTORY_PAGE_TURNS
    page = list(turns.order_by("-started_at", "-id").values_list("id", flat=True)[: size + 1])
    shown = _within_bytes(history(page[:size]), settings.KOOKEE_HISTORY_PAGE_BYTES)
    more = len(page) > size or len(shown) < len(page[:size])
    # Beyond the contract: the conversation's request for a person, pending.
    return {"turns": shown, "more": more, "handoff": pending_handoff(conversation_id)}


def _within_bytes(turns: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The latest of these turns (oldest first) that fit in `limit` bytes of
    JSON, and always the latest one: a page costs its socket what it weighs
    (chat/backpressure.py), and older turns come on request."""
    total = 0
    for start in range(len(turns) - 1, -1, -1):
        total += len(fastjson.dumps(turns[start]).encode("utf-8", "surrogatepass"))
        if total > limit and start < len(turns) - 1:
            return turns[start + 1 :]
    return turns


def pending_handoff(conversation_id: int | None) -> dict[str, Any] | None:
    """The conversation's open or claimed request for a person, as the page
    shows it; None when there is none."""
    if conversation_id is None:
        return None
    pending = (
        Handoff.objects.filter(conversation_id=conversation_id, status__in=Handoff.PENDING)
        .only("status", "email")
        .first()
    )
    return handoff_state(pending) if pending else None


def handoff_state(handoff: Handoff) -> dict[str, Any]:
    """A request for a person as the visitor's page sees it: whether Support
    has an address to reply to, never the address."""
    return {"handoff_id": handoff.id, "status": handoff.status, "email": bool(handoff.email)}


def history(turn_ids: list[int]) -> list[dict[str, Any]]:
    """These turns, oldest first, as the chat page shows them."""
    turns = (
        Turn.objects.filter(id__in=turn_ids)
        .order_by("started_at", "id")
        .select_related("feedback")
        .prefetch_related(
            Prefetch("generations__tool_calls", queryset=ToolCall.objects.only("generation_id", "name", "result"))
        )
    )
    return [
        {
            "turn_id": turn.id,
            "user_text": turn.user_text,
            "assistant_text": turn.assistant_text,
            "status": turn.status,
            "reason": turn.stop_reason or None,
            "sources": used_articles(
                turn.assistant_text,
                search_results(call for generation in turn.generations.all() for call in generation.tool_calls.all()),
            ),
            # Beyond the contract: the visitor's own rating, shown on the answer.
            "rating": feedback.rating if (feedback := getattr(turn, "feedback", None)) else None,
        }
        for turn in turns
    ]


def save_feedback(visitor: str, turn_id: int, rating: str, comment: str) -> None:
    """Stores the visitor's rating of one of their own finished turns,
    replacing an earlier one. Raises NotFound for a turn that is not theirs
    (another visitor's, erased, or none) or still running: the same answer
    for each, so that turn ids reveal nothing."""
    turn = (
        Turn.objects.filter(pk=turn_id, conversation__visitor_hash=visitor)
        .exclude(status=Turn.Status.STREAMING)
        .only("id")
        .first()
    )
    if turn is None or not visitor:
        raise NotFound
    Feedback.objects.update_or_create(turn=turn, defaults={"rating": rating, "comment": comment})


class Started(NamedTuple):
    conversation_id: int
    turn_id: int
    messages: list[dict[str, Any]]  # for the first round
    budget: dict[str, Any]  # what it holds in the daily budgets (Turn.budget)


def start_turn(
    visitor: Visitor,
    conversation_id: int | None,
    user_text: str,
    model: str,
    owner: str = "",
    replacing: int | None = None,
    tool_chars: int = 0,
) -> Started:
    """Creates the turn (and, at the visitor's first message, their
    conversation). `owner` is the channel of the process
    that runs it. `replacing`: a full conversation, which the turn starts
    a new one after (see conversation_for). The turn holds its first
    round's worst case in the daily budgets (its prompt, estimated with
    the tool definitions' `tool_chars`, and the most it may write).

    Raises, creating nothing: Busy when a turn of the conversation runs
    already, in any process; LimitReached when the visitor is over a limit;
    Refused when their key no longer reaches the conversation.
    """
    # The model's learnt ratios, for estimating what the provider will not
    # report (a query a minute at most, outside the turn's transaction).
    calibration.load(model)
    try:
        return _start_turn(visitor, conversation_id, user_text, model, owner, replacing, tool_chars)
    except IntegrityError:
        # The database holds one streaming turn per conversation: checking
        # first would cost every turn a query, to tell what the insert tells.
        if Turn.objects.filter(conversation__visitor_hash=visitor.hash, status=Turn.Status.STREAMING).exists():
            raise Busy from None
        raise


@transaction.atomic
def _start_turn(
    visitor: Visitor,
    conversation_id: int | None,
    user_text: str,
    model: str,
    owner: str,
    replacing: int | None,
    tool_chars: int,
) -> Started:
    conversation = conversation_for(visitor, conversation_id, replacing)
    check_turn_allowed(visitor, conversation.id)
    earlier = list(
        conversation.turns.order_by("-started_at", "-id").values_list("user_text", "assistant_text")[
            : settings.KOOKEE_HISTORY_TURNS
        ]
    )
    messages = prompt.messages(reversed(earlier), user_text)
    worst = prompt_tokens(messages, tool_chars, Ratios(*calibration.ratios(model)))
    # Last of the checks: it locks the budgets' rows until this commits.
    budget = limits.reserve(visitor, worst + settings.KOOKEE_MAX_OUTPUT_TOKENS)
    turn = Turn.objects.create(
        conversation=conversation,
        user_text=user_text,
        model=model,
        client_address=visitor.address,
        client_network=visitor.network,
        heartbeat_at=timezone.now(),
        owner=owner,
        budget=budget,
    )
    if conversation.updated_at < timezone.now() - ACTIVITY_RESOLUTION:
        # Last activity is shown to the minute and idles widgets in days:
        # turns back to back need not write it each time.
        conversation.save(update_fields=["updated_at"])
    return Started(conversation.id, turn.id, messages, budget)


def conversation_for(visitor: Visitor, conversation_id: int | None, replacing: int | None = None) -> Conversation:
    """The visitor's conversation, locked for this transaction; created at
    their first message (or request for a person), and never before: a
    conversation is what a visitor asked. `conversation_id` is the one their
    tab knows, None before it knew one; `replacing`, with None, a full one
    that a new conversation follows, unless another tab began one already.
    Raises Refused when their key no longer reaches it (they started over,
    or it was erased)."""
    if conversation_id == replacing:
        conversation_id = None  # full: the visitor's latest, unless another tab began a new one
    if conversation_id is None:
        if RevokedKey.objects.filter(visitor_hash=visitor.hash).exists():
            raise Refused  # started over in another tab since this one connected
        # Another tab of theirs, on any process, may have written first since
        # this one connected: wait for its transaction, then find its conversation.
        _lock_visitor(visitor.hash)
        conversation_id = conversation_of(visitor.hash)
        if replacing is not None and conversation_id == replacing:
            conversation_id = None
    if conversation_id is None:
        return Conversation.objects.create(visitor_hash=visitor.hash, source_url=visitor.page)
    # The lock makes a message racing in from another process wait here;
    # its insert then meets this turn (the constraint: Busy).
    conversation = Conversation.objects.select_for_update().only("visitor_hash", "updated_at").get(pk=conversation_id)
    if conversation.visitor_hash != visitor.hash:
        raise Refused  # started over or erased since this tab connected
    return conversation


# The first key of PostgreSQL's two-key advisory locks that this app takes.
_VISITOR_LOCK = 0x4B4B  # "KK"


def _lock_visitor(visitor: str) -> None:
    """Serialises a visitor's first messages across processes until this
    transaction ends, so that racing tabs share one conversation and one turn.
    SQLite's IMMEDIATE transactions serialise all writers already."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # 31 bits of the key: a collision only makes two visitors wait in turn.
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_VISITOR_LOCK, zlib.crc32(visitor.encode()) >> 1])


def running_turn(visitor: str) -> tuple[int, str] | None:
    """The visitor's running turn, if any: its id and the channel of the
    process that runs it."""
    if not visitor:
        return None
    return (
        Turn.objects.filter(conversation__visitor_hash=visitor, status=Turn.Status.STREAMING)
        .values_list("id", "owner")
        .first()
    )


def ended_frame(turn_id: int) -> dict[str, Any] | None:
    """A stored turn's `turn.ended` frame, for tabs that did not hear its end
    from the process that ran it (it died); None while it runs."""
    turn = (
        Turn.objects.filter(pk=turn_id)
        .exclude(status=Turn.Status.STREAMING)
        .prefetch_related(
            Prefetch("generations__tool_calls", queryset=ToolCall.objects.only("generation_id", "name", "result"))
        )
        .first()
    )
    if turn is None:
        return None
    generations = list(turn.generations.all())
    entry = LedgerEntry.objects.filter(turn_id=turn_id).first()
    return {
        "type": "turn.ended",
        "turn_id": turn.id,
        "status": turn.status,
        "generations": len(generations),
        "usage": _usage_of(entry) if entry else {"input_tokens": 0, "output_tokens": 0, "estimated": True},
        "sources": used_articles(
            turn.assistant_text, search_results(call for g in generations for call in g.tool_calls.all())
        ),
        **({"reason": turn.stop_reason} if turn.stop_reason else {}),
    }


def record_generation(turn_id: int, rnd: Round) -> None:
    """Stores one model call and its tool calls; logs it. Called once per
    round that is not the last (finish_turn records the rest)."""
    usage = rnd.usage
    # No savepoint inside finish_turn's transaction: its failure fails it all.
    with transaction.atomic(savepoint=False):
        generation = Generation.objects.create(
            turn_id=turn_id,
            round=rnd.number,
            finish_reason=rnd.finish_reason,
            input_tokens=usage.input_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            usage_estimated=usage.estimated,
            started_at=rnd.started_at,
            first_delta_at=rnd.first_delta_at,
            ended_at=rnd.ended_at or timezone.now(),
        )
        if rnd.tool_calls:
            ToolCall.objects.bulk_create(
                ToolCall(
                    generation=generation,
                    call_id=storable(call.call_id),
                    name=storable(call.name),
                    arguments=storable(call.arguments),
                    result="" if call.result is None else json.dumps(call.result),
                    error=storable(call.error),
                )
                for call in rnd.tool_calls
            )
    logger.info(
        "generation turn=%s round=%s finish_reason=%s input_tokens=%s cached_input_tokens=%s "
        "output_tokens=%s reasoning_tokens=%s estimated=%s tool_calls=%s ttfd_ms=%s duration_ms=%s",
        turn_id,
        rnd.number,
        rnd.finish_reason or "-",
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        usage.estimated,
        len(rnd.tool_calls),
        _ms(rnd.started_at, rnd.first_delta_at),
        _ms(rnd.started_at, generation.ended_at),
    )


def end_round(turn_id: int, rnd: Round, budget: dict[str, Any], hold: int) -> tuple[dict[str, Any], str]:
    """A round that called tools has ended, and another follows: records it,
    and grows the turn's hold in the daily budgets (`budget`) to `hold`
    (what it spent and the next round's worst case: limits.top_up). Returns
    the hold, and "" or the code of a budget that cannot take it; the round
    is recorded either way."""
    with transaction.atomic():
        record_generation(turn_id, rnd)
        try:
            with transaction.atomic():
                grown = limits.top_up(budget, hold)
                streaming = Turn.objects.filter(pk=turn_id, status=Turn.Status.STREAMING)
                if grown is not budget and not streaming.update(budget=grown):
                    # Closed meanwhile by a sweeper (a stalled process), which
                    # settled its hold: this growth would never be settled.
                    raise _Closed
        except LimitReached as limit:
            return budget, limit.code
        except _Closed:
            return budget, ""
    return grown, ""


class _Closed(Exception):
    pass


@dataclass(frozen=True)
class Checkpoint:
    turn_id: int
    text: str
    round_number: int
    input_tokens: int
    output_tokens: int


def checkpoint_turns(checkpoints: list[Checkpoint]) -> None:
    """Saves running turns' text so far and their current round's usage
    estimate, and says their process lives: one statement for all of them,
    however many turns run. (Raw SQL: the ORM would compile an expression
    per turn and column, every second.)"""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    table = connection.ops.quote_name(Turn._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        # A turn that has ended meanwhile keeps its final state.
        cursor.executemany(
            f"UPDATE {table} SET assistant_text = %s, checkpoint_round = %s, checkpoint_input_tokens = %s,"
            " checkpoint_output_tokens = %s, heartbeat_at = %s WHERE id = %s AND status = %s",
            [
                (c.text, c.round_number, c.input_tokens, c.output_tokens, now, c.turn_id, Turn.Status.STREAMING)
                for c in checkpoints
            ],
        )


def close_stale_turns(stale_after_seconds: float) -> list[tuple[str, int]]:
    """Closes the turns a dead process left streaming: interrupted, text as
    of the last checkpoint, the round in flight estimated, billed once.
    Returns the visitor (hash) and id of each turn it closed."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_seconds)
    stale = Turn.objects.filter(status=Turn.Status.STREAMING, heartbeat_at__lt=cutoff)
    closed = [
        (visitor, turn_id)
        for turn_id, visitor in stale.values_list("id", "conversation__visitor_hash")
        if _close_stale_turn(turn_id, cutoff)
    ]
    if closed:
        logger.warning(
            "closed %s turn(s) left streaming by a lost process: %s", len(closed), [turn for _, turn in closed]
        )
    return closed


@transaction.atomic
def _close_stale_turn(turn_id: int, cutoff: Any) -> bool:
    # Claim it with a conditional update: another process sweeping at the
    # same moment, or the turn's own process waking up, finds it taken.
    claimed = Turn.objects.filter(pk=turn_id, status=Turn.Status.STREAMING, heartbeat_at__lt=cutoff).update(
        status=Turn.Status.INTERRUPTED,
        interrupted=True,
        stop_reason=Turn.StopReason.PROCESS_LOST,
        owner="",
        ended_at=timezone.now(),
    )
    if not claimed:
        return False
    turn = Turn.objects.get(pk=turn_id)
    number = turn.checkpoint_round
    if number and not turn.generations.filter(round=number).exists():
        Generation.objects.create(
            turn=turn,
            round=number,
            input_tokens=turn.checkpoint_input_tokens,
            output_tokens=turn.checkpoint_output_tokens,
            usage_estimated=True,
            started_at=turn.heartbeat_at,
            ended_at=turn.heartbeat_at,
        )
    record_searches(turn_id, turn.assistant_text, ToolCall.objects.filter(generation__turn=turn))
    totals = turn.generations.aggregate(
        input=Sum("input_tokens"),
        cached=Sum("cached_input_tokens"),
        output=Sum("output_tokens"),
        reasoning=Sum("reasoning_tokens"),
    )
    entry = bill_once(
        turn_id,
        model=turn.model,
        input_tokens=totals["input"] or 0,
        cached_input_tokens=totals["cached"] or 0,
        output_tokens=totals["output"] or 0,
        reasoning_tokens=totals["reasoning"] or 0,
        estimated=True,
        priced_at=turn.started_at,
    )
    limits.settle(turn.budget, entry.input_tokens + entry.output_tokens)
    Turn.objects.filter(pk=turn_id).update(budget={})
    return True


@transaction.atomic
def finish_turn(
    turn_id: int,
    *,
    status: str,
    text: str,
    error: str,
    rounds: list[Round],
    model: str,
    stop_reason: str = "",
    stopped_by: str = "",
) -> dict[str, Any]:
    """Closes the turn: its remaining rounds, its text, its one ledger entry.

    Returns the usage the ledger recorded, for the `turn.ended` frame. A turn
    that has ended already is left as it is.
    """
    turn = Turn.objects.select_for_update().only("status", "started_at", "budget").get(pk=turn_id)
    if turn.status != Turn.Status.STREAMING:
        return _usage_of(LedgerEntry.objects.get(turn_id=turn_id))
    recorded = set(Generation.objects.filter(turn_id=turn_id).values_list("round", flat=True))
    for rnd in rounds:
        if rnd.number not in recorded:
            record_generation(turn_id, rnd)
    Turn.objects.filter(pk=turn_id).update(
        status=status,
        interrupted=status == Turn.Status.INTERRUPTED,
        assistant_text=text,
        error=storable(error)[:200],
        stop_reason=stop_reason if status == Turn.Status.INTERRUPTED else "",
        stopped_by=stopped_by[:32],
        owner="",
        ended_at=timezone.now(),
        budget={},
    )
    record_searches(turn_id, text, [call for rnd in rounds for call in rnd.tool_calls])
    usages = [rnd.usage for rnd in rounds]
    entry = bill_once(
        turn_id,
        model=model,
        input_tokens=sum(u.input_tokens for u in usages),
        cached_input_tokens=sum(u.cached_input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        reasoning_tokens=sum(u.reasoning_tokens for u in usages),
        estimated=any(u.estimated for u in usages),
        priced_at=turn.started_at,
    )
    limits.settle(turn.budget, entry.input_tokens + entry.output_tokens)
    return _usage_of(entry)


def record_searches(turn_id: int, answer: str, calls: Any) -> None:
    """Stores the turn's help-center searches, for the unanswered-questions
    page, and logs each (ids and numbers: never what was searched). `calls`:
    the round loop's tool calls, or stored ones. It runs in the transaction
    that closes and bills the turn: a fault here is logged and costs the
    record, never the bill."""
    try:
        with transaction.atomic():  # a savepoint
            _record_searches(turn_id, answer, calls)
    except Exception:
        logger.exception("turn=%s: its searches were not recorded", turn_id)


def _record_searches(turn_id: int, answer: str, calls: Any) -> None:
    found = []
    for call in calls:
        if call.name != SEARCH_TOOL or call.error:
            continue
        query = _query_of(call.arguments)
        results = search_results([call])
        if query is None or not results:
            continue
        result = results[0]
        articles = [a for a in result.get("articles") or [] if isinstance(a, dict)]
        cited = bool(used_articles(answer, [result]))
        found.append(
            Search(
                turn_id=turn_id,
                query=query,
                terms=search.normalised(query)[:200],
                top_score=result.get("top_score") if isinstance(result.get("top_score"), (int, float)) else None,
                matched=bool(articles),
                article_ids=[a.get("id") for a in articles],
                cited=cited,
            )
        )
        search_log.info(
            "search turn=%s top_score=%s articles=%s matched=%s cited=%s",
            turn_id,
            found[-1].top_score,
            found[-1].article_ids,
            found[-1].matched,
            cited,
        )
    Search.objects.bulk_create(found)


def _query_of(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    query = parsed.get("query") if isinstance(parsed, dict) else None
    return storable(query) if isinstance(query, str) and query.strip() else None


def _usage_of(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "estimated": entry.estimated,
    }


def _ms(start: Any, end: Any) -> str:
    if start is None or end is None:
        return "-"
    return str(round((end - start).total_seconds() * 1000))


class ErasureRefused(Exception):
    pass


@transaction.atomic
def erase_conversations(conversation_ids: list[int], by: str) -> list[Conversation]:
    """Erases what visitors and the model wrote in these conversations (the
    visitor's right to erasure), and the visitor's link to them: texts, the
    provider's errors (they can quote the visitor), tool calls' ids,
    arguments and results, and their names unless one of our tools, search
    queries, rating comments, the reasons and addresses of requests for a
    person, the page they came from, client addresses; the visitor's key is
    revoked.
    Turns are kept, marked erased, with their numbers, for the ledger that
    protects them. Logged, without any of the text. Returns the
    conversations erased.

    Raises ErasureRefused, erasing nothing, while one of them has a turn
    running: its end would write the answer back.
    """
    conversations = list(Conversation.objects.select_for_update().filter(pk__in=conversation_ids))
    turns = Turn.objects.filter(conversation__in=conversations)
    if turns.filter(status=Turn.Status.STREAMING).exists():
        raise ErasureRefused(gettext("A turn is still running in one of these conversations; try again in a minute."))
    now = timezone.now()
    RevokedKey.objects.bulk_create(
        [RevokedKey(visitor_hash=c.visitor_hash) for c in conversations if c.visitor_hash], ignore_conflicts=True
    )
    calls = ToolCall.objects.filter(generation__turn__in=turns)
    calls.update(call_id="", arguments="", result="", error="")
    calls.exclude(name__in=_our_tool_names()).update(name="")
    Search.objects.filter(turn__in=turns).update(query="", terms="")
    Feedback.objects.filter(turn__in=turns).update(comment="")  # the rating stays: it names nobody
    Handoff.objects.filter(conversation__in=conversations).update(reason="", email="", client_network="")
    Conversation.objects.filter(pk__in=[c.pk for c in conversations]).update(visitor_hash="", source_url="")
    turns.update(
        user_text="",
        assistant_text="",
        error="",  # a provider's error body can quote the prompt
        client_address=None,
        client_network="",
        erased_at=Coalesce("erased_at", Value(now)),
    )
    for conversation in conversations:
        privacy_log.info("erased conversation %s at the visitor's request, by %s", conversation.public_id, by)
    return conversations


def _our_tool_names() -> list[str]:
    """The names of the tools we offer the model: a call's name that is one
    of them names nobody. Any other name is the model's own words."""
    # Imported here: chat.tools imports chat.handoffs, which imports us.
    from chat.tools import TOOLS

    return [tool.name for tool in TOOLS]


def purge_expired(now: Any = None) -> dict[str, int]:
    """Drops what is kept no longer than it must be: client addresses older
    than KOOKEE_ADDRESS_RETENTION_DAYS, and revoked keys that could no
    longer be used anyway. (Expired sessions: Django's clearsessions.)"""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.KOOKEE_ADDRESS_RETENTION_DAYS)
    old = Turn.objects.filter(started_at__lt=cutoff).exclude(client_address=None, client_network="")
    addresses = old.update(client_address=None, client_network="")
    Handoff.objects.filter(created_at__lt=cutoff).exclude(client_network="").update(client_network="")
    # A key revoked longer ago than a widget token may idle, or a session
    # live, is refused anyway.
    useless_after = max(
        timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS), timedelta(seconds=settings.SESSION_COOKIE_AGE)
    )
    revoked = RevokedKey.objects.filter(revoked_at__lt=now - useless_after).delete()[0]
    return {"addresses": addresses, "revoked_keys": revoked, "day_budgets": limits.forget_old_budgets()}

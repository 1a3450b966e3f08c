"""Support's figures: the support report for a period, and the unanswered
questions. Both read counts and the questions Support reads in transcripts
anyway; nothing here knows a price.

Definitions (also on the pages, and in docs/operations.md):

- A conversation counts in a period when one of its turns started in it.
- Resolved: a conversation with no thumbs down on any of its answers and no
  request for a person, as of now.
- Ratings: thumbs up and down as shares of the rated answers (as Intercom and
  Zendesk show them); the rating rate is the share of answers rated at all.
- Time to a person's first reply: from a request (made in the period) to the
  first reply of Support in it; time to close: from a request to its close.
  Median and 90th percentile (nearest rank), over the requests that got one.
- Each headline figure is compared with the period of the same length just
  before, when that period had any activity (a turn or a request) and the
  figure a value there.
- Volume: per day, or per week for a period longer than a month, only those
  with a turn (chat/support/volume.py).
- Time to first delta: from the visitor's message being stored to the first
  text or tool call of the turn's first model call.
- Unanswered questions: help-center searches that found no article above
  the relevance floor, answers rated thumbs down, and requests for a person,
  grouped by their normalised terms (helpcenter/ranking.py: lower case, stemmed,
  stopwords out, sorted). A thumbs down or a handoff takes the terms of what
  the turn (or, for a handoff, the conversation) last searched without a
  good match, else of the visitor's question or reason. One with no words
  at all (a person asked for before any question, or erased) is counted by
  the report, not here. A thumbs down stays listed, with the visitor's
  comment, whatever the articles say: an article answered it, and the
  visitor said it did not help. Any other question leaves the list only
  when an article was published or changed after it was last asked, and
  an article's words answer it now.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.apps import apps
from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery

from base.admin import MAX_YEAR, MIN_YEAR
from billing import days
from chat.models import Conversation, Feedback, Generation, Handoff, Message, Search, Turn
from chat.support import volume
from helpcenter import search

PERIODS = (7, 30, 90)  # the pages' presets, in days
DEFAULT_DAYS = 30
MAX_DAYS = 366
# What the pages read of a query string (Period.from_query).
PARAMETERS = ("days", "from", "to")
# The days a period may name: far enough inside date.min and date.max that
# the period before it, the day after it and midnight in any time zone exist
# (9999-12-31 and 0001-01-01 overflowed into a 500).
FIRST_DAY, LAST_DAY = date(MIN_YEAR, 1, 1), date(MAX_YEAR, 12, 31)
TOP_UNANSWERED = 5
EXAMPLES = 3  # example conversations per unanswered question
# The most rows of each kind a page groups: a help center's weak searches
# over a quarter are thousands, not millions.
MAX_ROWS = 20_000


@dataclass(frozen=True)
class Period:
    """Whole days of the site's calendar (DJANGO_TIME_ZONE), first to last."""

    first: date
    last: date

    @property
    def start(self) -> datetime:
        return days.day_start(self.first)

    @property
    def end(self) -> datetime:
        return days.day_start(self.last + timedelta(days=1))

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @property
    def previous(self) -> Period:
        """The period of the same length just before this one."""
        return Period(self.first - timedelta(days=self.days), self.first - timedelta(days=1))

    def is_last_days(self, count: int) -> bool:
        return self == Period.last_days(count)

    @classmethod
    def last_days(cls, count: int) -> Period:
        today = days.today()
        return cls(today - timedelta(days=count - 1), today)

    @classmethod
    def from_query(cls, params: Any) -> Period:
        """From ?days=N (one of PERIODS), or ?from=YYYY-MM-DD&to=YYYY-MM-DD;
        the last 30 days otherwise. Raises ValueError for a bad range."""
        if params.get("from") or params.get("to"):
            first = _day(params.get("from") or params.get("to"))
            last = _day(params.get("to") or days.today().isoformat())
            if first > last or (last - first).days >= MAX_DAYS:
                raise ValueError(f"from must be on or before to, at most {MAX_DAYS} days apart")
            return cls(first, last)
        count = params.get("days")
        if count is None:
            return cls.last_days(DEFAULT_DAYS)
        if count not in {str(n) for n in PERIODS}:
            raise ValueError(f"days must be one of {', '.join(map(str, PERIODS))}")
        return cls.last_days(int(count))


def _day(value: str) -> date:
    """A day between FIRST_DAY and LAST_DAY; ValueError otherwise."""
    day = date.fromisoformat(value)
    if not FIRST_DAY <= day <= LAST_DAY:
        raise ValueError(f"{day.isoformat()} is out of range ({FIRST_DAY.isoformat()} to {LAST_DAY.isoformat()})")
    return day


def visitors_turns() -> QuerySet[Turn]:
    """Visitors' turns: never staff's previews of the assistant (chat/assistant/)."""
    return Turn.objects.filter(conversation__preview=False)


def figures(period: Period) -> dict[str, Any]:
    """The support report's figures for the period, each headline figure
    beside its value in the period of the same length just before."""
    now, before = _headline(period), _headline(period.previous)
    turns = visitors_turns().filter(started_at__gte=period.start, started_at__lt=period.end)
    statuses = dict(turns.order_by().values_list("status").annotate(n=Count("id")))
    handoffs = Handoff.objects.filter(created_at__gte=period.start, created_at__lt=period.end)
    by_source = dict(handoffs.order_by().values_list("source").annotate(n=Count("id")))
    by_status = dict(handoffs.order_by().values_list("status").annotate(n=Count("id")))
    return {
        **now,
        "previous": before,
        # A period before with nothing in it (a new help center) is no comparison.
        "compared": bool(before["turns"] or before["handoffs"]),
        "changes": {key: _change(now[key], before[key]) for key in COMPARED},
        "handoffs_by_source": [(s, by_source.get(s, 0)) for s in Handoff.Source],
        "handoffs_by_status": [(s, by_status.get(s, 0)) for s in Handoff.Status],
        "statuses": [(s, statuses.get(s, 0), _share(statuses.get(s, 0), now["turns"])) for s in Turn.Status],
        "volume": volume.rows(
            period.first, period.last, turns.values_list("started_at", "conversation_id")[:MAX_ROWS], days.zone()
        ),
        "volume_by_week": volume.by_week(period.first, period.last),
        "unanswered": unanswered(period, limit=TOP_UNANSWERED),
    }


# The headline figures compared with the period before.
COMPARED = (
    "conversations",
    "turns",
    "rated_up_share",
    "rating_rate",
    "resolution_rate",
    "handoffs",
    "median_first_delta_ms",
    "first_reply_median_s",
    "close_median_s",
)


def _headline(period: Period) -> dict[str, Any]:
    turns = visitors_turns().filter(started_at__gte=period.start, started_at__lt=period.end)
    turn_count = turns.count()
    ratings = dict(Feedback.objects.filter(turn__in=turns).order_by().values_list("rating").annotate(n=Count("id")))
    up, down = ratings.get(Feedback.Rating.UP, 0), ratings.get(Feedback.Rating.DOWN, 0)
    conversations = Conversation.objects.filter(id__in=turns.values("conversation_id"))
    conversation_count = conversations.count()
    unresolved = (
        conversations.filter(Q(turns__feedback__rating=Feedback.Rating.DOWN) | Q(handoffs__isnull=False))
        .distinct()
        .count()
    )
    handoffs = Handoff.objects.filter(created_at__gte=period.start, created_at__lt=period.end)
    first_replies = _first_replies(handoffs)
    closes = [
        (closed - created).total_seconds()
        for created, closed in handoffs.filter(closed_at__isnull=False).values_list("created_at", "closed_at")[
            :MAX_ROWS
        ]
    ]
    return {
        "conversations": conversation_count,
        "turns": turn_count,
        "rated_up": up,
        "rated_down": down,
        "rated": up + down,
        # Of the rated answers, as Intercom and Zendesk show them: not of all answers.
        "rated_up_share": _share(up, up + down),
        "rated_down_share": _share(down, up + down),
        "rating_rate": _share(up + down, turn_count),
        "resolved": conversation_count - unresolved,
        "resolution_rate": _share(conversation_count - unresolved, conversation_count),
        "handoffs": handoffs.count(),
        "median_first_delta_ms": _median_first_delta_ms(turns),
        "replied": len(first_replies),
        "first_reply_median_s": _percentile(first_replies, 50),
        "first_reply_p90_s": _percentile(first_replies, 90),
        "closed": len(closes),
        "close_median_s": _percentile(closes, 50),
        "close_p90_s": _percentile(closes, 90),
    }


def _first_replies(handoffs) -> list[float]:
    """Seconds from each request to a person's first reply in it (chat/support/replies.py)."""
    first = Message.objects.filter(handoff=OuterRef("pk"), kind=Message.Kind.AGENT).order_by("created_at")
    rows = (
        handoffs.annotate(replied_at=Subquery(first.values("created_at")[:1]))
        .filter(replied_at__isnull=False)
        .values_list("created_at", "replied_at")[:MAX_ROWS]
    )
    return [(replied - created).total_seconds() for created, replied in rows]


def _percentile(values: list[float], percent: int) -> float | None:
    """The nearest-rank percentile: a value that happened, not an interpolation."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def _change(now: float | None, before: float | None) -> float | None:
    """The relative change from the period before; None when either is unknown or zero."""
    if now is None or not before:
        return None
    return (now - before) / before


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _median_first_delta_ms(turns) -> int | None:
    firsts = Generation.objects.filter(turn__in=turns, round=1, first_delta_at__isnull=False).values_list(
        "first_delta_at", "turn__started_at"
    )[:MAX_ROWS]
    waits = [(first - started).total_seconds() * 1000 for first, started in firsts]
    return round(statistics.median(waits)) if waits else None


@dataclass
class Gap:
    """Questions the help center did not answer, grouped by their terms."""

    terms: str
    example: str = ""  # the latest wording, the visitor's own
    query: str = ""  # what the model searched for, when it did
    searches: int = 0  # searches with no good match
    thumbs_down: int = 0
    handoffs: int = 0
    last_seen: datetime | None = None
    conversations: dict[int, str] = field(default_factory=dict)  # id -> public id, the latest first
    # What the visitors said with their thumbs down, the latest first.
    comments: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.searches + self.thumbs_down + self.handoffs

    @property
    def examples(self) -> list[tuple[int, str]]:
        """Up to EXAMPLES conversations to read (id, public id)."""
        return list(self.conversations.items())[:EXAMPLES]

    @property
    def more(self) -> int:
        """How many conversations besides the examples."""
        return max(0, len(self.conversations) - EXAMPLES)

    def add(
        self, kind: str, text: str, when: datetime, conversation: tuple[int, Any], query: str = "", comment: str = ""
    ) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if comment.strip() and comment.strip() not in self.comments:
            self.comments.append(comment.strip())  # ratings come the latest first
        if self.last_seen is None or when > self.last_seen:
            self.last_seen = when
            self.example = text or self.example
            self.query = query or self.query
        elif not self.example:
            self.example = text
        self.conversations.setdefault(conversation[0], str(conversation[1]))


# A question about the visitor's own account, order or invoice names it: an
# invoice or order number ("INV-2291", "#48213", "order 1234567"), an email
# address. No article answers those: they are Support's, not content gaps.
_ACCOUNT = re.compile(
    r"\b[A-Za-z]{2,6}[-_#]?\d{3,}\b"  # INV-2291, ORD_123, PO#5541
    r"|#\d{3,}\b"  # #48213
    r"|\b\d{5,}\b"  # an account, order or card number
    r"|[\w.+-]+@[\w-]+\.[\w.-]+"  # an email address
)


def about_an_account(text: str | None) -> bool:
    """Whether a question names the visitor's own account, order or invoice."""
    return bool(text and _ACCOUNT.search(text))


@dataclass
class Unanswered:
    """The unanswered questions of a period, and what was set apart from them."""

    gaps: list[Gap]
    # Questions about a visitor's own account: for Support, not for an article.
    accounts: Gap = field(default_factory=lambda: Gap(""))
    # Gaps that an article published or changed since answers now, by its words.
    answered_since: int = 0


def unanswered(period: Period, limit: int = 50) -> list[Gap]:
    """The period's unanswered questions, the most frequent first."""
    return unanswered_in(period, limit).gaps


def unanswered_in(period: Period, limit: int = 50) -> Unanswered:
    """The period's unanswered questions, the most frequent first; without
    the questions about a visitor's own account, counted apart, and without
    those an article published or changed since answers now (see answered_now)."""
    window = {"gte": period.start, "lt": period.end}
    gaps: dict[str, Gap] = {}
    result = Unanswered([])

    def add(terms, kind, text, when, conversation, query="", *more_text, comment="") -> None:
        if any(about_an_account(t) for t in (text, query, *more_text)):
            result.accounts.add(kind, text, when, conversation, query, comment)
            return
        gaps.setdefault(terms, Gap(terms)).add(kind, text, when, conversation, query, comment)

    weak = Search.objects.filter(matched=False, created_at__gte=window["gte"], created_at__lt=window["lt"])
    for terms, query, question, when, conversation, public_id in weak.order_by("-created_at").values_list(
        "terms", "query", "turn__user_text", "created_at", "turn__conversation_id", "turn__conversation__public_id"
    )[:MAX_ROWS]:
        if terms:  # erased searches have none
            # The visitor's words, not the model's query (often half-translated).
            add(terms, "searches", question or query, when, (conversation, public_id), query)

    rated_down = Feedback.objects.filter(
        rating=Feedback.Rating.DOWN,
        updated_at__gte=window["gte"],
        updated_at__lt=window["lt"],
        turn__conversation__preview=False,
    ).order_by("-updated_at")  # the latest comment first
    fields = ("turn_id", "turn__user_text", "updated_at", "turn__conversation_id", "turn__conversation__public_id")
    down = list(rated_down.values_list(*fields, "comment")[:MAX_ROWS])
    searched = _last_weak_search_of_turns([row[0] for row in down])
    for turn_id, question, when, conversation, public_id, comment in down:
        terms, query, _ = searched.get(turn_id) or (search.normalised(question), "", question)
        if terms:
            add(terms, "thumbs_down", question or query, when, (conversation, public_id), query, comment=comment)

    handoffs = list(
        Handoff.objects.filter(created_at__gte=window["gte"], created_at__lt=window["lt"]).values_list(
            "conversation_id", "conversation__public_id", "created_at", "reason", "turn__user_text"
        )[:MAX_ROWS]
    )
    searched = _last_weak_search_of_conversations([row[0] for row in handoffs])
    for conversation, public_id, when, reason, question in handoffs:
        # What the conversation searched for in vain says more than "yes please".
        terms, query, asked = searched.get(conversation) or (_terms_of(reason, question)[0], "", "")
        if terms:  # no question asked, or erased: nothing for an article to answer
            # The question that found nothing, else what they asked a person for.
            text = asked or reason or question or query
            add(terms, "handoffs", text, when, (conversation, public_id), query, reason)

    ordered = sorted(gaps.values(), key=lambda gap: (-gap.total, -gap.last_seen.timestamp(), gap.terms))
    changed = _articles_changed_last()
    for gap in ordered:
        if len(result.gaps) >= limit:
            break
        if answered_now(gap, changed):
            result.answered_since += 1
        else:
            result.gaps.append(gap)
    return result


def answered_now(gap: Gap, changed: datetime | None) -> bool:
    """Whether an article answers the gap now that did not when it was
    asked: an article was published or changed after the gap was last seen
    (`changed`: when the last one was), and the articles' words clear the
    relevance floor for the visitor's question or the model's query. By
    words only: free, and instant for a page of gaps; an answer by meaning
    alone stays listed, to be checked by eye. A thumbs down stays listed:
    the visitor read the answer and said it did not help."""
    if gap.thumbs_down or changed is None or gap.last_seen is None or changed <= gap.last_seen:
        return False
    return any(search.answered_by_words(text) for text in (gap.example, gap.query) if text)


def _articles_changed_last() -> datetime | None:
    """When a published article was last written or changed (a string
    reference: chat imports the help center's search only)."""
    articles = apps.get_model("helpcenter", "Article").objects.filter(published=True)
    return articles.aggregate(latest=Max("updated_at"))["latest"]


def _terms_of(*texts: str | None) -> tuple[str, str]:
    for text in texts:
        if text and (terms := search.normalised(text)):
            return terms, text
    return "", ""


def _last_weak_search_of_turns(turn_ids: list[int]) -> dict[int, tuple[str, str, str]]:
    """Each turn's last search without a good match: its terms, its query and the visitor's question."""
    found: dict[int, tuple[str, str, str]] = {}
    rows = Search.objects.filter(turn_id__in=turn_ids, matched=False).exclude(terms="").order_by("created_at", "id")
    for turn_id, terms, query, question in rows.values_list("turn_id", "terms", "query", "turn__user_text"):
        found[turn_id] = (terms, query, question)  # the last one wins
    return found


def _last_weak_search_of_conversations(conversation_ids: list[int]) -> dict[int, tuple[str, str, str]]:
    found: dict[int, tuple[str, str, str]] = {}
    rows = (
        Search.objects.filter(turn__conversation_id__in=conversation_ids, matched=False)
        .exclude(terms="")
        .order_by("created_at", "id")
    )
    for conversation_id, terms, query, question in rows.values_list(
        "turn__conversation_id", "terms", "query", "turn__user_text"
    ):
        found[conversation_id] = (terms, query, question)
    return found

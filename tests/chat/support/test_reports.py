"""Support's figures (chat/support/reports.py): the support report for a period and
the unanswered questions, over data built in the database; the period's days
are the site's (billing/days.py). Then the two admin pages that show them
(chat/support/admin.py), and the searches list, for each role."""

import re
from dataclasses import fields
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Group
from django.http import QueryDict
from django.test import Client
from django.utils import timezone

from billing import days
from billing.models import Price
from billing.services import bill_once
from billing.templatetags.billing_admin import grouped, money
from chat.models import Conversation, Feedback, Generation, Handoff, Search, Turn
from chat.roles import ensure_roles
from chat.support import reports
from chat.support.reports import Period
from helpcenter import search

pytestmark = pytest.mark.django_db

MARCH = Period(date(2026, 3, 1), date(2026, 3, 7))


@pytest.fixture(autouse=True)
def site_calendar(settings):
    settings.TIME_ZONE = "UTC"


def at(day, hour=12, minute=0, second=0, month=3, ms=0):
    return datetime(2026, month, day, hour, minute, second, ms * 1000, tzinfo=UTC)


# --- building the data -----------------------------------------------------------------------


def conversation():
    return Conversation.objects.create(visitor_hash="v")


def turn(conversation, started_at, status="completed", question="a question"):
    made = Turn.objects.create(conversation=conversation, status=status, user_text=question, model="m")
    Turn.objects.filter(pk=made.pk).update(started_at=started_at)  # auto_now_add otherwise
    made.refresh_from_db()
    return made


def rate(turn, rating, when=None):
    feedback = Feedback.objects.create(turn=turn, rating=rating)
    Feedback.objects.filter(pk=feedback.pk).update(updated_at=when or turn.started_at + timedelta(minutes=1))
    return feedback


def first_delta(turn, ms, round=1):
    """A model call whose first delta came `ms` after the visitor's message
    was stored (the call itself started 100 ms in)."""
    started = turn.started_at + timedelta(milliseconds=100)
    return Generation.objects.create(
        turn=turn,
        round=round,
        started_at=started,
        first_delta_at=None if ms is None else turn.started_at + timedelta(milliseconds=ms),
        ended_at=started + timedelta(seconds=5),
    )


def handoff(conversation, when, source="visitor", status="open", reason="", turn=None):
    return Handoff.objects.create(
        conversation=conversation, turn=turn, source=source, status=status, reason=reason, created_at=when
    )


def searched(turn, query, when, matched=False):
    return Search.objects.create(
        turn=turn,
        query=query,
        terms=search.normalised(query),
        top_score=0.9 if matched else 0.3,
        matched=matched,
        article_ids=[1] if matched else [],
        created_at=when,
    )


# --- the support report's figures ------------------------------------------------------------


@pytest.fixture
def week():
    """A week of support, with data on both sides of it."""
    a, b, c, d, e, g, outside, late = (conversation() for _ in range(8))
    # A: two turns, one rated up (resolved, but for its old request below).
    a1 = turn(a, at(2, 10))
    rate(a1, "up")
    first_delta(a1, 400)
    first_delta(a1, 5000, round=2)  # only the first model call counts
    a2 = turn(a, at(3, 9))
    first_delta(a2, 1000)
    # B: stopped, rated down; unresolved.
    b1 = turn(b, at(4, 8), status="interrupted")
    rate(b1, "down")
    first_delta(b1, None)  # no text came: no time to first delta
    # C: failed, and the visitor asked for a person; unresolved.
    c1 = turn(c, at(5, 7), status="failed")
    first_delta(c1, 250)
    handoff(c, at(5, 7, 5), source="visitor", status="open", turn=c1)
    # D: truncated and rated up in the week, but an answer before it was rated
    # down; unresolved, as of now.
    d0 = turn(d, at(20, month=2))
    rate(d0, "down")
    d1 = turn(d, at(6, 6), status="truncated")
    rate(d1, "up")
    # E: the assistant offered a person, now closed; unresolved.
    e1 = turn(e, at(6, 20))
    handoff(e, at(6, 20, 1), source="assistant", status="closed", turn=e1)
    # G: a turn at the week's first instant, still streaming; resolved.
    turn(g, at(1, 0), status="streaming")
    # Outside: a turn at the first instant after the week, rated down, fast, with a request.
    o1 = turn(outside, at(8, 0))
    rate(o1, "down")
    first_delta(o1, 10)
    handoff(outside, at(8, 0, 1))
    # A's visitor asked for a person the second before the week: not one of the
    # week's requests, but A is unresolved (see the tests below).
    handoff(a, at(28, 23, 59, 59, month=2), status="closed")
    # Late: a conversation from February whose visitor asked for a person in the week.
    turn(late, at(10, month=2))
    handoff(late, at(3, 15), status="claimed")
    return {"a": a}


def test_the_report_counts_the_periods_conversations_and_turns(week):
    figures = reports.figures(MARCH)
    assert figures["conversations"] == 6  # A, B, C, D, E, G
    assert figures["turns"] == 7
    assert figures["statuses"] == [
        ("streaming", 1, 1 / 7),
        ("completed", 3, 3 / 7),
        ("interrupted", 1, 1 / 7),
        ("truncated", 1, 1 / 7),
        ("failed", 1, 1 / 7),
    ]


def test_the_report_counts_ratings_of_the_periods_turns(week):
    figures = reports.figures(MARCH)
    assert (figures["rated_up"], figures["rated_down"], figures["rated"]) == (2, 1, 3)
    # Shares of the rated answers, as Intercom and Zendesk show them (not of all 7).
    assert figures["rated_up_share"] == 2 / 3
    assert figures["rated_down_share"] == 1 / 3
    assert figures["rating_rate"] == 3 / 7


def test_resolved_means_no_thumbs_down_and_no_request_for_a_person(week):
    figures = reports.figures(MARCH)
    # A's request before the week makes it unresolved too: "as of now".
    assert (figures["resolved"], figures["resolution_rate"]) == (1, 1 / 6)


def test_resolution_without_the_old_request(week):
    Handoff.objects.filter(conversation=week["a"]).delete()
    figures = reports.figures(MARCH)
    assert (figures["resolved"], figures["resolution_rate"]) == (2, 2 / 6)  # A and G


def test_the_report_counts_the_periods_requests_for_a_person(week):
    figures = reports.figures(MARCH)
    assert figures["handoffs"] == 3  # C's, E's and Late's
    assert figures["handoffs_by_source"] == [("visitor", 2), ("assistant", 1), ("support", 0)]
    assert figures["handoffs_by_status"] == [("open", 1), ("claimed", 1), ("closed", 1)]


def test_the_median_time_to_first_delta_runs_from_the_message_to_round_ones_first_delta(week):
    # 250, 400 and 1000 ms: not from the call's start (100 ms later), not round 2's.
    assert reports.figures(MARCH)["median_first_delta_ms"] == 400


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    for ms in (100, 300):
        first_delta(turn(conversation(), at(2)), ms)
    assert reports.figures(MARCH)["median_first_delta_ms"] == 200


def test_the_report_lists_the_top_unanswered_questions(week):
    for number in range(7):
        searched(Turn.objects.first(), f"zorble{number} question", at(2, 12, number))
    figures = reports.figures(MARCH)
    assert len(figures["unanswered"]) == reports.TOP_UNANSWERED == 5
    assert [g.terms for g in figures["unanswered"]] == [g.terms for g in reports.unanswered(MARCH)][:5]


def test_an_empty_period_has_no_shares():
    figures = reports.figures(MARCH)
    empty = {
        "conversations": 0,
        "turns": 0,
        "rated_up": 0,
        "rated_down": 0,
        "rated": 0,
        "rated_up_share": None,
        "rated_down_share": None,
        "rating_rate": None,
        "resolved": 0,
        "resolution_rate": None,
        "handoffs": 0,
        "median_first_delta_ms": None,
        "replied": 0,
        "first_reply_median_s": None,
        "first_reply_p90_s": None,
        "closed": 0,
        "close_median_s": None,
        "close_p90_s": None,
    }
    assert {key: figures[key] for key in empty} == empty
    assert figures["previous"] == empty
    assert set(figures["changes"].values()) == {None}
    assert figures["handoffs_by_source"] == [("visitor", 0), ("assistant", 0), ("support", 0)]
    assert figures["statuses"] == [(status, 0, None) for status in Turn.Status.values]
    assert figures["unanswered"] == []
    assert figures["volume"] == [], "no rows of zeros"
    assert figures["compared"] is False


def test_each_figure_is_compared_with_the_period_before(week):
    # The week before March 1-7: February 22-28.
    assert MARCH.previous == Period(date(2026, 2, 22), date(2026, 2, 28))
    turn(conversation(), at(25, month=2))
    figures = reports.figures(MARCH)
    assert (figures["previous"]["conversations"], figures["previous"]["turns"]) == (1, 1)
    assert figures["changes"]["turns"] == (7 - 1) / 1
    assert figures["previous"]["handoffs"] == 1  # A's, the second before the week
    assert figures["changes"]["handoffs"] == (3 - 1) / 1
    assert figures["changes"]["rated_up_share"] is None, "nothing rated before: no change to tell"


def test_volume_by_day_counts_conversations_and_turns(week):
    volume = reports.figures(MARCH)["volume"]
    # The days with a turn: the 7th had none.
    assert [row["first"] for row in volume] == [row["last"] for row in volume]
    assert [row["first"] for row in volume] == [date(2026, 3, day) for day in range(1, 7)]
    assert [row["turns"] for row in volume] == [1, 1, 1, 1, 1, 2]
    assert [row["conversations"] for row in volume] == [1, 1, 1, 1, 1, 2]
    assert max(row["bar"] for row in volume) == 100


def test_time_to_a_persons_first_reply_and_to_close():
    from chat.models import Message

    for minutes_to_reply, minutes_to_close in ((2, 30), (10, 60), (4, None)):
        c = conversation()
        request = handoff(c, at(3, 9), status="closed" if minutes_to_close else "claimed")
        replied = at(3, 9) + timedelta(minutes=minutes_to_reply)
        Message.objects.create(conversation=c, handoff=request, kind="agent", text="Hi", created_at=replied)
        Message.objects.create(conversation=c, handoff=request, kind="agent", text="Again", created_at=at(3, 11))
        if minutes_to_close:
            closed = at(3, 9) + timedelta(minutes=minutes_to_close)
            Handoff.objects.filter(pk=request.pk).update(closed_at=closed)
    handoff(conversation(), at(3, 9))  # nobody replied yet: not in the times

    figures = reports.figures(MARCH)

    assert (figures["replied"], figures["first_reply_median_s"], figures["first_reply_p90_s"]) == (3, 240, 600)
    assert (figures["closed"], figures["close_median_s"], figures["close_p90_s"]) == (2, 1800, 3600)


def test_the_period_shown_is_highlighted_the_default_too(support):
    page = support.get("/admin/chat/supportreport/").content.decode()
    assert re.search(r'<a href="\?days=30" aria-current="true" class="selected">', page)
    page = support.get("/admin/chat/supportreport/?days=7").content.decode()
    assert re.search(r'<a href="\?days=7" aria-current="true" class="selected">', page)
    assert 'href="?days=30" aria-current' not in page


# --- the unanswered questions -----------------------------------------------------------------


def test_weak_searches_for_the_same_thing_group():
    first, second, third = conversation(), conversation(), conversation()
    searched(turn(first, at(2)), "Can I pay with bitcoin?", at(2, 10))
    later = turn(second, at(3), question="Do you take bitcoin?")
    searched(later, "pay in bitcoins", at(3, 10))
    searched(later, "install the widget", at(3, 11), matched=True)  # found: not a gap
    old = turn(third, at(20, month=2))
    searched(old, "bitcoin payments", at(28, 23, month=2))  # before the period
    erased = searched(turn(third, at(4)), "pay in bitcoins", at(4, 10))
    Search.objects.filter(pk=erased.pk).update(query="", terms="")  # erased: no terms

    [gap] = reports.unanswered(MARCH)

    assert gap.terms == "bitcoin pay"
    assert (gap.searches, gap.thumbs_down, gap.handoffs, gap.total) == (2, 0, 0, 2)
    # The latest wording, the visitor's own; the model's query beside it.
    assert (gap.example, gap.query) == ("Do you take bitcoin?", "pay in bitcoins")
    assert gap.last_seen == at(3, 10)
    assert gap.conversations == {second.id: str(second.public_id), first.id: str(first.public_id)}
    assert list(gap.conversations) == [second.id, first.id]  # the latest first


def test_a_thumbs_down_takes_the_turns_last_weak_search():
    talk = conversation()
    rated = turn(talk, at(2), question="how do I pay?")
    searched(rated, "pay with paypal", at(2, 12, 1))
    searched(rated, "pay in bitcoins", at(2, 12, 2))
    searched(rated, "plans and pricing", at(2, 12, 3), matched=True)
    rate(rated, "down", at(2, 13))

    gaps = {gap.terms: gap for gap in reports.unanswered(MARCH)}

    assert set(gaps) == {"bitcoin pay", "pay paypal"}
    assert (gaps["bitcoin pay"].searches, gaps["bitcoin pay"].thumbs_down) == (1, 1)
    # The visitor's words; the model's query beside them.
    assert (gaps["bitcoin pay"].example, gaps["bitcoin pay"].query) == ("how do I pay?", "pay in bitcoins")
    assert gaps["bitcoin pay"].last_seen == at(2, 13)
    assert (gaps["pay paypal"].searches, gaps["pay paypal"].thumbs_down) == (1, 0)


def test_a_thumbs_down_without_a_weak_search_takes_the_question():
    talk = conversation()
    rated = turn(talk, at(2), question="Where is the dark mode toggle?")
    searched(rated, "dark mode", at(2, 12, 1), matched=True)
    rate(rated, "down", at(2, 13))
    rate(turn(talk, at(3), question="Where is the dark mode toggle?"), "up", at(3, 13))  # up: not a gap
    rate(turn(talk, at(4), question="dark mode toggle"), "down", at(8, 0))  # rated after the period
    erased = turn(talk, at(5), question="")  # erased: no question, no terms
    searched(erased, "toggle", at(5, 1))
    Search.objects.filter(turn=erased).update(query="", terms="")
    rate(erased, "down", at(5, 13))

    [gap] = reports.unanswered(MARCH)

    assert (gap.terms, gap.example) == ("dark mode toggle", "Where is the dark mode toggle?")
    assert (gap.searches, gap.thumbs_down, gap.handoffs) == (0, 1, 0)
    assert gap.conversations == {talk.id: str(talk.public_id)}


def test_a_request_for_a_person_takes_the_conversations_last_weak_search():
    talk = conversation()
    asked = turn(talk, at(2), question="Can I pay with bitcoin?")
    searched(asked, "pay with paypal", at(2, 12, 1))
    searched(asked, "pay in bitcoins", at(2, 12, 2))
    yes = turn(talk, at(2, 13), question="yes please")
    handoff(talk, at(2, 13, 1), source="assistant", reason="wants to pay in crypto", turn=yes)

    gaps = {gap.terms: gap for gap in reports.unanswered(MARCH)}

    assert (gaps["bitcoin pay"].searches, gaps["bitcoin pay"].handoffs) == (1, 1)
    # The question that found nothing, in the visitor's words, not "yes please".
    assert (gaps["bitcoin pay"].example, gaps["bitcoin pay"].query) == ("Can I pay with bitcoin?", "pay in bitcoins")
    assert set(gaps) == {"bitcoin pay", "pay paypal"}  # not the reason's terms


def test_a_request_for_a_person_without_a_weak_search_takes_the_reason_else_the_question():
    with_reason, with_question, with_nothing, too_late = (conversation() for _ in range(4))
    handoff(with_reason, at(2), reason="I need an invoice in Portuguese")
    asked = turn(with_question, at(3), question="Can I talk to someone about SSO?")
    handoff(with_question, at(3, 13), reason="", turn=asked)
    handoff(with_nothing, at(4))  # "Talk to a person" before any question
    handoff(too_late, at(8, 0), reason="I need an invoice in Portuguese")

    gaps = {gap.terms: gap for gap in reports.unanswered(MARCH)}

    # The one with no words is no question for an article: the report counts it.
    assert set(gaps) == {"invoice portuguese", "someone sso talk"}
    assert gaps["invoice portuguese"].example == "I need an invoice in Portuguese"
    assert gaps["someone sso talk"].example == "Can I talk to someone about SSO?"
    assert all(gap.total == gap.handoffs == 1 for gap in gaps.values())
    assert reports.figures(MARCH)["handoffs"] == 3


def test_the_most_frequent_come_first_then_the_latest_then_by_terms():
    talk = conversation()
    asked = turn(talk, at(2))
    for minute in range(3):
        searched(asked, "dark mode", at(2, 10, minute))
    searched(asked, "pay in bitcoins", at(2, 9))
    searched(asked, "pay in bitcoins", at(2, 9, 1))
    searched(asked, "google sheets", at(3, 9))
    searched(asked, "google calendar", at(3, 9))
    searched(asked, "zapier", at(4, 9))
    searched(asked, "airtable", at(4, 9))

    gaps = reports.unanswered(MARCH)

    assert [(g.terms, g.total) for g in gaps] == [
        ("dark mode", 3),
        ("bitcoin pay", 2),
        ("airtable", 1),  # the latest, then alphabetical
        ("zapier", 1),
        ("calendar google", 1),
        ("google sheet", 1),
    ]
    assert [g.terms for g in reports.unanswered(MARCH, limit=2)] == ["dark mode", "bitcoin pay"]


# --- the period -------------------------------------------------------------------------------


def query(string):
    return QueryDict(string)


def test_the_default_period_is_the_last_30_days():
    today = days.today()
    assert Period.from_query(query("")) == Period(today - timedelta(days=29), today)


@pytest.mark.parametrize("count", [7, 30, 90])
def test_the_presets(count):
    period = Period.from_query(query(f"days={count}"))
    assert (period.last, period.days) == (days.today(), count)


def test_from_and_to():
    assert Period.from_query(query("from=2026-03-01&to=2026-03-07")) == MARCH
    assert MARCH.days == 7
    assert (MARCH.start, MARCH.end) == (at(1, 0), at(8, 0))


def test_from_alone_runs_to_today_and_to_alone_is_one_day():
    assert Period.from_query(query("from=2026-03-01")) == Period(date(2026, 3, 1), days.today())
    assert Period.from_query(query("to=2026-03-07")) == Period(date(2026, 3, 7), date(2026, 3, 7))


def test_a_range_wins_over_a_preset():
    assert Period.from_query(query("days=7&from=2026-03-01&to=2026-03-07")) == MARCH


def test_a_range_of_366_days_at_most():
    assert Period.from_query(query("from=2024-01-01&to=2024-12-31")).days == 366
    with pytest.raises(ValueError):
        Period.from_query(query("from=2024-01-01&to=2025-01-01"))


@pytest.mark.parametrize(
    "string",
    [
        "days=14",
        "days=",
        "days=seven",
        "days=-7",
        "from=2026-03-07&to=2026-03-01",  # backwards
        "from=2026-13-01&to=2026-12-01",
        "from=yesterday",
        "to=2026-02-30",
    ],
)
def test_bad_periods_raise_value_error(string):
    with pytest.raises(ValueError):
        Period.from_query(query(string))


def test_days_are_the_sites(settings):
    settings.TIME_ZONE = "Pacific/Auckland"  # UTC+13 in March
    auckland = ZoneInfo("Pacific/Auckland")
    talk = conversation()
    before_midnight = turn(talk, datetime(2026, 3, 1, 23, 30, tzinfo=auckland))  # 10:30 UTC on the 1st
    after_midnight = turn(talk, datetime(2026, 3, 2, 0, 30, tzinfo=auckland))  # 11:30 UTC on the 1st
    searched(before_midnight, "pay in bitcoins", before_midnight.started_at)
    searched(after_midnight, "dark mode", after_midnight.started_at)
    first, second = Period(date(2026, 3, 1), date(2026, 3, 1)), Period(date(2026, 3, 2), date(2026, 3, 2))

    assert second.start == datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    assert reports.figures(first)["turns"] == reports.figures(second)["turns"] == 1
    assert [g.terms for g in reports.unanswered(first)] == ["bitcoin pay"]
    assert [g.terms for g in reports.unanswered(second)] == ["dark mode"]
    assert Period.from_query(query("days=7")).last == timezone.localdate(timezone=auckland)

    settings.TIME_ZONE = "UTC"  # both on the 1st
    assert reports.figures(Period(date(2026, 3, 1), date(2026, 3, 1)))["turns"] == 2


# --- the admin pages --------------------------------------------------------------------------

UNANSWERED_PAGE = "/admin/chat/unansweredquestion/"
REPORT_PAGE = "/admin/chat/supportreport/"
SEARCHES_PAGE = "/admin/chat/search/"


def login(user):
    client = Client()
    client.force_login(user)
    return client


def staff(django_user_model, group):
    ensure_roles()
    user = django_user_model.objects.create_user(username=group.lower(), password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return login(user)


@pytest.fixture
def support(django_user_model):
    return staff(django_user_model, "Support")


@pytest.fixture
def finance(django_user_model):
    return staff(django_user_model, "Finance")


@pytest.fixture
def superuser(django_user_model):
    return login(django_user_model.objects.create_superuser("root", password="pw"))


@pytest.fixture
def gaps_this_week():
    """Weak searches in the last week (the site's), and one long before."""
    now = timezone.now()
    talk = conversation()
    asked = turn(talk, now, question="Can I pay with <b>bitcoin</b>?")
    searched(asked, "pay with <b>bitcoin</b>", now)
    searched(asked, "pay in bitcoins", now - timedelta(minutes=1))
    old = turn(talk, now - timedelta(days=60), question="dark mode?")
    searched(old, "dark mode", now - timedelta(days=60))
    return talk


def main_content(response):
    page = response.content.decode()
    return page[page.index('<div id="content-main">') :]


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE])
def test_support_and_superusers_open_the_pages(support, superuser, page):
    for client in (support, superuser):
        response = client.get(page)
        assert response.status_code == 200
        assert response.context["period"] == Period.last_days(30)


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE, SEARCHES_PAGE])
def test_finance_may_not(finance, page):
    assert finance.get(page).status_code == 403


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE])
def test_anonymous_visitors_are_sent_to_log_in(client, page):
    response = client.get(page)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_the_unanswered_page_lists_the_gaps(support, gaps_this_week):
    response = support.get(UNANSWERED_PAGE + "?days=7")
    assert response.status_code == 200
    assert [g.terms for g in response.context["gaps"]] == ["b bitcoin pay", "bitcoin pay"]
    page = main_content(response)
    assert "pay with &lt;b&gt;bitcoin&lt;/b&gt;" in page  # escaped
    assert "<b>bitcoin</b>" not in page
    assert f'/admin/chat/conversation/{gaps_this_week.id}/change/"' in page
    assert "dark mode" not in page  # 60 days ago


def test_a_range_of_dates_picks_other_gaps(support, gaps_this_week):
    long_ago = days.today() - timedelta(days=60)
    response = support.get(UNANSWERED_PAGE + f"?from={long_ago}&to={long_ago}")
    assert response.status_code == 200
    assert [g.terms for g in response.context["gaps"]] == ["dark mode"]
    assert response.context["period"] == Period(long_ago, long_ago)
    assert response.context["custom"] is True


def test_the_report_shows_the_figures(support):
    week_ago = timezone.now() - timedelta(days=3)
    talk = conversation()
    rate(turn(talk, week_ago), "up", week_ago)
    turn(conversation(), week_ago, status="failed")
    response = support.get(REPORT_PAGE + "?days=7")
    assert response.status_code == 200
    figures = response.context["figures"]
    assert (figures["conversations"], figures["turns"], figures["rated_up"]) == (2, 2, 1)
    assert response.context["presets"] == [(7, True), (30, False), (90, False)]
    page = main_content(response)
    assert "50%" in page  # rated up
    assert "100%" in page  # resolved
    assert "Nothing went unanswered in this period." in page


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE])
@pytest.mark.parametrize(
    "string",
    ["days=14", "days=", "from=2026-03-07&to=2026-03-01", "from=nonsense", "from=2020-01-01&to=2026-01-01"],
)
def test_a_bad_period_is_a_bad_request(support, page, string):
    response = support.get(f"{page}?{string}")
    assert response.status_code == 400
    assert response.content.decode().startswith("Bad period:")


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE])
@pytest.mark.parametrize("string", ["q=bitcoin", "o=1", "matched__exact=0", "days=7&terms__startswith=b", "p=2"])
def test_an_unknown_parameter_is_a_bad_request(support, page, string):
    response = support.get(f"{page}?{string}")
    assert response.status_code == 400
    assert response.content.decode().startswith("Unknown parameter:")


class VisibleText(HTMLParser):
    """The text a person reads on a page: the text between tags and the
    attributes shown as text (a tooltip, an image's alternative, a field's
    hint, a button's label), but not scripts, styles, hrefs, ids, classes or
    hidden values such as the CSRF token, which hold random characters."""

    SHOWN = {"title", "alt", "aria-label", "placeholder"}
    HIDDEN = {"script", "style", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.hidden = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self.hidden += 1
        attrs = dict(attrs)
        shown = [value for name, value in attrs.items() if name in self.SHOWN]
        if tag == "input" and attrs.get("type") in ("submit", "button", "reset"):
            shown.append(attrs.get("value"))
        self.parts.extend(value for value in shown if value)

    def handle_endtag(self, tag):
        if tag in self.HIDDEN and self.hidden:
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def visible_text(html):
    parser = VisibleText()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())


# What a price or a cost would look like: the words billing's pages use ("Cost
# (USD)", "unpriced", "Prices"), and a currency.
PRICE_WORDS = re.compile(r"\b(?:un)?pric\w*|\bcost\w*|\busd\b|\bdollars?\b|[$€£¢]", re.IGNORECASE)


def price_talk(text, cost):
    """What in the text speaks of a price or a cost: the words, and the turn's
    cost as billing's pages write it (money: 7.89) or as stored (7.89000000)."""
    amounts = {money(cost), grouped(cost), str(cost), str(cost.normalize())}
    return PRICE_WORDS.findall(text) + [amount for amount in amounts if amount in text]


@pytest.mark.parametrize("page", [UNANSWERED_PAGE, REPORT_PAGE])
def test_the_pages_show_no_price_or_cost(support, superuser, page):
    now = timezone.now()
    Price.objects.create(
        model="m", input_per_million=7000, output_per_million=8900, effective_from=now - timedelta(days=1)
    )
    asked = turn(conversation(), now)
    searched(asked, "pay in bitcoins", now)
    entry = bill_once(asked.id, model="m", input_tokens=1000, output_tokens=100, estimated=False)
    assert money(entry.cost) == "7.89"  # a turn with a price, on the page's period

    response = support.get(page)
    assert response.status_code == 200
    assert "pay in bitcoins" in visible_text(main_content(response))  # the turn is on the page
    # Support reads the whole page, its menu too: no price, no cost, no currency.
    assert price_talk(visible_text(response.content.decode()), entry.cost) == []
    # Nor does the page hand the template one to show.
    shown = response.context["figures"] if page == REPORT_PAGE else {"gaps": response.context["gaps"]}
    names = [*shown, *(f.name for f in fields(reports.Gap))]
    assert not [name for name in names if PRICE_WORDS.search(name.replace("_", " "))]
    # A superuser's menu lists the price table; the page itself names no price.
    superuser_page = visible_text(main_content(superuser.get(page)))
    assert price_talk(superuser_page, entry.cost) == []


def test_price_talk_finds_a_price_but_not_a_token():
    cost = Decimal("7.89000000")
    assert price_talk(visible_text("<p>Cost: $1.20</p>"), cost) == ["Cost", "$"]
    assert price_talk(visible_text("<dt>Cost (USD)</dt><dd>7.89</dd>"), cost) == ["Cost", "USD", "7.89"]
    assert price_talk(visible_text("<td>unpriced</td><svg><title>Mar 1: 7.89</title></svg>"), cost) == [
        "unpriced",
        "7.89",
    ]
    assert price_talk(visible_text('<a href="#" title="Prices">x</a>'), cost) == ["Prices"]
    hidden = (
        '<input type="hidden" name="csrfmiddlewaretoken" value="aUSDcost$price7.89">'
        '<div id="usd-cost" class="price" data-x="$"><script>var cost = "$7.89";</script>'
        "<style>.usd::before { content: '$'; }</style>Conversations</div>"
    )
    assert visible_text(hidden) == "Conversations"
    assert price_talk(visible_text(hidden), cost) == []


def test_the_unanswered_page_takes_the_same_queries_for_few_and_many(support, django_assert_max_num_queries):
    now = timezone.now()
    asked = turn(conversation(), now)
    searched(asked, "pay in bitcoins", now)
    support.get(UNANSWERED_PAGE)
    for number in range(30):
        talk = conversation()
        rated = turn(talk, now, question=f"zorble{number}?")
        searched(rated, f"zorble{number} pay", now)
        rate(rated, "down", now)
        handoff(talk, now, reason=f"zorble{number}")
    with django_assert_max_num_queries(12):
        assert support.get(UNANSWERED_PAGE).status_code == 200


def test_the_report_takes_the_same_queries_for_few_and_many(support, django_assert_max_num_queries):
    now = timezone.now()
    for number in range(30):
        talk = conversation()
        rated = turn(talk, now, question=f"zorble{number}?")
        first_delta(rated, 300)
        searched(rated, f"zorble{number} pay", now)
        rate(rated, "down", now)
        handoff(talk, now, reason=f"zorble{number}")
    # The headline figures twice (this period and the one before), each a fixed number of queries.
    with django_assert_max_num_queries(32):
        assert support.get(REPORT_PAGE).status_code == 200


# --- the searches list ------------------------------------------------------------------------


def test_support_reads_every_search(support):
    now = timezone.now()
    asked = turn(conversation(), now)
    weak = searched(asked, "pay with <b>bitcoin</b>", now)
    found = searched(asked, "install the widget", now - timedelta(minutes=1), matched=True)

    response = support.get(SEARCHES_PAGE)

    assert response.status_code == 200
    assert [s.pk for s in response.context["cl"].result_list] == [weak.pk, found.pk]  # the latest first
    page = response.content.decode()
    assert "pay with &lt;b&gt;bitcoin&lt;/b&gt;" in page
    assert "0.30" in page and "0.90" in page
    # The transcript at the turn, not "Turn 1".
    assert f"/admin/chat/conversation/{asked.conversation_id}/change/#turn-{asked.id}" in page
    unmatched = support.get(SEARCHES_PAGE + "?matched__exact=0")
    assert [s.pk for s in unmatched.context["cl"].result_list] == [weak.pk]
    assert support.get(SEARCHES_PAGE + f"{weak.pk}/change/").status_code == 200


def test_the_searches_name_the_articles_they_returned(support):
    from helpcenter import index
    from helpcenter.models import Article

    article = Article.objects.create(title="Cancel your plan", slug="cancel-plan", body="Cancel it.", published=True)
    index.forget()
    now = timezone.now()
    row = searched(turn(conversation(), now), "cancel plan", now, matched=True)
    Search.objects.filter(pk=row.pk).update(article_ids=[article.id, 999])

    page = support.get(SEARCHES_PAGE).content.decode()

    # Titles, linked, not ids that read like counts; one gone is named as such.
    assert '<a href="/help/cancel-plan/">Cancel your plan</a>' in page
    assert "article 999" in page


def test_an_erased_search_reads_erased(support):
    now = timezone.now()
    asked = turn(conversation(), now)
    searched(asked, "pay with bitcoin", now)
    Turn.objects.filter(pk=asked.pk).update(erased_at=now)
    page = support.get(SEARCHES_PAGE).content.decode()
    assert "(erased)" in page
    assert "pay with bitcoin" not in page


def test_the_searches_list_filters_only_by_what_it_offers(support, settings):
    settings.DEBUG = False
    assert support.get(SEARCHES_PAGE + "?terms__startswith=b").status_code == 400
    assert support.get(SEARCHES_PAGE + "?query__contains=bit").status_code == 400


def test_searches_cannot_be_added_changed_or_deleted(superuser):
    asked = turn(conversation(), timezone.now())
    weak = searched(asked, "pay with bitcoin", timezone.now())
    assert superuser.get(SEARCHES_PAGE + "add/").status_code == 403
    assert superuser.get(SEARCHES_PAGE + f"{weak.pk}/delete/").status_code == 403
    assert superuser.post(SEARCHES_PAGE + f"{weak.pk}/change/", {"query": "changed"}).status_code == 403
    weak.refresh_from_db()
    assert weak.query == "pay with bitcoin"


def gap_row(page, example):
    row = page[page.index(example) :]
    return row[: row.index("</tr>")]


def test_a_gap_links_its_three_latest_conversations_and_counts_the_rest(support):
    now = timezone.now()
    talks = [conversation() for _ in range(5)]
    for minutes, talk in enumerate(talks):
        searched(turn(talk, now), "pay in bitcoins", now - timedelta(minutes=minutes))

    row = gap_row(support.get(UNANSWERED_PAGE).content.decode(), "pay in bitcoins")

    links = [f'href="/admin/chat/conversation/{talk.id}/change/"' for talk in talks]
    assert [link in row for link in links] == [True, True, True, False, False]
    assert row.count("/admin/chat/conversation/") == 3
    assert "and 2 more" in row


def test_a_request_for_a_person_with_no_words_is_no_row(support):
    handoff(conversation(), timezone.now())
    page = main_content(support.get(UNANSWERED_PAGE))
    assert "Nothing went unanswered in this period." in page


def test_the_admin_index_offers_the_pages_to_support_only(support, finance):
    pages = [UNANSWERED_PAGE, REPORT_PAGE, SEARCHES_PAGE]
    support_index = support.get("/admin/").content.decode()
    assert [f'href="{page}"' in support_index for page in pages] == [True, True, True]
    finance_index = finance.get("/admin/").content.decode()
    assert [f'href="{page}"' in finance_index for page in pages] == [False, False, False]


def test_the_report_links_to_the_unanswered_questions_of_its_period(support, gaps_this_week):
    first = days.today() - timedelta(days=6)
    link = f"{UNANSWERED_PAGE}?from={first}&amp;to={days.today()}"
    assert link in support.get(REPORT_PAGE + "?days=7").content.decode()

    response = support.get(link.replace("&amp;", "&"))
    assert response.status_code == 200
    assert response.context["period"] == Period.last_days(7)
    assert [g.terms for g in response.context["gaps"]] == ["b bitcoin pay", "bitcoin pay"]


def test_questions_about_a_visitors_own_account_are_no_content_gap():
    talk = conversation()
    for when, question in enumerate(
        [
            "Invoice INV-2291 has the wrong company name",
            "Where is my order #48213?",
            "Please change the email on my account to ana@example.com",
            "Can I pay with bitcoin?",
        ],
        start=2,
    ):
        searched(turn(talk, at(when), question=question), question, at(when, 12))

    found = reports.unanswered_in(MARCH)

    assert [gap.example for gap in found.gaps] == ["Can I pay with bitcoin?"]
    assert found.accounts.total == 3
    assert reports.about_an_account("Order 1234567 never arrived")
    assert not reports.about_an_account("How do I cancel my plan in 2026?")


def test_a_question_an_article_now_answers_leaves_the_list():
    from helpcenter import index
    from helpcenter.models import Article

    talk = conversation()
    searched(turn(talk, at(2), question="How do I zorblify my board?"), "zorblify board", at(2, 12))
    assert [gap.terms for gap in reports.unanswered(MARCH)] == ["board zorblify"]

    Article.objects.create(
        title="Zorblify your board",
        slug="zorblify-board",
        body="To zorblify your board, open the board's settings and choose Zorblify. Zorblify board now.",
        published=True,
    )
    index.forget()  # as a save does once its transaction commits

    found = reports.unanswered_in(MARCH)
    assert found.gaps == [] and found.answered_since == 1


def test_the_page_says_what_it_set_apart(support):
    now = timezone.now()
    talk = conversation()
    question = "Invoice INV-2291 has the wrong company name"
    searched(turn(talk, now, question=question), "invoice company name", now)

    page = visible_text(main_content(support.get(UNANSWERED_PAGE)))

    assert "Nothing went unanswered in this period." in page
    assert "1 question named a visitor's own account, order or invoice" in page


# --- what an article answers now, and what it cannot say -----------------------------------------

RATE_LIMITS_BODY = (
    "Kookee limits API requests per workspace. The API rate limits are 60 requests per minute on Growth "
    "and 300 requests per minute on Business. API rate limits reset every minute."
)


def rate_limits_article(changed_at):
    from helpcenter import index
    from helpcenter.models import Article

    article = Article.objects.create(
        title="REST API rate limits", slug="api-rate-limits", body=RATE_LIMITS_BODY, published=True
    )
    Article.objects.filter(pk=article.pk).update(created_at=changed_at, updated_at=changed_at)  # auto_now otherwise
    index.forget()  # as a save does once its transaction commits
    assert search.answered_by_words("What are the API rate limits?")
    return article


def test_a_thumbs_down_stays_listed_with_its_comment_though_an_article_matches_its_words():
    rate_limits_article(changed_at=at(1))
    talk = conversation()
    asked = turn(talk, at(2), question="What are the API rate limits?")
    searched(asked, "API rate limits", at(2, 12, 1), matched=True)
    feedback = rate(asked, "down", at(2, 13))
    Feedback.objects.filter(pk=feedback.pk).update(comment="didn't tell me the actual limits")
    older = turn(talk, at(3), question="api rate limits?")
    rate(older, "down", at(3, 13))  # no comment
    Feedback.objects.create(turn=turn(talk, at(4), question="API rate limits"), rating="down", comment="same")
    Feedback.objects.filter(turn__user_text="API rate limits").update(updated_at=at(4, 13))

    found = reports.unanswered_in(MARCH)

    [gap] = found.gaps
    assert (gap.terms, gap.thumbs_down, gap.searches) == (search.normalised("API rate limits"), 3, 0)
    assert gap.comments == ["same", "didn't tell me the actual limits"]  # the latest first
    assert found.answered_since == 0


def test_words_that_match_now_while_no_article_changed_leave_the_question_listed():
    rate_limits_article(changed_at=at(1))  # before the question: it went unanswered with this article
    talk = conversation()
    searched(turn(talk, at(2), question="What are the API rate limits?"), "API rate limits", at(2, 12))

    found = reports.unanswered_in(MARCH)

    assert [gap.example for gap in found.gaps] == ["What are the API rate limits?"]
    assert found.answered_since == 0


def test_a_question_asked_again_after_the_article_changed_stays_listed():
    talk = conversation()
    searched(turn(talk, at(2), question="What are the API rate limits?"), "API rate limits", at(2, 12))
    rate_limits_article(changed_at=at(3))
    searched(turn(talk, at(4), question="What are the API rate limits?"), "API rate limits", at(4, 12))

    found = reports.unanswered_in(MARCH)

    assert [(gap.example, gap.searches) for gap in found.gaps] == [("What are the API rate limits?", 2)]
    assert found.answered_since == 0
    rate_limits_article_changed_again = at(5)
    from helpcenter.models import Article

    Article.objects.update(updated_at=rate_limits_article_changed_again)
    assert reports.unanswered_in(MARCH).answered_since == 1


def test_the_page_shows_the_comment_and_claims_no_change_it_cannot_know(support):
    now = timezone.now()
    rate_limits_article(changed_at=now - timedelta(days=2))
    asked = turn(conversation(), now - timedelta(hours=2), question="What are the API rate limits?")
    searched(asked, "API rate limits", now - timedelta(hours=2), matched=True)
    feedback = rate(asked, "down", now - timedelta(hours=1))
    Feedback.objects.filter(pk=feedback.pk).update(comment="didn't tell me the <b>actual</b> limits")
    weak = turn(conversation(), now - timedelta(hours=3), question="Can I pay with bitcoin?")
    searched(weak, "API rate limits bitcoin", now - timedelta(hours=3))

    html = main_content(support.get(UNANSWERED_PAGE))
    page = visible_text(html)

    assert "What are the API rate limits?" in page
    assert "rated down: “didn't tell me the <b>actual</b> limits”" in page
    assert "<b>actual</b>" not in html  # escaped
    assert "left the list" not in page
    report = visible_text(main_content(support.get(REPORT_PAGE)))
    assert "rated down: “didn't tell me the <b>actual</b> limits”" in report


def test_the_page_says_when_an_article_changed_since_answers_a_question(support):
    now = timezone.now()
    searched(turn(conversation(), now - timedelta(days=2)), "API rate limits", now - timedelta(days=2))
    rate_limits_article(changed_at=now - timedelta(days=1))

    page = visible_text(main_content(support.get(UNANSWERED_PAGE)))

    assert "1 more was asked before an article was published or changed, and an article's words answer it now" in page

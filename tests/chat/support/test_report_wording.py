"""The support report reads as sentences (chat/support/reports.py and
templates/admin/chat/support_report.html): "median 7 s, 90th percentile
12 s (3 requests)", a comparison only when the period before had any
activity, the volume by day for the days with some (by week for a long
period); and every count shown with a noun takes its plural form, in
English and in Portuguese (the queue's "1 novas" was one)."""

import html
import re
from datetime import date, timedelta

import pytest
from django.utils import timezone

from chat.models import Handoff, Message
from chat.support import reports
from chat.support.reports import Period
from tests.chat.support.test_reports import (  # noqa: F401 (fixtures)
    REPORT_PAGE,
    at,
    conversation,
    main_content,
    site_calendar,
    staff,
    support,
    turn,
)

pytestmark = pytest.mark.django_db

DASH = "\N{EN DASH}"  # a figure without a value


def answered_request(created, seconds_to_reply: int, closed_after: int | None = None) -> Handoff:
    talk = conversation()
    request = Handoff.objects.create(conversation=talk, source="visitor", status="claimed", created_at=created)
    replied = created + timedelta(seconds=seconds_to_reply)
    Message.objects.create(conversation=talk, handoff=request, kind="agent", text="Hi", created_at=replied)
    if closed_after is not None:
        closed = created + timedelta(seconds=closed_after)
        Handoff.objects.filter(pk=request.pk).update(status="closed", closed_at=closed)
    return request


def cards(page: str) -> dict[str, str]:
    """Each headline figure's box, by its title: its text, tags and spaces collapsed."""
    found = re.findall(r"<div><dt>(.*?)</dt>(.*?)</div>", page, re.DOTALL)
    return {
        html.unescape(title): " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split()) for title, body in found
    }


def report(client, query="?days=7") -> dict[str, str]:
    response = client.get(REPORT_PAGE + query)
    assert response.status_code == 200
    return cards(main_content(response))


def test_times_read_as_median_then_90th_percentile_of_so_many_requests(support):  # noqa: F811 (fixture)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    for seconds in (5, 7, 12):
        answered_request(an_hour_ago, seconds)

    figures = report(support)

    assert figures["Time to a person's first reply"] == "7 s median 7 s, 90th percentile 12 s (3 requests)"
    assert figures["Time to close"] == DASH, "nothing closed: no times, and no sentence about them"


def test_a_count_of_one_takes_the_singular(support):  # noqa: F811 (fixture)
    answered_request(timezone.now() - timedelta(hours=1), 90, closed_after=600)

    figures = report(support)

    assert figures["Time to a person's first reply"] == "2 min median 2 min, 90th percentile 2 min (1 request)"
    assert figures["Time to close"] == "10 min median 10 min, 90th percentile 10 min (1 request)"


def test_no_comparison_when_the_period_before_had_no_activity(support):  # noqa: F811 (fixture)
    turn(conversation(), timezone.now() - timedelta(hours=2))

    page = main_content(support.get(REPORT_PAGE + "?days=7"))

    assert "before:" not in page and f"{DASH};" not in page and "median;" not in page


def test_a_comparison_when_the_period_before_had_activity_and_the_figure_a_value(support):  # noqa: F811 (fixture)
    now = timezone.now()
    turn(conversation(), now - timedelta(hours=2))
    turn(conversation(), now - timedelta(days=10))  # the 7 days before: two conversations
    turn(conversation(), now - timedelta(days=9))
    answered_request(now - timedelta(days=10), 30)
    answered_request(now - timedelta(hours=1), 60)

    figures = report(support)

    assert figures["Conversations"] == "1 before: 2 (-50%)"  # the requests' conversations have no turn
    assert figures["Time to a person's first reply"] == (
        "1 min median 1 min, 90th percentile 1 min (1 request) before: 30 s"
    )
    assert figures["Rated helpful"] == DASH, "nothing rated, then or now: no count and no comparison"
    assert "before" not in figures["Time to close"]


def test_the_volume_lists_only_the_days_with_activity():
    talk = conversation()
    turn(talk, at(2, 10))
    turn(talk, at(2, 11))
    turn(conversation(), at(5, 9))

    volume = reports.figures(Period(date(2026, 3, 1), date(2026, 3, 31)))["volume"]

    assert [(row["first"], row["last"], row["conversations"], row["turns"]) for row in volume] == [
        (date(2026, 3, 2), date(2026, 3, 2), 1, 2),
        (date(2026, 3, 5), date(2026, 3, 5), 1, 1),
    ]
    assert [row["bar"] for row in volume] == [100, 50]


def test_a_period_longer_than_a_month_is_counted_by_week_from_its_first_day():
    talk = conversation()
    turn(talk, at(2, month=1))
    turn(talk, at(7, 23, month=1))
    turn(conversation(), at(31, month=3))
    quarter = Period(date(2026, 1, 1), date(2026, 3, 31))

    figures = reports.figures(quarter)

    assert figures["volume_by_week"] is True
    assert [(row["first"], row["last"], row["conversations"], row["turns"]) for row in figures["volume"]] == [
        (date(2026, 1, 1), date(2026, 1, 7), 1, 2),
        (date(2026, 3, 26), date(2026, 3, 31), 1, 1),  # the last week, cut at the period's end
    ]
    assert reports.figures(Period(date(2026, 3, 1), date(2026, 3, 31)))["volume_by_week"] is False


def test_the_page_shows_weeks_as_their_first_and_last_days(support):  # noqa: F811 (fixture)
    turn(conversation(), timezone.now() - timedelta(hours=1))

    by_day = main_content(support.get(REPORT_PAGE + "?days=30"))
    by_week = main_content(support.get(REPORT_PAGE + "?days=90"))

    assert "Volume by day" in by_day and "Volume by week" in by_week
    assert re.search(rf"<td>\d{{4}}-\d\d-\d\d {DASH} \d{{4}}-\d\d-\d\d</td>", by_week)
    assert by_day.count('class="kk-volume__bar"') == 1


def test_a_period_with_no_activity_says_so_rather_than_listing_zeros(support):  # noqa: F811 (fixture)
    page = main_content(support.get(REPORT_PAGE + "?days=30"))

    assert "No conversations in this period." in page
    assert 'class="kk-volume__bar"' not in page


# --- plural forms ------------------------------------------------------------------------------


def unanswered_request() -> Handoff:
    talk = conversation()
    request = Handoff.objects.create(conversation=talk, source="visitor")
    Message.objects.create(conversation=talk, handoff=request, kind="visitor", text="Hello?")
    return request


def test_the_queue_counts_new_messages_in_the_plural_form_for_the_count(django_user_model):
    unanswered_request()
    english = staff(django_user_model, "Support")
    assert "1 new</span>" in english.get("/admin/chat/handoff/").content.decode()

    english.defaults["HTTP_ACCEPT_LANGUAGE"] = "pt-br"
    portuguese = english.get("/admin/chat/handoff/").content.decode()
    assert '<html lang="pt-br"' in portuguese
    assert "1 novas" not in portuguese


def test_the_report_in_portuguese_has_none_of_the_old_wording(support):  # noqa: F811 (fixture)
    answered_request(timezone.now() - timedelta(hours=1), 7)
    support.defaults["HTTP_ACCEPT_LANGUAGE"] = "pt-br"

    page = main_content(support.get(REPORT_PAGE + "?days=7"))

    assert "mediana;" not in page and f"antes: {DASH}" not in page

"""Hostile query strings: whatever a URL's parameters hold, no admin page
answers 500, and a date or a number a page parses but cannot use is a 400
(base/admin.py for the lists, billing/admin.py for the ledger's pages,
chat/support/reports.py for the pages of figures).

The walk is generic: every model in the admin's registry, every page of its
admin that takes nothing but a query string (its list or page of figures,
and pages beside it such as the ledger's summary and export), probed with
the parameters the page itself offers (`offered_lookups`) and Django's own
(search, ordering, page...). A page added later is probed too. One set of
values per parameter, not their cross product: the CI budget is tight."""

import pytest
from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.urls import URLPattern, reverse

from chat.support.admin import FiguresPage
from tests import test_admin_lookups as lookup_policy

pytestmark = pytest.mark.django_db

# The lookup policy's fixtures: DEBUG off, the security logger quiet, one of
# everything (with secrets in it), a superuser's client.
production_error_pages = lookup_policy.production_error_pages
records = lookup_policy.records
superuser_client = lookup_policy.superuser_client

DATE, NUMBER, TEXT = "date", "number", "text"
HUGE = "99999999999999999999"
NUL, SURROGATE = "%00", "%ED%A0%80"  # as sent: percent-encoded
LONG = "9" * 5000  # more digits than int() reads

# Values no parser of a date, a year, a month, a day or a count of days can
# use: each is a 400. (Each once raised, in some page: ValueError,
# OverflowError, a NUL PostgreSQL refuses.)
BAD = {
    DATE: ["abc", "0", "-1", "9999", "10000", HUGE, LONG, "9999-12-31", "0001-01-01", "2026-13-45", NUL, SURROGATE],
    NUMBER: ["abc", "", "1.5", HUGE, "-" + HUGE, LONG, "2026-13-45", NUL, SURROGATE],
    TEXT: [NUL],  # no field holds one on PostgreSQL
}
# Values a page may use or refuse, but never fail on.
ODD = ["", "1", "1,abc", "x" * 3000, SURROGATE]
# Django's own parameters, on every list (search, ordering, page, all rows,
# facets, the related field of a popup), and what they are sent.
DJANGO_PARAMETERS = ["q", "o", "p", "all", "_facets", "_to_field"]
DJANGO_VALUES = ["-1", HUGE, NUL, SURROGATE, "x" * 3000]
REFUSED = 400


def pages() -> list[tuple[type[models.Model], str]]:
    """Every page of every registered admin that takes no argument but the
    query string; not the add form (its parameters are initial values)."""
    found = []
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label):
        for pattern in model_admin.urls:
            if isinstance(pattern, URLPattern) and pattern.name and not pattern.pattern.converters:
                if not pattern.name.endswith("_add"):
                    found.append((model, pattern.name))
    return found


PAGES = pages()


def field_of(model: type[models.Model], parameter: str) -> models.Field | None:
    """The field a parameter filters on, through relations
    (`turn__status__exact`: the turn's status), if it names one."""
    field = None
    for name in parameter.split("__"):
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            break
        if field.related_model is None:
            break
        model = field.related_model
    return getattr(field, "target_field", field)


def kind_of(model_admin, parameter: str) -> str:
    """What the page parses a parameter as. A page of figures reads a
    period: a number of days, or days."""
    if isinstance(model_admin, FiguresPage):
        return DATE
    field = field_of(model_admin.model, parameter)
    if parameter.endswith("__isnull") or field is None:
        return TEXT  # a flag (any value is true or false), or a filter's own choice
    if isinstance(field, models.DateField):  # a DateTimeField too
        return DATE
    if isinstance(field, (models.IntegerField, models.FloatField, models.DecimalField)):
        return NUMBER
    return TEXT


def within_its_hierarchy(model_admin, parameter: str) -> str:
    """What a date hierarchy's month or day comes with in its links: the
    year (and month) before it; Django builds a date of them."""
    field = model_admin.date_hierarchy
    if parameter == f"{field}__month":
        return f"{field}__year=2026&"
    if parameter == f"{field}__day":
        return f"{field}__year=2026&{field}__month=1&"
    return ""


def probes(model_admin, offered: frozenset[str], parses: bool):
    """(query string, whether the page must refuse it) for every parameter
    the page reads; each probe is one request."""
    for parameter in sorted(offered):
        kind = kind_of(model_admin, parameter)
        for context in {"", within_its_hierarchy(model_admin, parameter)}:
            for value in BAD[kind]:
                yield f"{context}{parameter}={value}", parses
            for value in ODD:
                yield f"{context}{parameter}={value}", parses and value in BAD[kind]
            # Several values: every one is parsed, or only the last.
            yield f"{context}{parameter}=abc&{parameter}={HUGE}", parses and kind != TEXT
        # A list, where the page offers none: refused whatever it holds.
        listed = parameter.removesuffix("__exact") + "__in"
        if listed not in offered:
            yield f"{listed}=1,abc,{NUL},{HUGE}", parses
    for parameter in DJANGO_PARAMETERS:
        for value in DJANGO_VALUES:
            yield f"{parameter}={value}", False


def answer(client, url: str, query: str):
    response = client.get(f"{url}?{query}")
    if response.streaming:  # the export: its rows are read as they are sent
        b"".join(response.streaming_content)
    return response


@pytest.mark.parametrize(("model", "page"), PAGES, ids=[name for _, name in PAGES])
def test_no_query_string_makes_an_admin_page_fail(superuser_client, records, model, page):
    superuser_client.raise_request_exception = False  # a 500 is an answer to collect, not a crash
    model_admin = admin.site._registry[model]
    url = reverse(f"admin:{page}")
    opened = superuser_client.get(url)
    assert opened.status_code == 200, page
    offered = model_admin.offered_lookups(opened.wsgi_request)
    # A page that refuses a parameter it does not offer reads the list's
    # filters (the ledger's summary and export): it must parse them as the list does.
    parses = answer(superuser_client, url, "no__such__parameter=1").status_code == REFUSED

    wrong = {}
    for query, refused in probes(model_admin, offered, parses):
        response = answer(superuser_client, url, query)
        if response.status_code >= 500 or (refused and response.status_code != REFUSED):
            wrong[query[:120]] = (response.status_code, repr(response.exc_info and response.exc_info[1]))

    assert wrong == {}, page


def test_every_page_of_figures_and_the_ledgers_views_are_walked():
    walked = {name for _, name in PAGES}
    figures = [model for model, model_admin in admin.site._registry.items() if isinstance(model_admin, FiguresPage)]
    assert figures
    assert {f"{model._meta.app_label}_{model._meta.model_name}_changelist" for model in figures} <= walked
    assert {f"billing_ledgerentry_{view}" for view in ("monthly", "conversations", "export")} <= walked


# --- the audit's reproductions ------------------------------------------------------------------


def test_a_bad_date_on_the_embedding_entries_is_a_400(superuser_client, records):
    for value in ("abc", "2026-13-45", "9999-12-31", HUGE):
        response = superuser_client.get(f"/admin/billing/embeddingentry/?created_at__date__gte={value}")

        assert response.status_code == 400, value
        assert response.content.decode().startswith("Bad filter: created_at__date__gte: "), value
    assert superuser_client.get(f"/admin/billing/embeddingentry/?created_at__date__gte={NUL}").status_code == 400


@pytest.mark.parametrize("page", ["/admin/chat/supportreport/", "/admin/chat/unansweredquestion/"])
@pytest.mark.parametrize("query", ["to=9999-12-31", "to=0001-01-01", "from=0001-01-01&to=0001-01-02"])
def test_a_period_at_the_calendars_edge_is_a_400(superuser_client, records, page, query):
    response = superuser_client.get(f"{page}?{query}")

    assert response.status_code == 400
    assert response.content.decode().startswith("Bad period:")


@pytest.mark.parametrize("part", ["month", "day"])
@pytest.mark.parametrize("value", [HUGE, "13" * 10, "0", "-1", "32"])
def test_a_month_or_day_of_the_date_hierarchy_that_overflows_is_a_400(superuser_client, records, part, value):
    month = "&started_at__month=1" if part == "day" else ""
    url = f"/admin/chat/turn/?started_at__year=2026{month}&started_at__{part}={value}"

    assert superuser_client.get(url).status_code == 400


def test_a_day_the_month_does_not_have_is_a_400(superuser_client, records):
    ok = superuser_client.get("/admin/chat/turn/?started_at__year=2024&started_at__month=2&started_at__day=29")
    assert ok.status_code == 200
    refused = superuser_client.get("/admin/chat/turn/?started_at__year=2026&started_at__month=2&started_at__day=29")
    assert refused.status_code == 400


def test_the_first_and_last_periods_the_calendar_holds_still_open(superuser_client, records):
    for query in ("from=1900-01-01&to=1900-01-01", "from=9998-12-31&to=9998-12-31"):
        assert superuser_client.get(f"/admin/chat/supportreport/?{query}").status_code == 200, query


def test_a_day_a_list_filter_cannot_reach_is_a_400_not_the_database_error_page(superuser_client, records):
    # Django's ?e=1 redirect, and its page blaming the database, were the
    # answer to these: each is the request's fault.
    for value in ("abc", "9999-12-31 23:59:59", "0001-01-01 00:00:00", "2026-13-45"):
        response = superuser_client.get("/admin/chat/search/", {"created_at__gte": value})

        assert response.status_code == 400, value
    assert superuser_client.get("/admin/helpcenter/article/", {"source__id__exact": HUGE}).status_code == 400
    assert superuser_client.get("/admin/auth/user/", {"groups__id__exact": "abc"}).status_code == 400


def test_a_date_that_can_be_reached_still_filters(superuser_client, records):
    response = superuser_client.get("/admin/chat/search/", {"created_at__gte": "2026-01-01 00:00:00+00:00"})
    assert response.status_code == 200
    response = superuser_client.get("/admin/chat/turn/?started_at__year=9998&started_at__month=12&started_at__day=31")
    assert response.status_code == 200


def test_the_first_of_several_values_is_parsed_too(superuser_client, records):
    query = "created_at__date__gte=abc&created_at__date__gte=2026-01-01"
    assert superuser_client.get(f"/admin/billing/embeddingentry/?{query}").status_code == 400

"""The admin's lookup policy (base/admin.py): no URL parameter filters a
changelist by anything but the filters the page offers, for any role, so a
row count never answers a question about a field the role may not see (a
key, a hash, a cost, a transcript). Nor do ordering (`?o=`) and search
(`?q=`) reach such a field."""

import logging

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db import models
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from base.admin import OfferedLookupsOnly
from billing.services import bill_once
from chat.models import Conversation, Generation, ToolCall, Turn
from chat.roles import ensure_roles
from chat.support.admin import FiguresPage
from chat.visitors.identity import hash_key
from helpcenter.models import Article

pytestmark = pytest.mark.django_db

REGISTERED = sorted(admin.site._registry, key=lambda model: model._meta.label)
# Pages of figures (the support report, the unanswered questions) have no list to filter.
LISTS = [model for model in REGISTERED if not isinstance(admin.site._registry[model], FiguresPage)]
ROLES = ["Support", "Finance", "superuser"]
PROBES = ["startswith", "gte", "regex"]

# What a role must never reach through a URL, by field name (substrings of
# the lookup paths and ordering terms).
NEVER = ["visitor_hash", "client_address", "client_network", "password", "session"]
HIDDEN_FROM = {
    "Support": [*NEVER, "cost"],
    "Finance": [*NEVER, "user_text", "assistant_text", "arguments", "result"],
    "superuser": NEVER,
}


@pytest.fixture(autouse=True)
def production_error_pages(settings, caplog):
    """The plain 400 page, as in production: the debug page would echo the
    query string, and takes long to render. Nor a logged traceback for each
    of the thousand refusals below."""
    settings.DEBUG = False
    caplog.set_level(logging.CRITICAL, logger="django.security")
    caplog.set_level(logging.CRITICAL, logger="django.request")


@pytest.fixture
def records():
    """One of everything, with something secret in every private field."""
    conversation = Conversation.objects.create(visitor_hash=hash_key("a-visitor-key"))
    turn = Turn.objects.create(
        conversation=conversation,
        user_text="SECRET-VISITOR",
        assistant_text="SECRET-MODEL",
        model="gpt-4o-mini",
        status="completed",
        client_address="203.0.113.7",
        client_network="203.0.113.7/32",
    )
    now = timezone.now()
    generation = Generation.objects.create(turn=turn, round=1, started_at=now, ended_at=now)
    ToolCall.objects.create(generation=generation, name="search_help_center", arguments="{}", result="SECRET-RESULT")
    Article.objects.create(title="Refunds", slug="refunds", body="Within 14 days.")
    bill_once(turn.id, model="gpt-4o-mini", input_tokens=10, output_tokens=5, estimated=False)


def person(django_user_model, role: str):
    """A staff user in the role's group, or a superuser; no password to hash."""
    if role == "superuser":
        return django_user_model.objects.create_superuser("root", "root@example.com", None)
    ensure_roles()
    user = django_user_model.objects.create_user(username=role.lower(), is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def superuser_client(client, django_user_model) -> Client:
    client.force_login(person(django_user_model, "superuser"))
    return client


def changelist(model: type[models.Model]) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def field_paths(model: type[models.Model]) -> list[str]:
    """Every concrete field, and every concrete field one relation away,
    forward or reverse (`turns__user_text`, `ledger_entry__cost`)."""
    paths = [field.name for field in model._meta.concrete_fields]
    for relation in model._meta.get_fields():
        if relation.is_relation and relation.related_model is not None:
            paths += [f"{relation.name}__{field.name}" for field in relation.related_model._meta.concrete_fields]
    return paths


def offered(response) -> set[str]:
    """The parameters the changelist's filters and date hierarchy use (a
    page of figures, which has no list, takes none of them)."""
    cl = response.context.get("cl")
    if cl is None:
        return set()
    parameters = {parameter for spec in cl.filter_specs for parameter in spec.expected_parameters()}
    if cl.date_hierarchy:
        parameters |= {f"{cl.date_hierarchy}__{part}" for part in ("year", "month", "day")}
    return parameters


def test_every_registered_admin_follows_the_policy():
    assert REGISTERED
    assert [m._meta.label for m, a in admin.site._registry.items() if not isinstance(a, OfferedLookupsOnly)] == []


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("model", REGISTERED, ids=lambda model: model._meta.label)
def test_a_changelist_refuses_every_lookup_it_does_not_offer(client, django_user_model, records, model, role):
    client.force_login(person(django_user_model, role))
    url = changelist(model)
    page = client.get(url)
    assert page.status_code in (200, 403)
    refusal = 403 if page.status_code == 403 else 400
    allowed = set() if refusal == 403 else offered(page)

    wrong = {}
    for path in field_paths(model):
        for probe in PROBES:
            parameter = f"{path}__{probe}"
            status = client.get(url, {parameter: "x"}).status_code
            if parameter in allowed:
                if status >= 500:
                    wrong[parameter] = status
            elif status != refusal:
                wrong[parameter] = status

    assert wrong == {}, f"expected {refusal}"


@pytest.mark.parametrize("model", LISTS, ids=lambda model: model._meta.label)
def test_every_filter_a_changelist_offers_still_works(superuser_client, records, model):
    url = changelist(model)
    page = superuser_client.get(url)
    cl = page.context["cl"]
    links = [choice["query_string"] for spec in cl.filter_specs for choice in spec.choices(cl)]
    if cl.date_hierarchy:
        day = timezone.localdate()
        field = cl.date_hierarchy
        links.append(f"?{field}__year={day.year}&{field}__month={day.month}&{field}__day={day.day}")

    for link in links:
        response = superuser_client.get(url + link)
        assert response.status_code == 200, link
        assert "e" not in response.context["cl"].params, link


def test_a_filter_on_a_related_field_the_page_does_not_offer_is_refused(superuser_client, records):
    # Django's default allows any lookup through a relation named by a filter.
    assert superuser_client.get("/admin/billing/ledgerentry/?turn__status__exact=completed").status_code == 200
    assert superuser_client.get("/admin/billing/ledgerentry/?turn__user_text__startswith=S").status_code == 400
    assert superuser_client.get("/admin/billing/ledgerentry/?turn__status__startswith=c").status_code == 400


def test_the_ledger_export_and_summary_refuse_what_the_list_refuses(superuser_client, records):
    for view in ("export", "monthly"):
        url = reverse(f"admin:billing_ledgerentry_{view}")
        assert superuser_client.get(url, {"turn__user_text__startswith": "S"}).status_code == 400, view


# --- the outside check: the attack the issue describes --------------------------------------


def test_support_cannot_read_a_superusers_key_or_hash_out_of_a_count(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    root_client = Client()
    root_client.force_login(root)
    session_key = root_client.session.session_key
    visitor_hash = hash_key(session_key)
    # The superuser chatted: a conversation of theirs, with a tool call.
    turn = Turn.objects.create(
        conversation=Conversation.objects.create(visitor_hash=visitor_hash), user_text="hi", model="m"
    )
    generation = Generation.objects.create(turn=turn, round=1, started_at=turn.started_at, ended_at=turn.started_at)
    ToolCall.objects.create(generation=generation, name="search_help_center")
    client.force_login(person(django_user_model, "Support"))
    assert root_client.get("/admin/").status_code == 200  # the session is live

    probes = {
        "/admin/chat/conversation/": ["", "turns__conversation__"],
        "/admin/chat/turn/": ["conversation__", "conversation__turns__conversation__"],
        "/admin/chat/generation/": ["turn__conversation__"],
        "/admin/chat/toolcall/": ["generation__turn__conversation__"],
        "/admin/helpcenter/article/": [""],
    }
    for secret in (session_key, visitor_hash):
        other = "0" if secret[0] != "0" else "1"
        prefixes = ["", secret[:1], other, secret[:2], secret]
        for url, relations in probes.items():
            for path in relations:
                for field in ("visitor_hash", "session_key"):
                    for lookup in ("startswith", "regex"):
                        parameter = f"{path}{field}__{lookup}"
                        answers = set()
                        for prefix in prefixes:
                            response = client.get(url, {parameter: f"^{prefix}" if lookup == "regex" else prefix})
                            answers.add((response.status_code, response.content))
                        assert len(answers) == 1, parameter  # the same answer whatever the prefix
                        [(status, content)] = answers
                        assert status == 400, parameter
                        assert session_key.encode() not in content and visitor_hash.encode() not in content

    for url in [
        *probes,
        f"/admin/chat/conversation/{turn.conversation_id}/change/",
        f"/admin/chat/turn/{turn.pk}/change/",
    ]:
        page = client.get(url)
        assert page.status_code == 200, url
        assert session_key not in page.content.decode() and visitor_hash not in page.content.decode(), url


# --- ordering and search --------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_ordering_and_search_reach_no_field_the_role_may_not_see(django_user_model, records, role):
    user = person(django_user_model, role)
    hidden = HIDDEN_FROM[role]

    def request(**params):
        request = RequestFactory().get("/", params)
        request.user = user
        return request

    seen = 0
    for model, model_admin in admin.site._registry.items():
        if not model_admin.has_view_or_change_permission(request()):
            continue
        seen += 1
        searched = model_admin.get_search_fields(request())
        assert [f for f in searched if any(name in f for name in hidden)] == [], model
        columns = len(model_admin.get_list_display(request())) + 2  # and some past the end
        for column in [*range(-columns, 0), *range(1, columns)]:
            cl = model_admin.get_changelist_instance(request(o=str(column)))
            ordered = [str(term) for term in cl.queryset.query.order_by]
            assert [term for term in ordered if any(name in term for name in hidden)] == [], (model, column)
    assert seen >= 2


def test_support_cannot_sort_conversations_by_cost(client, django_user_model, records):
    client.force_login(person(django_user_model, "Support"))
    for column in range(1, 12):
        response = client.get("/admin/chat/conversation/", {"o": f"{column}.-{column}"})
        assert response.status_code == 200
        assert "cost" not in str(response.context["cl"].queryset.query)  # not even computed


DATED = [model for model in LISTS if admin.site._registry[model].date_hierarchy]


@pytest.mark.parametrize("model", DATED, ids=lambda model: model._meta.label)
@pytest.mark.parametrize(
    "dates",
    [
        "year=9999",
        "year=9999&{f}__month=12",
        "year=9999&{f}__month=12&{f}__day=31",
        "year=0",
        "year=1",
        "year=99999",
        "year=x",
    ],
)
def test_a_date_the_hierarchy_cannot_reach_is_refused_not_a_500(superuser_client, records, model, dates, settings):
    settings.TIME_ZONE = "Asia/Tokyo"  # east of UTC: year 1 began before datetime.min there
    # Django builds the period's end from it: year 9999 has no next year.
    field = admin.site._registry[model].date_hierarchy
    url = changelist(model) + f"?{field}__" + dates.format(f=field)

    response = superuser_client.get(url)

    assert response.status_code in (302, 400), (url, response.status_code)

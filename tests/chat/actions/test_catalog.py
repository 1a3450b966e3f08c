"""chat/actions/catalog.py: a document imported and synced (all or
nothing), the credentials sealed, what a turn offers, the app's own hosts,
and the calls kept."""

import logging
import textwrap
from datetime import UTC, datetime

import pytest

from base.sealed import seal
from chat.actions import catalog, openapi
from chat.actions.catalog import CallRecord, ImportRefused
from chat.models import Action, ActionCall, ActionScheme, Conversation, Turn
from chat.visitors.verified import Person

pytestmark = pytest.mark.django_db

API = "https://api.example.com/v1"
SECRET = "tok-9f8e7d6c5b4a"


@pytest.fixture(autouse=True)
def hosts(settings):
    settings.ALLOWED_HOSTS = ["help.example.org", ".kookee.example", "localhost", "127.0.0.1", "[::1]", "*"]
    settings.KOOKEE_SITE_URL = "https://chat.example.net:8443/help"


@pytest.fixture
def errors(caplog):
    """The kookee.actions log ("kookee" does not propagate)."""
    logger = logging.getLogger("kookee.actions")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="kookee.actions")
    yield caplog
    logger.removeHandler(caplog.handler)


def op(name, method="get", path=None, summary="", extra=""):
    """One path item's operation, as YAML lines under `paths:`."""
    path = path or f"/{name}"
    lines = [f"{path}:", f"  {method}:", f"    operationId: {name}"]
    if summary:
        lines.append(f"    summary: {summary}")
    lines += ["    " + line for line in textwrap.dedent(extra).strip("\n").splitlines()]
    return "\n".join(lines)


def doc(*operations, servers=API, schemes="") -> openapi.Document:
    text = "openapi: 3.1.0\ninfo: {title: Shop, version: '1'}\n"
    if servers is not None:
        text += f"servers: [{{url: '{servers}'}}]\n"
    text += "paths:\n" + textwrap.indent("\n".join(operations), "  ") + "\n"
    if schemes:
        text += "components:\n  securitySchemes:\n" + textwrap.indent(textwrap.dedent(schemes).strip("\n"), "    ")
    return openapi.parse(text)


STATUS = op("shopStatus", summary="Checking the shop's status", extra="description: Whether the shop is open.")
ORDER = op(
    "getOrder",
    path="/orders/{order_id}",
    summary="Looking up your order",
    extra="""
    description: One of the visitor's orders.
    parameters:
      - {name: order_id, in: path, required: true, schema: {type: string}}
      - {name: customer_id, in: query, required: true, x-kookee-visitor: id}
    security: [{shopKey: []}]
    """,
)
CANCEL = op(
    "cancelOrder",
    method="post",
    path="/orders/{order_id}/cancel",
    summary="Cancelling your order",
    extra="""
    parameters:
      - {name: order_id, in: path, required: true, schema: {type: string}}
    """,
)
SCHEMES = """
shopKey: {type: http, scheme: bearer}
partnerKey: {type: apiKey, in: query, name: key}
"""


def rows():
    """Everything an import may change, to compare before and after."""
    return (
        list(Action.objects.order_by("name").values()),
        list(ActionScheme.objects.order_by("name").values()),
        list(ActionCall.objects.order_by("id").values()),
    )


def action(name) -> Action:
    return Action.objects.get(name=name)


def a_turn() -> Turn:
    return Turn.objects.create(conversation=Conversation.objects.create(visitor_hash="v"), user_text="?", model="m")


# --- import ----------------------------------------------------------------------------------


def test_an_import_creates_enabled_actions():
    report = catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    assert (report.added, report.updated, report.unchanged, report.disabled) == (
        ["shopStatus", "getOrder"],
        [],
        [],
        [],
    )
    assert report.schemes == ["shopKey", "partnerKey"]
    assert report.summary() == "2 added, 0 updated, 0 unchanged, 0 disabled (no longer in the document)"
    order = action("getOrder")
    assert (order.enabled, order.in_document, order.texts_edited) == (True, True, False)
    assert (order.method, order.path, order.base_url) == ("GET", "/orders/{order_id}", API)
    assert (order.title, order.description) == ("Looking up your order", "One of the visitor's orders.")
    assert order.spec["name"] == "getOrder" and order.spec["base_url"] == API
    assert catalog.operation_of(order.spec) == doc(STATUS, ORDER, schemes=SCHEMES).operations[1]
    assert order.fingerprint == catalog.operation_of(order.spec).fingerprint()
    assert action("shopStatus").title == "Checking the shop's status"


def test_the_title_is_the_name_without_a_summary():
    catalog.import_document(doc(op("ping")))
    assert (action("ping").title, action("ping").description) == ("ping", "")


def test_an_import_disabled():
    report = catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES), enabled=False)
    assert report.added == ["shopStatus", "getOrder"]
    assert list(Action.objects.values_list("name", "enabled", "in_document")) == [
        ("getOrder", False, True),
        ("shopStatus", False, True),
    ]


def test_the_skipped_operations_are_reported():
    report = catalog.import_document(doc(STATUS, "/health:\n  get:\n    summary: no operationId"))
    assert report.skipped == ("GET /health",)
    assert list(Action.objects.values_list("name", flat=True)) == ["shopStatus"]


def test_a_reimport_unchanged_changes_nothing():
    document = doc(STATUS, ORDER, schemes=SCHEMES)
    catalog.import_document(document)
    before = rows()
    report = catalog.import_document(document)
    assert (report.added, report.updated, report.unchanged, report.disabled) == (
        [],
        [],
        ["shopStatus", "getOrder"],
        [],
    )
    assert rows() == before


def test_a_changed_operation_is_updated():
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    first = action("getOrder")
    changed = ORDER.replace("Looking up your order", "Finding your order").replace("/orders/", "/v2/orders/")
    report = catalog.import_document(doc(STATUS, changed, schemes=SCHEMES))
    assert (report.added, report.updated, report.unchanged) == ([], ["getOrder"], ["shopStatus"])
    order = action("getOrder")
    assert order.pk == first.pk
    assert (order.title, order.path, order.spec["path"]) == (
        "Finding your order",
        "/v2/orders/{order_id}",
        "/v2/orders/{order_id}",
    )
    assert order.fingerprint != first.fingerprint and order.updated_at > first.updated_at
    assert order.imported_at == first.imported_at


def test_a_new_base_url_updates_every_operation():
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    report = catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES, servers="https://api2.example.com"))
    assert sorted(report.updated) == ["getOrder", "shopStatus"]
    assert set(Action.objects.values_list("base_url", flat=True)) == {"https://api2.example.com"}
    assert action("getOrder").spec["base_url"] == "https://api2.example.com"


def test_staff_texts_survive_a_reimport_and_the_spec_updates():
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    Action.objects.filter(name="getOrder").update(title="Your order", description="Staff's words.", texts_edited=True)
    changed = ORDER.replace("Looking up your order", "Finding your order").replace("in: query", "in: header")
    catalog.import_document(doc(STATUS, changed, schemes=SCHEMES))
    order = action("getOrder")
    assert (order.title, order.description, order.texts_edited) == ("Your order", "Staff's words.", True)
    assert order.spec["summary"] == "Finding your order"
    assert [param["location"] for param in order.spec["params"]] == ["path", "header"]


def test_staff_switching_an_action_off_survives_a_reimport():
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    Action.objects.filter(name="getOrder").update(enabled=False)
    catalog.import_document(doc(STATUS, ORDER.replace("Looking up", "Finding"), schemes=SCHEMES))
    assert action("getOrder").enabled is False


def test_an_operation_removed_is_disabled_never_deleted_and_its_calls_remain():
    catalog.import_document(doc(STATUS, ORDER, CANCEL, schemes=SCHEMES))
    turn = a_turn()
    order = action("getOrder")
    ActionCall.objects.create(turn=turn, action=order, call_id="c1", outcome="ok", started_at=datetime.now(UTC))

    report = catalog.import_document(doc(STATUS, schemes=SCHEMES))
    assert report.disabled == ["cancelOrder", "getOrder"]
    assert report.unchanged == ["shopStatus"]
    assert list(Action.objects.values_list("name", "enabled", "in_document")) == [
        ("cancelOrder", False, False),
        ("getOrder", False, False),
        ("shopStatus", True, True),
    ]
    (call,) = ActionCall.objects.all()
    assert (call.action_id, call.call_id, call.turn_id) == (order.pk, "c1", turn.pk)
    assert action("getOrder").spec == order.spec  # kept as it was

    # Still missing: not disabled again.
    again = catalog.import_document(doc(STATUS, schemes=SCHEMES))
    assert again.disabled == [] and again.unchanged == ["shopStatus"]


@pytest.mark.parametrize("enabled", [True, False])
def test_an_operation_back_in_the_document_is_enabled_as_a_new_one_would_be(enabled):
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    assert action("getOrder").in_document is False

    report = catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES), enabled=enabled)
    assert report.updated == ["getOrder"] and report.added == [] and report.unchanged == ["shopStatus"]
    order = action("getOrder")
    assert (order.in_document, order.enabled) == (True, enabled)
    assert action("shopStatus").enabled is True  # unchanged ones keep theirs whatever `enabled` says


# --- refused: nothing changes ----------------------------------------------------------------


@pytest.fixture
def imported():
    """A catalog as a first import left it, with a credential and a call."""
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    catalog.set_secret("shopKey", SECRET)
    ActionCall.objects.create(
        turn=a_turn(), action=action("getOrder"), call_id="c1", outcome="ok", started_at=datetime.now(UTC)
    )
    return rows()


def refused(document, imported, match, **kwargs):
    with pytest.raises(ImportRefused, match=match):
        catalog.import_document(document, **kwargs)
    assert rows() == imported


@pytest.mark.parametrize(
    "servers, match",
    [
        (None, r"shopStatus: no absolute http\(s\) API address \(no servers\): give one with --base-url"),
        ("/api", r"no absolute http\(s\) API address \(/api\)"),
        ("ftp://files.example.com", r"no absolute http\(s\) API address \(ftp://files.example.com\)"),
        ("api.example.com", "no absolute http"),
        ("https://", "no absolute http"),
        ("https://user:pass@api.example.com", "may not carry credentials"),
    ],
)
def test_a_bad_api_address_is_refused(imported, servers, match):
    schemes = SCHEMES + "other: {type: http, scheme: basic}"  # not created either
    refused(doc(STATUS, ORDER, CANCEL, servers=servers, schemes=schemes), imported, match)


@pytest.mark.parametrize(
    "servers",
    [
        "https://help.example.org",
        "http://HELP.example.org:8000/api",
        "https://kookee.example",  # from ".kookee.example"
        "https://chat.example.net",  # KOOKEE_SITE_URL's host, any port
        "http://chat.example.net:9000",
    ],
)
def test_the_apps_own_host_is_refused(imported, servers):
    refused(doc(STATUS, ORDER, schemes=SCHEMES, servers=servers), imported, "is this app's own host")


def test_all_or_nothing_when_only_the_last_operation_fails(imported):
    changed = ORDER.replace("Looking up your order", "Finding your order")
    own = op("report", extra="servers: [{url: 'https://help.example.org/reports'}]")
    document = doc(STATUS, changed, CANCEL, own, schemes=SCHEMES + "newKey: {type: http, scheme: basic}")
    assert [operation.name for operation in document.operations][-1] == "report"
    refused(document, imported, "report: help.example.org is this app's own host")
    assert not Action.objects.filter(name__in=["cancelOrder", "report"]).exists()
    assert not ActionScheme.objects.filter(name="newKey").exists()


def test_all_or_nothing_when_a_removal_would_have_disabled(imported):
    own = op("report", extra="servers: [{url: 'https://help.example.org'}]")
    refused(doc(STATUS, own, schemes=SCHEMES), imported, "own host")  # getOrder is not disabled
    assert action("getOrder").enabled is True


def test_a_refused_base_url_changes_nothing(imported):
    refused(doc(STATUS, ORDER, schemes=SCHEMES), imported, "own host", base_url="https://help.example.org")
    refused(doc(STATUS, ORDER, schemes=SCHEMES), imported, "no absolute", base_url="not a url")


@pytest.mark.parametrize("base_url", ["https://api.example.com:notaport", "https://api.example.com:99999"])
def test_a_base_url_with_a_bad_port_is_refused(imported, base_url):
    refused(doc(STATUS, ORDER, schemes=SCHEMES), imported, r"(?i)shopStatus: .*port", base_url=base_url)


def test_loopback_is_not_the_own_host_rule():
    # localhost and 127.0.0.1 are left to the address rule at call time (KOOKEE_ACTIONS_ALLOW_PRIVATE).
    catalog.import_document(doc(STATUS, servers="http://127.0.0.1:8000"))
    assert action("shopStatus").base_url == "http://127.0.0.1:8000"
    catalog.import_document(doc(STATUS, servers="http://localhost:8000"))
    assert action("shopStatus").base_url == "http://localhost:8000"


# --- base URL --------------------------------------------------------------------------------


def test_a_base_url_replaces_absolute_servers():
    own_server = op("other", extra="servers: [{url: 'https://elsewhere.example.com/x'}]")
    catalog.import_document(doc(STATUS, own_server), base_url="https://staging.example.com/api/")
    assert set(Action.objects.values_list("base_url", flat=True)) == {"https://staging.example.com/api"}


@pytest.mark.parametrize(
    "base_url, server, expected",
    [
        ("https://api.example.com", "/v2", "https://api.example.com/v2"),
        ("https://api.example.com/root", "/v2/", "https://api.example.com/root/v2"),
        ("https://api.example.com/root/", "/v2", "https://api.example.com/root/v2"),
        ("https://api.example.com/root", "", "https://api.example.com/root"),
    ],
)
def test_a_base_url_resolves_relative_servers(base_url, server, expected):
    catalog.import_document(doc(STATUS, servers=server or None), base_url=base_url)
    assert action("shopStatus").base_url == expected
    assert action("shopStatus").spec["base_url"] == expected


def test_an_operations_own_relative_server_is_read_against_the_base_url():
    mixed = op("other", extra="servers: [{url: '/reports'}]")
    catalog.import_document(doc(STATUS, mixed, servers="/api"), base_url="https://api.example.com")
    assert dict(Action.objects.values_list("name", "base_url")) == {
        "shopStatus": "https://api.example.com/api",
        "other": "https://api.example.com/reports",
    }


# --- schemes and credentials -----------------------------------------------------------------


def test_schemes_are_upserted_and_a_secret_survives_a_reimport():
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    assert list(ActionScheme.objects.values_list("name", "kind", "param")) == [
        ("partnerKey", "query", "key"),
        ("shopKey", "bearer", ""),
    ]
    catalog.set_secret("shopKey", SECRET)
    sealed = ActionScheme.objects.get(name="shopKey").secret_sealed
    changed = "shopKey: {type: apiKey, in: header, name: X-Key}\nextra: {type: http, scheme: basic}"
    assert catalog.import_document(doc(STATUS, schemes=changed)).schemes == ["shopKey", "extra"]
    assert list(ActionScheme.objects.values_list("name", "kind", "param")) == [
        ("extra", "basic", ""),
        ("partnerKey", "query", "key"),  # no longer in the document: kept
        ("shopKey", "header", "X-Key"),
    ]
    assert ActionScheme.objects.get(name="shopKey").secret_sealed == sealed


def test_set_secret_seals_it():
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    catalog.set_secret("shopKey", SECRET)
    scheme = ActionScheme.objects.get(name="shopKey")
    assert scheme.secret_sealed and SECRET not in scheme.secret_sealed
    assert SECRET not in str(list(ActionScheme.objects.values()))
    assert scheme.secret_set_at is not None
    assert catalog.credentials({"shopKey", "partnerKey"}) == {
        "shopKey": (openapi.Scheme("shopKey", "bearer", ""), SECRET)
    }
    assert catalog.schemes_without_secret(["shopKey", "partnerKey"]) == ["partnerKey"]


def test_set_secret_again_and_cleared():
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    catalog.set_secret("partnerKey", "first")
    catalog.set_secret("partnerKey", "second")
    assert catalog.credentials({"partnerKey"}) == {
        "partnerKey": (openapi.Scheme("partnerKey", "query", "key"), "second")
    }
    catalog.set_secret("partnerKey", "")
    scheme = ActionScheme.objects.get(name="partnerKey")
    assert (scheme.secret_sealed, scheme.secret_set_at) == ("", None)
    assert catalog.credentials({"partnerKey"}) == {}


def test_set_secret_of_an_unknown_scheme():
    with pytest.raises(ActionScheme.DoesNotExist):
        catalog.set_secret("nope", SECRET)


def test_credentials_only_of_the_names_asked():
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    catalog.set_secret("shopKey", SECRET)
    catalog.set_secret("partnerKey", "p")
    assert set(catalog.credentials({"partnerKey"})) == {"partnerKey"}
    assert catalog.credentials(set()) == {}


def test_a_secret_sealed_under_another_key_is_skipped_and_logged(settings, errors):
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    catalog.set_secret("shopKey", SECRET)
    catalog.set_secret("partnerKey", "p")
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "another-secret-key-" + "x" * 40
    settings.SECRET_KEY_FALLBACKS = []
    assert catalog.credentials({"shopKey", "partnerKey"}) == {}
    messages = {record.getMessage() for record in errors.records if record.levelno == logging.ERROR}
    assert sorted(messages) == [
        "action credential partnerKey cannot be read (SECRET_KEY changed?): set it again",
        "action credential shopKey cannot be read (SECRET_KEY changed?): set it again",
    ]
    assert SECRET not in errors.text

    # The old key kept as a fallback still opens it.
    settings.SECRET_KEY_FALLBACKS = [old]
    assert catalog.credentials({"shopKey"})["shopKey"][1] == SECRET


def test_a_value_sealed_for_another_purpose_is_not_a_credential(errors):
    catalog.import_document(doc(STATUS, schemes=SCHEMES))
    ActionScheme.objects.filter(name="shopKey").update(secret_sealed=seal("kookee.source-token", SECRET))
    assert catalog.credentials({"shopKey"}) == {}
    assert "shopKey cannot be read" in errors.text


# --- offered ---------------------------------------------------------------------------------

PERSON = Person("user-42", name="Ana", email="ana@example.com")


def test_an_anonymous_visitor_is_offered_neither_identity_nor_disabled_actions():
    catalog.import_document(doc(STATUS, ORDER, CANCEL, schemes=SCHEMES))
    Action.objects.filter(name="cancelOrder").update(enabled=False)
    assert [offer.name for offer in catalog.offered(None)] == ["shopStatus"]


def test_a_verified_visitor_is_offered_identity_actions():
    catalog.import_document(doc(STATUS, ORDER, CANCEL, schemes=SCHEMES))
    Action.objects.filter(name="cancelOrder").update(enabled=False)
    offers = catalog.offered(PERSON)
    assert [offer.name for offer in offers] == ["getOrder", "shopStatus"]
    order = offers[0]
    assert (order.id, order.title, order.description) == (
        action("getOrder").pk,
        "Looking up your order",
        "One of the visitor's orders.",
    )
    assert order.operation == doc(ORDER, schemes=SCHEMES).operations[0] and order.operation.needs_identity


def test_an_offer_carries_staff_texts():
    catalog.import_document(doc(STATUS))
    Action.objects.filter(name="shopStatus").update(title="Open?", description="Mine.", texts_edited=True)
    (offer,) = catalog.offered(None)
    assert (offer.title, offer.description) == ("Open?", "Mine.")


def test_nothing_imported_nothing_offered():
    assert catalog.offered(None) == [] and catalog.offered(PERSON) == []


def test_an_unreadable_spec_is_skipped_and_logged(errors):
    catalog.import_document(doc(STATUS, CANCEL))
    Action.objects.filter(name="cancelOrder").update(spec={"name": "cancelOrder", "surprise": 1})
    assert [offer.name for offer in catalog.offered(PERSON)] == ["shopStatus"]
    assert "action cancelOrder has an unreadable spec" in errors.text


# --- own hosts -------------------------------------------------------------------------------


def test_own_hosts(settings):
    assert catalog.own_hosts() == {
        ("help.example.org", None),
        ("kookee.example", None),
        ("chat.example.net", None),
    }
    assert catalog.own_hosts("Help.Example.org:8000") >= {("help.example.org", 8000)}
    # No port in the Host header: the scheme's default, which it cannot tell, so both.
    assert {("chat.example.net", 80), ("chat.example.net", 443)} <= catalog.own_hosts("chat.example.net")
    # A loopback name only at the very port the visitor used.
    assert catalog.own_hosts("localhost:8000") - catalog.own_hosts() == {("localhost", 8000)}
    assert ("::1", 8000) in catalog.own_hosts("[::1]:8000")
    assert catalog.own_hosts("localhost:bad") - catalog.own_hosts() == {("localhost", 80), ("localhost", 443)}


def test_own_hosts_leave_out_loopback_names_and_star(settings):
    settings.ALLOWED_HOSTS = ["*", "localhost", "127.0.0.1", "::1", "[::1]", ".", ""]
    settings.KOOKEE_SITE_URL = "http://localhost:8000"
    assert catalog.own_hosts() == frozenset()
    settings.KOOKEE_SITE_URL = ""
    assert catalog.own_hosts() == frozenset()


@pytest.mark.parametrize(
    "url, own",
    [
        ("https://help.example.org/x", True),
        ("http://HELP.EXAMPLE.ORG:1234", True),
        ("https://chat.example.net:8443", True),
        ("https://kookee.example", True),
        ("https://api.example.com", False),
        ("https://help.example.org.evil.example", False),
        ("http://localhost:8000", False),
    ],
)
def test_is_own_host(url, own):
    assert catalog.is_own_host(url, catalog.own_hosts()) is own


def test_is_own_host_at_the_visitors_port():
    hosts = catalog.own_hosts("localhost:8000")
    assert catalog.is_own_host("http://localhost:8000/api", hosts)
    assert not catalog.is_own_host("http://localhost:8001/api", hosts)
    assert catalog.is_own_host("http://localhost/api", catalog.own_hosts("localhost"))  # port 80 both ways
    assert not catalog.is_own_host("https://localhost/api", catalog.own_hosts("localhost:80"))


# --- calls -----------------------------------------------------------------------------------


def test_save_calls_writes_rows():
    catalog.import_document(doc(STATUS, ORDER, schemes=SCHEMES))
    turn = a_turn()
    at = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    status, order = action("shopStatus"), action("getOrder")
    catalog.save_calls(
        turn.pk,
        [
            CallRecord(status.pk, "c1", {}, at, "ok", 200, "", 12, 34),
            CallRecord(order.pk, "c2", {"order_id": "A", "customer_id": "(verified id)"}, at, detail="x" * 400),
        ],
    )
    assert list(
        ActionCall.objects.order_by("call_id").values_list(
            "turn_id", "action_id", "call_id", "arguments", "outcome", "http_status", "duration_ms", "response_bytes"
        )
    ) == [
        (turn.pk, status.pk, "c1", {}, "ok", 200, 12, 34),
        (turn.pk, order.pk, "c2", {"order_id": "A", "customer_id": "(verified id)"}, "cancelled", None, None, None),
    ]
    second = ActionCall.objects.get(call_id="c2")
    assert second.detail == "x" * 300 and second.started_at == at


def test_save_no_calls():
    catalog.save_calls(a_turn().pk, [])
    assert not ActionCall.objects.exists()

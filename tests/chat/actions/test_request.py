"""chat/actions/request.py: an action's request as built from the model's
arguments, the verified identity and the API's credentials, and the API's
answer as the model reads it. No database: Operations come from small
documents parsed by chat/actions/openapi.py."""

import base64
import json
import textwrap
from urllib.parse import parse_qsl, urlsplit

import pytest

from chat.actions import openapi, request
from chat.actions.request import BadArguments, MissingCredentials, NeedsIdentity
from chat.visitors.verified import Person

SECRET = "s3cr3t/tok+en=="  # "/", "+" and "=" are percent-encoded in a query


def document(paths: str, components: str = "", servers: str = "https://api.example.com/v1") -> openapi.Document:
    text = (
        "openapi: 3.1.0\n"
        "info: {title: T, version: '1'}\n"
        f"servers: [{{url: '{servers}'}}]\n"
        "paths:\n" + textwrap.indent(textwrap.dedent(paths).strip("\n"), "  ") + "\n"
    )
    if components:
        text += "components:\n" + textwrap.indent(textwrap.dedent(components).strip("\n"), "  ") + "\n"
    return openapi.parse(text)


def operation(paths: str, components: str = "") -> openapi.Operation:
    (only,) = document(paths, components).operations
    return only


ORDER = """
/orders/{order_id}:
  get:
    operationId: getOrder
    parameters:
      - {name: order_id, in: path, required: true, schema: {type: string}}
      - {name: customer_id, in: query, required: true, x-kookee-visitor: id, schema: {type: string}}
      - {name: expand, in: query, schema: {type: boolean}}
      - {name: tags, in: query, schema: {type: array, items: {type: string}}}
      - {name: X-Trace, in: header, schema: {type: string}}
"""

SEARCH = """
/search:
  get:
    operationId: search
    parameters:
      - {name: q, in: query, required: true, schema: {type: string, minLength: 2}}
      - {name: limit, in: query, schema: {type: integer, maximum: 50}}
      - {name: exact, in: query, schema: {type: boolean}}
      - {name: page, in: query, schema: {type: integer}}
      - {name: sort, in: query, schema: {type: string, enum: [asc, desc]}}
"""

CANCEL = """
/orders/{order_id}/cancel:
  post:
    operationId: cancelOrder
    parameters:
      - {name: order_id, in: path, required: true, schema: {type: string}}
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [reason]
            properties:
              reason: {type: string}
              notify: {type: boolean}
              customer_email: {type: string, x-kookee-visitor: email}
"""

NOTE = """
/notes:
  post:
    operationId: addNote
    requestBody:
      content:
        application/json:
          schema:
            type: object
            properties:
              text: {type: string}
              pinned: {type: boolean}
"""

WHOLE = """
/items:
  put:
    operationId: putItems
    requestBody:
      required: true
      content:
        application/json:
          schema: {type: array, items: {type: string}}
"""

WHOLE_OPTIONAL = """
/items:
  put:
    operationId: putItems
    requestBody:
      content:
        application/json:
          schema: {type: array, items: {type: string}}
"""

ANA = Person("user-42", name="Ana Lima", email="ana@example.com", attributes=(("plan", "pro"), ("seats", 0)))


def build(op, arguments=None, filled=None, credentials=None):
    return request.build(op, arguments or {}, filled or {}, credentials or {})


def query_of(url: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(url).query, keep_blank_values=True)


# --- split and recorded ----------------------------------------------------------------------


def test_split_drops_the_identity_filled_names_and_names_them():
    op = operation(ORDER)
    kept, dropped = request.split(op, {"order_id": "A-1", "customer_id": "user-7", "expand": True})
    assert kept == {"order_id": "A-1", "expand": True}
    assert dropped == ["customer_id"]


def test_split_keeps_everything_when_nothing_is_identity_filled():
    op = operation(SEARCH)
    assert request.split(op, {"q": "shoes", "limit": 3}) == ({"q": "shoes", "limit": 3}, [])


def test_split_drops_an_identity_filled_body_field():
    op = operation(CANCEL)
    kept, dropped = request.split(op, {"order_id": "A-1", "reason": "late", "customer_email": "eve@example.com"})
    assert kept == {"order_id": "A-1", "reason": "late"} and dropped == ["customer_email"]


def test_recorded_shows_the_verified_values_by_what_they_are_never_by_value():
    op = operation(
        """
        /me:
          get:
            operationId: me
            parameters:
              - {name: uid, in: query, x-kookee-visitor: id}
              - {name: mail, in: query, x-kookee-visitor: email}
              - {name: who, in: query, x-kookee-visitor: name}
              - {name: plan, in: query, x-kookee-visitor: attributes.plan}
              - {name: q, in: query}
        """
    )
    assert request.recorded(op, {"q": "x"}) == {
        "q": "x",
        "uid": "(verified id)",
        "mail": "(verified email)",
        "who": "(verified name)",
        "plan": "(verified plan)",
    }


def test_recorded_overwrites_a_value_the_model_sent_for_an_identity_name():
    op = operation(ORDER)
    assert request.recorded(op, {"order_id": "A-1", "customer_id": "user-7"}) == {
        "order_id": "A-1",
        "customer_id": "(verified id)",
    }


# --- check -----------------------------------------------------------------------------------


def test_check_accepts_arguments_that_fit():
    request.check(operation(SEARCH), {"q": "shoes", "limit": 10, "exact": False, "sort": "asc"})


def test_check_names_the_argument_that_breaks_the_schema():
    with pytest.raises(BadArguments) as caught:
        request.check(operation(SEARCH), {"q": "shoes", "limit": 51})
    message = str(caught.value)
    assert message.startswith("the arguments do not fit search: ")
    assert "limit: 51 is greater than the maximum of 50" in message


def test_check_names_a_missing_required_argument():
    with pytest.raises(BadArguments, match="'q' is a required property"):
        request.check(operation(SEARCH), {"limit": 3})


def test_check_refuses_an_argument_the_operation_does_not_have():
    with pytest.raises(BadArguments, match=r"Additional properties are not allowed \('admin' was unexpected\)"):
        request.check(operation(SEARCH), {"q": "shoes", "admin": True})


def test_check_refuses_an_identity_name_as_an_extra_argument():
    # The tool's schema has no customer_id: a caller that did not split first is refused, not obeyed.
    with pytest.raises(BadArguments, match="'customer_id' was unexpected"):
        request.check(operation(ORDER), {"order_id": "A-1", "customer_id": "user-7"})


@pytest.mark.parametrize(
    "arguments, told",
    [
        ({"q": 12}, "q: 12 is not of type 'string'"),
        ({"q": "ab", "limit": "5"}, "limit: '5' is not of type 'integer'"),
        ({"q": "ab", "exact": "yes"}, "exact: 'yes' is not of type 'boolean'"),
        ({"q": "ab", "limit": 2.5}, "limit: 2.5 is not of type 'integer'"),
        ({"q": "ab", "sort": "up"}, "sort: 'up' is not one of ['asc', 'desc']"),
    ],
)
def test_check_refuses_wrong_types(arguments, told):
    with pytest.raises(BadArguments) as caught:
        request.check(operation(SEARCH), arguments)
    assert told in str(caught.value)


def test_check_lists_at_most_three_errors():
    arguments = {"q": 1, "limit": "x", "exact": "x", "page": "x", "sort": 5}
    with pytest.raises(BadArguments) as caught:
        request.check(operation(SEARCH), arguments)
    told = str(caught.value).removeprefix("the arguments do not fit search: ").split("; ")
    assert len(told) == request.MAX_ERRORS == 3
    # In the order of the arguments' names: the first three of five.
    assert [item.split(":")[0] for item in told] == ["exact", "limit", "page"]


def test_check_names_a_nested_place():
    op = operation(
        """
        /bulk:
          post:
            operationId: bulk
            requestBody:
              content:
                application/json:
                  schema:
                    type: object
                    properties:
                      lines: {type: array, items: {type: object, properties: {qty: {type: integer}}}}
        """
    )
    with pytest.raises(BadArguments, match="lines/1/qty: 'two' is not of type 'integer'"):
        request.check(op, {"lines": [{"qty": 1}, {"qty": "two"}]})


# --- identity --------------------------------------------------------------------------------

IDENTITY = """
/me:
  get:
    operationId: me
    parameters:
      - {name: uid, in: query, x-kookee-visitor: id}
      - {name: mail, in: query, x-kookee-visitor: email}
      - {name: who, in: query, x-kookee-visitor: name}
      - {name: plan, in: query, x-kookee-visitor: attributes.plan}
"""


def test_identity_fills_id_email_name_and_attributes():
    assert request.identity(operation(IDENTITY), ANA) == {
        "uid": "user-42",
        "mail": "ana@example.com",
        "who": "Ana Lima",
        "plan": "pro",
    }


def test_identity_of_an_operation_that_needs_none_is_empty_even_anonymously():
    assert request.identity(operation(SEARCH), None) == {}


def test_identity_needs_a_verified_visitor():
    with pytest.raises(NeedsIdentity, match="sign in"):
        request.identity(operation(IDENTITY), None)


@pytest.mark.parametrize(
    "person, missing",
    [
        (Person("user-42", name="Ana", attributes=(("plan", "pro"),)), "email"),
        (Person("user-42", email="ana@example.com", attributes=(("plan", "pro"),)), "name"),
        (Person("user-42", name="Ana", email="ana@example.com"), "attributes.plan"),
        (Person("user-42", name="Ana", email="ana@example.com", attributes=(("plan", ""),)), "attributes.plan"),
        (Person("user-42", name="Ana", email="ana@example.com", attributes=(("plan", None),)), "attributes.plan"),
    ],
    ids=["no-email", "no-name", "no-attribute", "empty-attribute", "null-attribute"],
)
def test_identity_without_the_value_needed(person, missing):
    with pytest.raises(NeedsIdentity) as caught:
        request.identity(operation(IDENTITY), person)
    assert str(caught.value) == f"the visitor's verified identity has no {missing}"


def test_identity_keeps_a_falsy_attribute_that_is_a_value():
    op = operation(
        """
        /seats:
          get:
            operationId: seats
            parameters:
              - {name: seats, in: query, x-kookee-visitor: attributes.seats}
        """
    )
    assert request.identity(op, ANA) == {"seats": 0}


# --- build: where values go ------------------------------------------------------------------


def test_build_a_get():
    prepared = build(
        operation(ORDER),
        {"order_id": "A-1001", "expand": True, "X-Trace": "t-1"},
        {"customer_id": "user-42"},
    )
    assert prepared.method == "GET"
    assert prepared.url == "https://api.example.com/v1/orders/A-1001?customer_id=user-42&expand=true"
    assert prepared.headers == {"Accept": "application/json", "X-Trace": "t-1"}
    assert prepared.body is None
    assert prepared.secret_values == ()


@pytest.mark.parametrize(
    "value, segment",
    [
        ("a/b", "a%2Fb"),
        ("../x", "..%2Fx"),
        ("../../admin", "..%2F..%2Fadmin"),
        ("a?b=c#d", "a%3Fb%3Dc%23d"),
        ("a b%2F", "a%20b%252F"),
        ("ação", "a%C3%A7%C3%A3o"),
        ("...", "..."),
        (".x", ".x"),
    ],
)
def test_a_path_value_is_percent_encoded_whole(value, segment):
    prepared = build(operation(ORDER), {"order_id": value}, {"customer_id": "u"})
    url = urlsplit(prepared.url)
    assert url.path == f"/v1/orders/{segment}"
    assert url.netloc == "api.example.com" and query_of(prepared.url) == [("customer_id", "u")]


@pytest.mark.parametrize("value", [".", ".."])
def test_a_path_value_of_dot_or_dot_dot_is_refused(value):
    with pytest.raises(BadArguments, match="order_id may not be"):
        build(operation(ORDER), {"order_id": value}, {"customer_id": "u"})


def test_a_path_value_that_is_a_number_or_boolean():
    op = operation(
        """
        /pages/{n}/{flag}:
          get:
            operationId: page
            parameters:
              - {name: n, in: path, required: true, schema: {type: integer}}
              - {name: flag, in: path, required: true, schema: {type: boolean}}
        """
    )
    assert build(op, {"n": 7, "flag": False}).url == "https://api.example.com/v1/pages/7/false"


def test_query_arrays_are_repeated_and_values_encoded():
    prepared = build(operation(ORDER), {"order_id": "A", "tags": ["red", "a&b=c", "x y"]}, {"customer_id": "u"})
    assert query_of(prepared.url) == [("customer_id", "u"), ("tags", "red"), ("tags", "a&b=c"), ("tags", "x y")]
    assert "a%26b%3Dc" in prepared.url


@pytest.mark.parametrize("value, text", [(True, "true"), (False, "false")])
def test_query_booleans(value, text):
    prepared = build(operation(SEARCH), {"q": "ab", "exact": value})
    assert query_of(prepared.url) == [("q", "ab"), ("exact", text)]


def test_query_numbers_and_none():
    prepared = build(operation(SEARCH), {"q": "ab", "limit": 5, "page": None})
    assert query_of(prepared.url) == [("q", "ab"), ("limit", "5")]


@pytest.mark.parametrize("bad", ["a\r\nX-Admin: 1", "a\nb", "a\rb", "a\0b"])
def test_a_header_value_with_a_line_break_or_nul_is_refused(bad):
    with pytest.raises(BadArguments, match="the header X-Trace may not hold a line break"):
        build(operation(ORDER), {"order_id": "A", "X-Trace": bad}, {"customer_id": "u"})


def test_identity_filled_values_win_over_the_models():
    prepared = build(operation(ORDER), {"order_id": "A", "customer_id": "user-7"}, {"customer_id": "user-42"})
    assert query_of(prepared.url) == [("customer_id", "user-42")]
    assert "user-7" not in prepared.url


def test_a_json_body_of_fields():
    prepared = build(
        operation(CANCEL),
        {"order_id": "A-1", "reason": "arrived late — ação", "notify": False, "customer_email": "eve@example.com"},
        {"customer_email": "ana@example.com"},
    )
    assert (prepared.method, prepared.url) == ("POST", "https://api.example.com/v1/orders/A-1/cancel")
    assert prepared.headers["Content-Type"] == "application/json"
    assert json.loads(prepared.body) == {
        "reason": "arrived late — ação",
        "notify": False,
        "customer_email": "ana@example.com",
    }
    assert "ação".encode() in prepared.body  # UTF-8, not \\u escapes


def test_an_optional_body_is_omitted_when_empty():
    prepared = build(operation(NOTE), {})
    assert prepared.body is None and "Content-Type" not in prepared.headers
    assert json.loads(build(operation(NOTE), {"pinned": False}).body) == {"pinned": False}


def test_a_required_body_is_sent_even_when_empty():
    op = operation(
        """
        /ping:
          post:
            operationId: ping
            requestBody:
              required: true
              content:
                application/json:
                  schema: {type: object, properties: {note: {type: string}}}
        """
    )
    prepared = build(op, {})
    assert prepared.body == b"{}" and prepared.headers["Content-Type"] == "application/json"


def test_a_whole_body():
    op = operation(WHOLE)
    assert op.body == "whole"
    prepared = build(op, {"body": ["a", "b"]})
    assert json.loads(prepared.body) == ["a", "b"]
    assert prepared.headers["Content-Type"] == "application/json"
    assert build(op, {"body": []}).body == b"[]"  # an empty value the model chose is still sent


def test_an_optional_whole_body_is_omitted_when_not_given():
    prepared = build(operation(WHOLE_OPTIONAL), {})
    assert prepared.body is None and "Content-Type" not in prepared.headers


# --- build: credentials ----------------------------------------------------------------------

SCHEMES = """
securitySchemes:
  token: {type: http, scheme: bearer}
  login: {type: http, scheme: basic}
  headerKey: {type: apiKey, in: header, name: X-Api-Key}
  queryKey: {type: apiKey, in: query, name: api_key}
"""


def secured(security: str) -> openapi.Operation:
    return operation(
        f"""
        /stock:
          get:
            operationId: stock
            parameters:
              - {{name: sku, in: query}}
            security: {security}
        """,
        SCHEMES,
    )


def creds(*names: str, secret: str = SECRET) -> dict[str, tuple[openapi.Scheme, str]]:
    schemes = {scheme.name: scheme for scheme in document(SEARCH, SCHEMES).schemes}
    return {name: (schemes[name], secret) for name in names}


def test_a_bearer_token():
    prepared = build(secured("[{token: []}]"), {"sku": "1"}, credentials=creds("token"))
    assert prepared.headers["Authorization"] == f"Bearer {SECRET}"
    assert prepared.secret_values == (SECRET,)


def test_basic_is_user_and_password_in_base64():
    prepared = build(secured("[{login: []}]"), credentials=creds("login", secret="ana:pa ss:w"))
    encoded = base64.b64encode(b"ana:pa ss:w").decode()
    assert prepared.headers["Authorization"] == f"Basic {encoded}"
    assert set(prepared.secret_values) == {encoded, "ana:pa ss:w"}


def test_an_api_key_in_a_header():
    prepared = build(secured("[{headerKey: []}]"), credentials=creds("headerKey"))
    assert prepared.headers["X-Api-Key"] == SECRET and "Authorization" not in prepared.headers


def test_an_api_key_in_the_query():
    prepared = build(secured("[{queryKey: []}]"), {"sku": "1"}, credentials=creds("queryKey"))
    assert query_of(prepared.url) == [("sku", "1"), ("api_key", SECRET)]
    assert "Authorization" not in prepared.headers


def test_a_credential_with_a_line_break_is_refused_for_a_header():
    with pytest.raises(BadArguments):
        build(secured("[{token: []}]"), credentials=creds("token", secret="a\nb"))


def test_the_first_alternative_whose_schemes_are_all_set():
    op = secured("[{token: [], headerKey: []}, {queryKey: []}, {login: []}]")
    # token alone is not enough for the first: the second goes.
    prepared = build(op, credentials=creds("token", "queryKey", "login"))
    assert query_of(prepared.url) == [("api_key", SECRET)]
    assert "Authorization" not in prepared.headers and "X-Api-Key" not in prepared.headers
    # All of the first's set: both of its schemes go.
    both = build(op, credentials=creds("token", "headerKey", "queryKey"))
    assert both.headers["Authorization"] == f"Bearer {SECRET}" and both.headers["X-Api-Key"] == SECRET
    assert query_of(both.url) == []


def test_an_empty_alternative_needs_nothing():
    op = secured("[{token: []}, {}]")
    prepared = build(op)
    assert "Authorization" not in prepared.headers and prepared.secret_values == ()


def test_missing_credentials_name_the_schemes():
    op = secured("[{token: [], headerKey: []}, {queryKey: []}]")
    with pytest.raises(MissingCredentials) as caught:
        build(op, credentials=creds("token"))
    assert str(caught.value) == "no credential set for headerKey, queryKey (manage.py set_action_secret)"


def test_no_security_sends_no_credentials_even_if_some_are_set():
    prepared = build(operation(SEARCH), {"q": "ab"}, credentials=creds("token", "queryKey"))
    assert "Authorization" not in prepared.headers and "api_key" not in prepared.url


# --- shown -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme, secret",
    [
        ("token", SECRET),
        ("login", "ana:" + SECRET),
        ("headerKey", SECRET),
        ("queryKey", SECRET),
        ("queryKey", "ключ/é?&#%"),
    ],
)
def test_shown_masks_the_secret_everywhere(scheme, secret):
    prepared = build(secured(f"[{{{scheme}: []}}]"), {"sku": "1"}, credentials=creds(scheme, secret=secret))
    shown = prepared.shown()
    text = json.dumps(shown, ensure_ascii=False)
    for value in prepared.secret_values:
        assert value not in text
    assert secret not in text
    assert base64.b64encode(secret.encode()).decode() not in text
    assert "••••" in text
    # The rest is as sent.
    assert shown["method"] == "GET" and "sku=1" in shown["url"]


def test_shown_of_each_kind():
    bearer = build(secured("[{token: []}]"), credentials=creds("token")).shown()
    assert bearer["headers"]["Authorization"] == "Bearer ••••"
    basic = build(secured("[{login: []}]"), credentials=creds("login", secret="ana:pw")).shown()
    assert basic["headers"]["Authorization"] == "Basic ••••"
    header = build(secured("[{headerKey: []}]"), credentials=creds("headerKey")).shown()
    assert header["headers"]["X-Api-Key"] == "••••"
    query = build(secured("[{queryKey: []}]"), {"sku": "1"}, credentials=creds("queryKey")).shown()
    assert query["url"] == "https://api.example.com/v1/stock?sku=1&api_key=••••"


def test_shown_masks_a_query_key_with_a_space():
    secret = "my api key"
    prepared = build(secured("[{queryKey: []}]"), credentials=creds("queryKey", secret=secret))
    assert "api_key=••••" in prepared.shown()["url"]


def test_shown_of_a_request_without_credentials_and_its_body():
    prepared = build(operation(CANCEL), {"order_id": "A-1", "reason": "late"}, {"customer_email": "a@b.c"})
    shown = prepared.shown()
    assert shown == {
        "method": "POST",
        "url": "https://api.example.com/v1/orders/A-1/cancel",
        "headers": {"Accept": "application/json", "Content-Type": "application/json"},
        "body": '{"reason": "late", "customer_email": "a@b.c"}',
    }
    assert build(operation(SEARCH), {"q": "ab"}).shown()["body"] == ""


# --- shaped and keep -------------------------------------------------------------------------

PLAIN = operation(SEARCH)


def with_fields(*pointers: str) -> openapi.Operation:
    listed = ", ".join(f"'{pointer}'" for pointer in pointers)
    return operation(
        f"""
        /orders:
          get:
            operationId: orders
            x-kookee-fields: [{listed}]
        """
    )


def test_shaped_json():
    body = json.dumps({"id": "A-1", "total": 49.9}).encode()
    assert request.shaped(PLAIN, "application/json; charset=utf-8", body, 1000) == ({"id": "A-1", "total": 49.9}, False)


def test_shaped_json_without_a_json_content_type():
    assert request.shaped(PLAIN, "text/plain", b"  [1, 2]", 1000) == ([1, 2], False)


def test_shaped_text():
    assert request.shaped(PLAIN, "text/plain", "Olá, mundo".encode(), 1000) == ("Olá, mundo", False)


def test_shaped_bad_json_is_text():
    assert request.shaped(PLAIN, "application/json", b"{not json", 1000) == ("{not json", False)


def test_shaped_invalid_utf8_is_replaced():
    data, cut = request.shaped(PLAIN, "text/plain", b"ok \xff", 1000)
    assert data == "ok \ufffd" and not cut


def test_shaped_keeps_only_the_fields():
    op = with_fields("/id", "/status")
    body = json.dumps({"id": "A-1", "status": "shipped", "card": "4111", "address": {"street": "x"}}).encode()
    assert request.shaped(op, "application/json", body, 1000) == ({"id": "A-1", "status": "shipped"}, False)


def test_shaped_text_ignores_the_fields():
    assert request.shaped(with_fields("/id"), "text/plain", b"card 4111", 1000) == ("card 4111", False)


def test_shaped_cut_at_the_limit():
    body = json.dumps({"text": "x" * 100}).encode()
    data, cut = request.shaped(PLAIN, "application/json", body, 30)
    assert cut is True and data == json.dumps({"text": "x" * 100})[:30] and len(data) == 30


def test_shaped_cut_text_and_exactly_at_the_limit():
    assert request.shaped(PLAIN, "text/plain", b"abcdef", 3) == ("abc", True)
    assert request.shaped(PLAIN, "text/plain", b"abcdef", 6) == ("abcdef", False)


def test_shaped_counts_the_fields_kept_not_the_whole_answer():
    body = json.dumps({"id": "A-1", "log": "x" * 5000}).encode()
    assert request.shaped(with_fields("/id"), "application/json", body, 50) == ({"id": "A-1"}, False)


ORDERS = {
    "order": {"id": "A-1", "customer": {"name": "Ana", "card": "4111"}, "total": 10},
    "items": [
        {"sku": "s1", "qty": 1, "cost": 3},
        {"sku": "s2", "qty": 2, "cost": 4},
        {"sku": "s3", "qty": 3, "cost": 5},
    ],
    "a/b": 1,
    "m~n": 2,
    "secret": "x",
}


def test_keep_a_nested_pointer():
    assert request.keep(ORDERS, ("/order/customer/name",)) == {"order": {"customer": {"name": "Ana"}}}


def test_keep_a_star_over_a_list():
    assert request.keep(ORDERS, ("/items/*/sku",)) == {"items": [{"sku": "s1"}, {"sku": "s2"}, {"sku": "s3"}]}


def test_keep_a_numeric_index():
    assert request.keep(ORDERS, ("/items/1",)) == {"items": [{"sku": "s2", "qty": 2, "cost": 4}]}
    assert request.keep(ORDERS, ("/items/2/qty", "/items/0/sku")) == {"items": [{"sku": "s1"}, {"qty": 3}]}


def test_keep_a_star_joined_with_an_index():
    kept = request.keep(ORDERS, ("/items/*/sku", "/items/1/qty"))
    assert kept == {"items": [{"sku": "s1"}, {"sku": "s2", "qty": 2}, {"sku": "s3"}]}


def test_keep_escapes():
    assert request.keep(ORDERS, ("/a~1b", "/m~0n")) == {"a/b": 1, "m~n": 2}
    assert request.keep({"~1": "tilde-one", "/": "slash"}, ("/~01",)) == {"~1": "tilde-one"}


def test_keep_a_pointer_that_reaches_nothing():
    assert request.keep(ORDERS, ("/nothing",)) == {}
    assert request.keep(ORDERS, ("/items/9",)) == {"items": []}
    assert request.keep(ORDERS, ("/order/nothing", "/secret")) == {"order": {}, "secret": "x"}


def test_keep_a_pointer_past_a_plain_value_keeps_nothing_of_it():
    # The API said the status is "shipped"; the model must not read {"status": null}.
    assert request.keep({"status": "shipped", "id": 1}, ("/status/code", "/id")) == {"id": 1}


def test_keep_overlapping_pointers_are_merged():
    whole = {"order": ORDERS["order"]}
    assert request.keep(ORDERS, ("/order", "/order/customer/name")) == whole
    assert request.keep(ORDERS, ("/order/customer/name", "/order")) == whole
    kept = request.keep(ORDERS, ("/order/customer/name", "/order/id", "/order/customer/name"))
    assert kept == {"order": {"id": "A-1", "customer": {"name": "Ana"}}}
    assert request.keep(ORDERS, ("/items/*", "/items/0/sku")) == {"items": ORDERS["items"]}


def test_keep_a_star_over_an_object_is_a_key_named_star():
    assert request.keep({"*": 1, "a": 2}, ("/*",)) == {"*": 1}


def test_keep_the_root_pointer_keeps_all():
    assert request.keep(ORDERS, ("",)) == ORDERS


def test_keep_a_list_at_the_top():
    assert request.keep([{"id": 1, "x": 2}, {"id": 3}], ("/*/id",)) == [{"id": 1}, {"id": 3}]


def test_keep_does_not_change_the_data():
    before = json.dumps(ORDERS, sort_keys=True)
    request.keep(ORDERS, ("/order/customer/name", "/items/*/sku"))
    assert json.dumps(ORDERS, sort_keys=True) == before

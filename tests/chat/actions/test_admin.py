"""Actions in the admin (chat/admin/actions.py): importing a document, the
texts staff edit, the credentials (write-only), the Test page against a
real API on a loopback port, and the calls of turns, which Support reads
in the transcript and in their own list."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.actions import catalog, openapi
from chat.models import Action, ActionCall, ActionScheme, Conversation, Turn
from tests.chat.support.test_handoff_admin import staff

pytestmark = pytest.mark.django_db

SECRET = "sk-live-TOPSECRET-4217"
ACTIONS = reverse("admin:chat_action_changelist")
IMPORT = reverse("admin:chat_action_import")
CALLS = reverse("admin:chat_actioncall_changelist")
OFFLINE = "Actions need a real model: the built-in offline model does not call them."


class ShopAPI:
    """The customer's API: a real HTTP/1.1 server in a thread, which keeps
    every request as it arrived (method, path, query, headers, body)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                seen = {
                    "method": self.command,
                    "path": parts.path,
                    "query": parse_qs(parts.query),
                    "headers": {name.lower(): value for name, value in self.headers.items()},
                    "body": json.loads(raw) if raw else None,
                }
                api.requests.append(seen)
                status, payload = api.route(seen)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def route(self, seen: dict[str, Any]) -> tuple[int, Any]:
        path = seen["path"]
        if seen["method"] == "GET" and path.startswith("/orders/"):
            customer = seen["query"].get("customer_id", [""])[0]
            return 200, {"id": path.removeprefix("/orders/"), "customer": customer, "status": "shipped"}
        if seen["method"] == "POST" and path.endswith("/cancel"):
            return 200, {"id": path.split("/")[2], "status": "cancelled"}
        if path == "/echo":  # an API that echoes what it was sent, credentials included
            return 200, {"headers": seen["headers"]}
        if path == "/status":
            return 200, {"open": True}
        return 404, {"error": "not found"}


@pytest.fixture
def api(settings):
    settings.KOOKEE_ACTIONS_ALLOW_PRIVATE = True  # the API is on this machine
    server = ShopAPI()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def shop_document(url: str, order_summary: str = "Looking up your order") -> str:
    secured = [{"shopKey": []}]
    return json.dumps(
        {
            "openapi": "3.1.0",
            "info": {"title": "Shop", "version": "1"},
            "servers": [{"url": url}],
            "paths": {
                "/orders/{order_id}": {
                    "get": {
                        "operationId": "getOrder",
                        "summary": order_summary,
                        "description": "One of the signed-in visitor's orders.",
                        "parameters": [
                            {"name": "order_id", "in": "path", "required": True, "schema": {"type": "string"}},
                            {
                                "name": "customer_id",
                                "in": "query",
                                "required": True,
                                "x-kookee-visitor": "id",
                                "schema": {"type": "string"},
                            },
                        ],
                        "security": secured,
                    }
                },
                "/orders/{order_id}/cancel": {
                    "post": {
                        "operationId": "cancelOrder",
                        "summary": "Cancelling your order",
                        "parameters": [{"name": "order_id", "in": "path", "required": True}],
                        "requestBody": {
                            "required": True,
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["reason"],
                                        "properties": {"reason": {"type": "string"}},
                                    }
                                }
                            },
                        },
                        "security": secured,
                    }
                },
                "/echo": {"get": {"operationId": "echoHeaders", "summary": "Echoing", "security": secured}},
                "/status": {"get": {"operationId": "shopStatus", "summary": "Checking the shop's status"}},
                "/health": {"get": {"summary": "Not an action: no operationId"}},
            },
            "components": {"securitySchemes": {"shopKey": {"type": "http", "scheme": "bearer"}}},
        }
    )


def imported(url: str, **options) -> catalog.Report:
    return catalog.import_document(openapi.parse(shop_document(url)), **options)


def upload(text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile("shop.json", text.encode(), content_type="application/json")


def page_of(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, url
    return response.content.decode()


def trial_url(name: str) -> str:
    return reverse("admin:chat_action_test", args=[Action.objects.get(name=name).pk])


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


@pytest.fixture
def support(django_user_model):
    return staff(django_user_model, "sam", "Support")


@pytest.fixture
def finance(django_user_model):
    return staff(django_user_model, "fiona", "Finance")


# --- importing a document -------------------------------------------------------------------------


def test_the_import_page_imports_a_document_and_says_what_it_did(admin_client, api):
    assert 'enctype="multipart/form-data"' in page_of(admin_client, IMPORT)
    assert IMPORT in page_of(admin_client, ACTIONS)  # linked from the list

    response = admin_client.post(IMPORT, {"document": upload(shop_document("http://127.0.0.1:1"))}, follow=True)

    assert response.redirect_chain == [(ACTIONS, 302)]
    shown = " ".join(messages_of(response))
    assert "4 added, 0 updated, 0 unchanged" in shown
    assert "GET /health" in shown  # what was skipped
    assert "shopKey" in shown  # its credential is not set yet
    assert set(Action.objects.values_list("name", "enabled")) == {
        ("getOrder", True),
        ("cancelOrder", True),
        ("echoHeaders", True),
        ("shopStatus", True),
    }
    assert ActionScheme.objects.get().name == "shopKey"


def test_the_import_page_takes_a_base_url_and_imports_switched_off(admin_client):
    document = shop_document("/api")  # a relative server: the base URL says where
    response = admin_client.post(
        IMPORT, {"document": upload(document), "base_url": "https://shop.example.com", "switched_off": "on"}
    )

    assert response.status_code == 302
    action = Action.objects.get(name="getOrder")
    assert (action.base_url, action.enabled) == ("https://shop.example.com/api", False)


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (json.dumps({"swagger": "2.0", "paths": {}}), "Swagger 2.0 is not supported"),
        (
            json.dumps({"openapi": "3.1.0", "paths": {"/a/{id}": {"get": {"operationId": "a"}}}}),
            "the path parameter 'id' is not defined",
        ),
        (shop_document("/relative-without-base-url"), "no absolute http(s) API address"),  # ImportRefused
    ],
)
def test_a_bad_document_imports_nothing_and_says_why(admin_client, document, reason):
    response = admin_client.post(IMPORT, {"document": upload(document)})

    assert response.status_code == 200
    shown = messages_of(response)
    assert len(shown) == 1 and shown[0].startswith("Nothing was imported:") and reason in shown[0]
    assert not Action.objects.exists() and not ActionScheme.objects.exists()


def test_a_document_that_is_not_utf8_is_a_form_error(admin_client):
    response = admin_client.post(IMPORT, {"document": SimpleUploadedFile("x.yaml", b"\xff\xfe\x00bad")})

    assert response.status_code == 200
    assert response.context["form"].errors == {"document": ["The document is not UTF-8 text."]}
    assert not Action.objects.exists()


@pytest.mark.parametrize("role", ["support", "finance"])
def test_only_superusers_import_or_see_actions(request, role):
    client = request.getfixturevalue(role)
    document = shop_document("http://127.0.0.1:1")

    assert client.get(IMPORT).status_code == 403
    assert client.post(IMPORT, {"document": upload(document)}).status_code == 403
    assert client.get(ACTIONS).status_code == 403
    assert client.get(reverse("admin:chat_actionscheme_changelist")).status_code == 403
    assert not Action.objects.exists()


# --- the list and the change form ------------------------------------------------------------------


def test_the_list_shows_what_each_action_needs(admin_client):
    imported("http://127.0.0.1:1")

    response = admin_client.get(ACTIONS)

    rows = {action.name: action for action in response.context["cl"].result_list}
    model_admin = response.context["cl"].model_admin
    assert model_admin.endpoint(rows["cancelOrder"]) == "POST /orders/{order_id}/cancel"
    assert [model_admin.needs_identity(rows[n]) for n in ("getOrder", "shopStatus")] == [True, False]
    assert [model_admin.asks_to_confirm(rows[n]) for n in ("cancelOrder", "getOrder")] == [True, False]
    assert "POST /orders/{order_id}/cancel" in response.content.decode()


def test_the_change_form_shows_the_parameters_and_the_tool_definition(admin_client):
    imported("http://127.0.0.1:1")
    action = Action.objects.get(name="getOrder")

    page = page_of(admin_client, reverse("admin:chat_action_change", args=[action.pk]))

    assert "filled from the verified visitor: id" in page
    assert "&quot;name&quot;: &quot;getOrder&quot;" in page  # the definition, as pretty JSON
    assert "customer_id" not in page.split("&quot;parameters&quot;")[1]  # the model never sees it
    assert trial_url("getOrder") in page  # the Test button
    assert 'name="path"' not in page and 'name="base_url"' not in page  # read-only


def test_edited_texts_are_marked_and_kept_by_a_reimport(admin_client):
    imported("http://127.0.0.1:1")
    action = Action.objects.get(name="getOrder")
    url = reverse("admin:chat_action_change", args=[action.pk])

    response = admin_client.post(url, {"title": "Your order", "description": "Ours.", "enabled": "on"})

    assert response.status_code == 302
    action.refresh_from_db()
    assert (action.title, action.description, action.texts_edited) == ("Your order", "Ours.", True)
    catalog.import_document(openapi.parse(shop_document("http://127.0.0.1:2", order_summary="Another summary")))
    action.refresh_from_db()
    assert (action.title, action.description, action.base_url) == ("Your order", "Ours.", "http://127.0.0.1:2")


def test_switching_an_action_off_is_not_editing_its_texts(admin_client):
    imported("http://127.0.0.1:1")
    action = Action.objects.get(name="getOrder")
    data = {"title": action.title, "description": action.description}

    assert admin_client.post(reverse("admin:chat_action_change", args=[action.pk]), data).status_code == 302
    action.refresh_from_db()
    assert (action.enabled, action.texts_edited) == (False, False)


def test_the_list_actions_enable_and_disable(admin_client):
    imported("http://127.0.0.1:1", enabled=False)
    ids = list(Action.objects.filter(name__in=["getOrder", "shopStatus"]).values_list("pk", flat=True))

    response = admin_client.post(ACTIONS, {"action": "enable", "_selected_action": ids}, follow=True)
    assert set(Action.objects.filter(enabled=True).values_list("pk", flat=True)) == set(ids)
    assert any("shopKey" in message for message in messages_of(response))  # getOrder needs it
    admin_client.post(ACTIONS, {"action": "disable", "_selected_action": ids})
    assert not Action.objects.filter(enabled=True).exists()


def test_an_action_with_calls_cannot_be_deleted(admin_client):
    imported("http://127.0.0.1:1")
    action = Action.objects.get(name="getOrder")
    turn = Turn.objects.create(
        conversation=Conversation.objects.create(visitor_hash="v"), user_text="?", model="m", status="completed"
    )
    ActionCall.objects.create(turn=turn, action=action, call_id="c1", outcome="ok", started_at=datetime.now(UTC))

    page = page_of(admin_client, reverse("admin:chat_action_delete", args=[action.pk]))
    admin_client.post(reverse("admin:chat_action_delete", args=[action.pk]), {"post": "yes"})

    assert "Cannot delete action" in page
    assert Action.objects.filter(pk=action.pk).exists()


@pytest.mark.parametrize(("key", "warned"), [("", True), ("sk-test", False)])
def test_the_list_warns_that_the_offline_model_calls_no_action(admin_client, settings, key, warned):
    settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL = key, ""

    assert (OFFLINE in page_of(admin_client, ACTIONS)) is warned


# --- credentials ------------------------------------------------------------------------------------


def test_a_credential_is_written_never_shown_and_masked_on_the_test_page(admin_client, api):
    imported(api.url)
    scheme = ActionScheme.objects.get(name="shopKey")
    url = reverse("admin:chat_actionscheme_change", args=[scheme.pk])
    assert page_of(admin_client, reverse("admin:chat_actionscheme_changelist"))  # no secret, "set": no

    response = admin_client.post(url, {"new_secret": SECRET})

    assert response.status_code == 302
    assert catalog.credentials({"shopKey"})["shopKey"][1] == SECRET
    assert ActionScheme.objects.get().secret_set_at is not None
    result = admin_client.post(trial_url("echoHeaders"), {"arguments": "{}"})
    assert result.status_code == 200
    assert api.requests[-1]["headers"]["authorization"] == f"Bearer {SECRET}"  # the API got it
    pages = [result.content.decode()] + [
        page_of(admin_client, page)
        for page in (
            url,
            reverse("admin:chat_actionscheme_changelist"),
            ACTIONS,
            reverse("admin:chat_action_change", args=[Action.objects.get(name="echoHeaders").pk]),
            trial_url("echoHeaders"),
        )
    ]
    assert all(SECRET not in page for page in pages)
    assert "Bearer ••••" in pages[0]  # in the request shown, and in the API's echo of it
    assert pages[0].count("••••") >= 3


def test_a_credential_can_be_removed_and_needs_its_kind(admin_client):
    imported("http://127.0.0.1:1")
    scheme = ActionScheme.objects.get(name="shopKey")
    catalog.set_secret("shopKey", SECRET)
    url = reverse("admin:chat_actionscheme_change", args=[scheme.pk])

    both = admin_client.post(url, {"new_secret": "x", "remove_secret": "on"})
    assert both.status_code == 200 and catalog.credentials({"shopKey"})  # refused, kept
    broken = admin_client.post(url, {"new_secret": "a\nb"})
    assert broken.status_code == 200 and catalog.credentials({"shopKey"})["shopKey"][1] == SECRET
    assert admin_client.post(url, {"new_secret": "", "remove_secret": "on"}).status_code == 302
    assert catalog.credentials({"shopKey"}) == {}
    assert ActionScheme.objects.get().secret_set_at is None


# --- the Test page ------------------------------------------------------------------------------------


@pytest.fixture
def shop(api):
    imported(api.url)
    catalog.set_secret("shopKey", SECRET)
    return api


@pytest.mark.parametrize("role", ["support", "finance"])
def test_only_superusers_test_an_action(request, shop, role):
    client = request.getfixturevalue(role)
    url = trial_url("shopStatus")

    assert client.get(url).status_code == 403
    assert client.post(url, {"arguments": "{}"}).status_code == 403
    assert shop.requests == []


def test_the_test_page_calls_the_api_and_shows_what_the_model_is_given(admin_client, shop):
    page = page_of(admin_client, trial_url("shopStatus"))
    assert "&quot;name&quot;: &quot;shopStatus&quot;" in page and "{}</textarea>" in page
    assert not ActionCall.objects.exists()

    response = admin_client.post(trial_url("shopStatus"), {"arguments": "{}"})

    assert [r["path"] for r in shop.requests] == ["/status"]
    page = response.content.decode()
    assert f"GET {shop.url}/status" in page
    assert "HTTP 200, application/json" in page
    result = response.context["result"]
    assert json.loads(result["for_model"]) == {"status": 200, "result": {"open": True}}
    assert not ActionCall.objects.exists()  # a test belongs to no turn


def test_the_identity_chosen_fills_its_parameter_and_an_example_argument_is_ignored(admin_client, shop):
    arguments = json.dumps({"order_id": "A-1001", "customer_id": "user-7"})
    data = {"arguments": arguments, "person_id": "user-42", "person_attributes": '{"plan": "pro"}'}

    response = admin_client.post(trial_url("getOrder"), data)

    assert response.status_code == 200
    seen = shop.requests[-1]
    assert (seen["path"], seen["query"]) == ("/orders/A-1001", {"customer_id": ["user-42"]})
    assert "user-7" not in json.dumps(seen)
    assert response.context["ignored"] == ["customer_id"]


def test_without_an_identity_an_action_that_needs_one_is_refused_as_in_a_turn(admin_client, shop):
    response = admin_client.post(trial_url("getOrder"), {"arguments": '{"order_id": "A-1001"}'})

    assert response.status_code == 200
    assert shop.requests == []
    result = response.context["result"]
    assert result["record"].outcome == "refused" and "sign in" in result["for_model"]


def test_an_action_that_changes_data_is_sent_only_when_ticked(admin_client, shop):
    url = trial_url("cancelOrder")
    arguments = json.dumps({"order_id": "A-1001", "reason": "changed my mind"})
    assert "Send it: this request changes data on the live API" in page_of(admin_client, url)
    assert "Send it" not in page_of(admin_client, trial_url("shopStatus"))

    unticked = admin_client.post(url, {"arguments": arguments})
    assert unticked.status_code == 200 and "send" in unticked.context["form"].errors
    assert shop.requests == []

    ticked = admin_client.post(url, {"arguments": arguments, "send": "on"})
    assert ticked.status_code == 200
    assert [(r["method"], r["path"], r["body"]) for r in shop.requests] == [
        ("POST", "/orders/A-1001/cancel", {"reason": "changed my mind"})
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [("arguments", "{order_id: 1"), ("arguments", "[1, 2]"), ("person_attributes", '{"a": {"b": 1}}')],
)
def test_invalid_json_is_a_form_error_and_nothing_is_sent(admin_client, shop, field, value):
    data = {"arguments": "{}", "person_id": "user-42", field: value}

    response = admin_client.post(trial_url("shopStatus"), data)

    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert "result" not in response.context
    assert shop.requests == []


def test_a_disabled_action_can_be_tested(admin_client, shop):
    Action.objects.update(enabled=False)

    response = admin_client.post(trial_url("shopStatus"), {"arguments": "{}"})

    assert response.context["result"]["record"].outcome == "ok"
    assert "This action is disabled" in response.content.decode()
    assert len(shop.requests) == 1


# --- the calls of turns, for Support ------------------------------------------------------------------


def conversation_with_calls(turns: int, erased: bool = False) -> Conversation:
    action = Action.objects.get_or_create(
        name="getOrder",
        defaults={"method": "GET", "path": "/orders/{order_id}", "base_url": "http://x", "title": "Your order"},
    )[0]
    conversation = Conversation.objects.create(visitor_hash="v")
    for number in range(turns):
        turn = Turn.objects.create(
            conversation=conversation,
            user_text=f"Where is A-100{number}?",
            model="m",
            status="completed",
            erased_at=datetime.now(UTC) if erased else None,
        )
        for outcome, status in (("ok", 200), ("error", 404)):
            ActionCall.objects.create(
                turn=turn,
                action=action,
                call_id=f"c{number}{outcome}",
                arguments={"order_id": f"A-100{number}", "customer_id": "(verified id)"},
                http_status=status,
                outcome=outcome,
                detail="" if status == 200 else "the API answered 404",
                duration_ms=123,
                response_bytes=2048,
                started_at=datetime.now(UTC),
            )
    return conversation


def test_support_reads_the_calls_in_the_transcript(support):
    conversation = conversation_with_calls(1)

    page = page_of(support, reverse("admin:chat_conversation_change", args=[conversation.pk]))

    assert "Your order" in page
    assert "{&quot;order_id&quot;: &quot;A-1000&quot;, &quot;customer_id&quot;: &quot;(verified id)&quot;}" in page
    assert "the API answered 404" in page and "123 ms" in page and "2.0\xa0KB" in page
    assert "<td>404</td>" in page


def test_the_transcripts_calls_cost_no_query_per_turn(admin_client):
    def queries_for(conversation) -> int:
        with CaptureQueriesContext(connection) as captured:
            page_of(admin_client, reverse("admin:chat_conversation_change", args=[conversation.pk]))
        return len(captured)

    one, five = conversation_with_calls(1), conversation_with_calls(5)

    assert queries_for(five) == queries_for(one)


def test_an_erased_turns_call_shows_no_arguments(support):
    conversation = conversation_with_calls(1, erased=True)

    page = page_of(support, reverse("admin:chat_conversation_change", args=[conversation.pk]))
    call_page = page_of(support, reverse("admin:chat_actioncall_change", args=[ActionCall.objects.first().pk]))

    assert "A-1000" not in page and "arguments erased" in page
    assert "A-1000" not in call_page


def test_support_reads_the_list_of_calls_and_not_the_actions(support):
    conversation_with_calls(2)

    response = support.get(CALLS)

    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 4
    assert f"#turn-{Turn.objects.first().pk}" in response.content.decode()
    call = ActionCall.objects.first()
    assert "A-1000" in page_of(support, reverse("admin:chat_actioncall_change", args=[call.pk]))
    assert support.post(reverse("admin:chat_actioncall_delete", args=[call.pk]), {"post": "yes"}).status_code == 403
    assert support.get(reverse("admin:chat_action_change", args=[call.action_id])).status_code == 403


def test_finance_reads_no_calls(finance):
    conversation = conversation_with_calls(1)

    assert finance.get(CALLS).status_code == 403
    assert finance.get(reverse("admin:chat_actioncall_change", args=[ActionCall.objects.first().pk])).status_code == 403
    assert finance.get(reverse("admin:chat_conversation_change", args=[conversation.pk])).status_code == 403

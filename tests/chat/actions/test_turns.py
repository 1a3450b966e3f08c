"""Actions in a turn, end to end: the real consumer and round loop, the real
openai client against a scripted provider, and the customer's API as a real
HTTP server on loopback (tests/shop_api.py). What reaches the API, what the
model may read, the visitor's yes, Stop, and the calls' records."""

import asyncio
import json
import logging
import time
from pathlib import Path

import jwt
import pytest
from channels.db import database_sync_to_async

from billing.models import LedgerEntry
from chat.actions import catalog, openapi
from chat.models import Action, ActionCall, Turn
from chat.ops import metrics
from tests.chat.chat_client import ChatClient, new_session_key
from tests.provider import answer, tool_round
from tests.shop_api import ShopAPI

pytestmark = pytest.mark.django_db(transaction=True)

SHOP = Path(__file__).with_name("shop.yaml")
SIGNING_KEY = "the customer's signing key, shared with Kookee only"
API_SECRET = "shop-api-secret-7f3a9c"


@pytest.fixture(autouse=True)
def identity_and_actions(settings):
    settings.KOOKEE_IDENTITY_SECRET = SIGNING_KEY
    settings.KOOKEE_ACTIONS_ALLOW_PRIVATE = True  # the shop runs on loopback
    settings.KOOKEE_ACTION_TIMEOUT_SECONDS = 5


@pytest.fixture
async def shop(db):
    api = ShopAPI()
    url = await api.start()

    def imported():
        catalog.import_document(openapi.load(SHOP), base_url=url)
        catalog.set_secret("shopKey", API_SECRET)

    await database_sync_to_async(imported)()
    yield api
    await api.stop()


def token(sub="user-42", **claims):
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 600, **claims}, SIGNING_KEY, algorithm="HS256")


async def signed_in(sub="user-42", session_key=None):
    client = await ChatClient.connect(session_key)
    await client.send({"type": "identify", "token": token(sub, name="Ana", email="ana@example.com")})
    await client.receive_until("identified")
    return client


def offered_tools(request):
    return {tool["function"]["name"]: tool for tool in request.body.get("tools") or []}


def tool_result(request):
    return json.loads(next(m for m in request.body["messages"] if m["role"] == "tool")["content"])


def calls():
    return database_sync_to_async(lambda: list(ActionCall.objects.select_related("action").order_by("id")))()


# --- whose data -----------------------------------------------------------------------------


async def test_the_verified_visitors_own_id_reaches_the_api_and_the_models_cannot(use_provider, shop, caplog):
    client = await signed_in("user-42")
    # The model tries someone else's customer id: it is dropped, the verified one goes.
    use_provider.queue(
        tool_round([("c1", "getOrder", {"order_id": "A-1001", "customer_id": "user-7"})]),
        answer("Your order A-1001 has shipped."),
    )
    turn_id = await client.ask("Where is my order A-1001?")
    ended = await client.finish(turn_id)
    assert ended["status"] == "completed" and ended["generations"] == 2
    seen = shop.requests[0]
    assert (seen.method, seen.path, seen.query["customer_id"]) == ("GET", "/orders/A-1001", ["user-42"])
    assert seen.headers["authorization"] == f"Bearer {API_SECRET}"
    # The model never saw the identity parameter, and reads only x-kookee-fields.
    first, second = use_provider.requests
    get_order = offered_tools(first)["getOrder"]
    assert "customer_id" not in json.dumps(get_order)
    assert tool_result(second) == {"status": 200, "result": {"id": "A-1001", "status": "shipped", "total": "49.90"}}
    (call,) = await calls()
    assert (call.action.name, call.outcome, call.http_status) == ("getOrder", "ok", 200)
    assert call.arguments == {"order_id": "A-1001", "customer_id": "(verified id)"}
    assert call.turn_id == turn_id and call.duration_ms is not None and call.response_bytes > 0
    # The model's attempt is logged, without the value it tried.
    (ignored,) = [r.getMessage() for r in caplog.records if "ignored the model's" in r.getMessage()]
    assert "customer_id" in ignored and "user-7" not in ignored
    tool_frames = [f for f in client.frames if f["type"] == "tool"]
    assert [(f["name"], f["status"], f.get("title")) for f in tool_frames] == [
        ("getOrder", "started", "Looking up your order"),
        ("getOrder", "finished", "Looking up your order"),
    ]
    await client.close()


async def test_another_customers_order_is_the_apis_404_not_theirs(use_provider, shop):
    client = await signed_in("user-42")
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "B-2002"})]), answer("I cannot find it."))
    await client.finish(await client.ask("Where is order B-2002?"))
    assert shop.requests[0].query["customer_id"] == ["user-42"]
    result = tool_result(use_provider.requests[1])
    assert result["status"] == 404 and "error" in result and "user-7" not in json.dumps(result)
    (call,) = await calls()
    assert (call.outcome, call.http_status) == ("error", 404)
    assert [f["status"] for f in client.frames if f["type"] == "tool"] == ["started", "failed"]
    await client.close()


async def test_an_anonymous_visitor_is_not_offered_what_needs_identity(use_provider, shop):
    client = await ChatClient.connect()
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "A-1001"})]), answer("Please sign in."))
    await client.finish(await client.ask("Where is my order A-1001?"))
    tools = offered_tools(use_provider.requests[0])
    assert "getOrder" not in tools and "cancelOrder" not in tools
    assert {"shopStatus", "slowReport", "search_help_center", "request_human"} <= set(tools)
    assert shop.requests == []
    assert "unknown tool" in tool_result(use_provider.requests[1])["error"]
    assert await calls() == []
    await client.close()


@pytest.mark.parametrize(
    "bad",
    [
        token("user-42").rsplit(".", 1)[0] + ".forged-signature",
        jwt.encode({"sub": "user-42", "exp": int(time.time()) - 600}, SIGNING_KEY, algorithm="HS256"),
        jwt.encode({"sub": "user-42", "exp": int(time.time()) + 600}, "another key, not the customer's!", "HS256"),
    ],
    ids=["forged", "expired", "wrong-key"],
)
async def test_a_bad_identity_reaches_nothing(use_provider, shop, bad):
    client = await ChatClient.connect()
    await client.send({"type": "identify", "token": bad})
    assert (await client.receive_until("error"))["code"] == "bad_identity"
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "A-1001"})]), answer("Please sign in."))
    await client.finish(await client.ask("Where is my order?"))
    assert "getOrder" not in offered_tools(use_provider.requests[0])
    assert shop.requests == []
    await client.close()


async def test_a_switched_identity_reaches_only_the_new_persons_data(use_provider, shop):
    client = await signed_in("user-42")
    use_provider.queue(answer("Hello."))
    await client.finish(await client.ask("hi"))
    # Another person on the same browser: the tab starts afresh, then proves the new one.
    await client.send({"type": "identify", "token": token("user-7")})
    assert await client.refusal() == 4401
    other = await signed_in("user-7")
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "B-2002"})]), answer("Processing."))
    await other.finish(await other.ask("Where is B-2002?"))
    assert [seen.query["customer_id"] for seen in shop.requests] == [["user-7"]]
    history = json.dumps(use_provider.requests[-1].body["messages"])
    assert "hi" not in [m.get("content") for m in use_provider.requests[-1].body["messages"]]
    assert "user-42" not in history
    await other.close()


# --- what the model sends --------------------------------------------------------------------


async def test_arguments_that_break_the_schema_never_reach_the_api(use_provider, shop):
    client = await signed_in()
    use_provider.queue(
        tool_round([("c1", "getOrder", {"order_id": 1001, "extra": "x"})]),
        answer("Sorry."),
    )
    await client.finish(await client.ask("order 1001"))
    assert shop.requests == []
    error = tool_result(use_provider.requests[1])["error"]
    assert "getOrder" in error and "order_id" in error
    (call,) = await calls()
    assert call.outcome == "refused" and call.http_status is None
    await client.close()


async def test_a_path_value_cannot_move_the_path(use_provider, shop):
    client = await signed_in()
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "../../admin?x=1#"})]), answer("No."))
    await client.finish(await client.ask("order"))
    assert shop.requests[0].path == "/orders/..%2F..%2Fadmin%3Fx%3D1%23"
    await client.close()


async def test_a_private_address_is_refused_unless_allowed(use_provider, shop, settings):
    settings.KOOKEE_ACTIONS_ALLOW_PRIVATE = False
    client = await ChatClient.connect()
    use_provider.queue(tool_round([("c1", "shopStatus", {})]), answer("It did not work."))
    await client.finish(await client.ask("Is the shop open?"))
    assert shop.requests == []
    assert "KOOKEE_ACTIONS_ALLOW_PRIVATE" in tool_result(use_provider.requests[1])["error"]
    (call,) = await calls()
    assert call.outcome == "refused"
    await client.close()


async def test_a_redirect_elsewhere_is_refused(use_provider, shop, settings):
    # The status endpoint answers with a redirect to another port of this machine.
    def redirected():
        Action.objects.filter(name="shopStatus").update(path="/redirect?to=http://127.0.0.1:9/steal")
        action = Action.objects.get(name="shopStatus")
        action.spec["path"] = "/redirect?to=http://127.0.0.1:9/steal"
        action.save()

    await database_sync_to_async(redirected)()
    client = await ChatClient.connect()
    use_provider.queue(tool_round([("c1", "shopStatus", {})]), answer("It did not work."))
    await client.finish(await client.ask("Is the shop open?"))
    assert len(shop.requests) == 1
    (call,) = await calls()
    assert call.outcome == "refused"
    await client.close()


# --- a yes before anything changes -----------------------------------------------------------


async def ask_to_cancel(client, use_provider):
    use_provider.queue(
        tool_round([("c1", "cancelOrder", {"order_id": "A-1001", "reason": "ordered twice"})]),
        answer("Done."),
    )
    turn_id = await client.ask("Cancel my order A-1001, I ordered twice")
    confirm = await client.receive_until("action.confirm")
    return turn_id, confirm


async def test_a_change_runs_after_the_visitors_yes(use_provider, shop):
    client = await signed_in()
    turn_id, confirm = await ask_to_cancel(client, use_provider)
    assert confirm["turn_id"] == turn_id and confirm["action"] == "cancelOrder"
    assert confirm["title"] == "Cancelling your order"
    # As the visitor reads them: without the identity-filled customer id.
    assert confirm["arguments"] == {"order_id": "A-1001", "reason": "ordered twice"}
    assert shop.requests == []  # nothing before the yes
    await client.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
    answered = await client.receive_until("action.answered")
    assert answered == {"type": "action.answered", "turn_id": turn_id, "call_id": confirm["call_id"], "approve": True}
    ended = await client.finish(turn_id)
    assert ended["status"] == "completed"
    (seen,) = shop.requests
    assert (seen.method, seen.path) == ("POST", "/orders/A-1001/cancel")
    assert seen.body == {"reason": "ordered twice", "customer_id": "user-42"}
    (call,) = await calls()
    assert (call.outcome, call.call_id) == ("ok", confirm["call_id"])
    await client.close()


async def test_a_no_never_reaches_the_api(use_provider, shop):
    client = await signed_in()
    turn_id, confirm = await ask_to_cancel(client, use_provider)
    await client.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": False})
    await client.finish(turn_id)
    assert shop.requests == []
    assert tool_result(use_provider.requests[1])["declined"] is True
    (call,) = await calls()
    assert call.outcome == "declined"
    # Answering again: that question is over.
    await client.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
    assert (await client.receive_until("error"))["code"] == "not_found"
    assert shop.requests == []
    await client.close()


async def test_no_answer_in_time_is_a_no(use_provider, shop, settings):
    settings.KOOKEE_ACTION_CONFIRM_SECONDS = 0.3
    client = await signed_in()
    turn_id, _ = await ask_to_cancel(client, use_provider)
    ended = await client.finish(turn_id)
    assert ended["status"] == "completed"
    assert shop.requests == []
    assert tool_result(use_provider.requests[1])["declined"] is True
    await client.close()


async def test_stop_while_asked_is_a_no_and_ends_the_turn_billed_once(use_provider, shop):
    client = await signed_in()
    turn_id, _ = await ask_to_cancel(client, use_provider)
    await client.send({"type": "stop"})
    ended = await client.finish(turn_id)
    assert ended["status"] == "interrupted" and ended["generations"] == 1
    assert shop.requests == []
    (call,) = await calls()
    assert call.outcome == "cancelled"
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1
    await client.close()


async def test_another_tab_sees_the_question_and_may_answer(use_provider, shop):
    key = await new_session_key()
    client = await signed_in(session_key=key)
    turn_id, confirm = await ask_to_cancel(client, use_provider)
    # A second tab of the same visitor (a reload) is asked too, and answers.
    second = await ChatClient.connect(key)
    asked = await second.receive_until("action.confirm")
    assert asked["call_id"] == confirm["call_id"]
    await second.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
    # The tab that did not answer hears it was.
    assert (await client.receive_until("action.answered"))["approve"] is True
    await client.finish(turn_id)
    assert [seen.method for seen in shop.requests] == ["POST"]
    await second.close()
    await client.close()


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "action.answer", "approve": True},
        {"type": "action.answer", "call_id": "", "approve": True},
        {"type": "action.answer", "call_id": "x" * 41, "approve": True},
        {"type": "action.answer", "call_id": "abc", "approve": "yes"},
    ],
)
async def test_a_malformed_answer_is_an_error_and_changes_nothing(use_provider, shop, frame):
    client = await signed_in()
    turn_id, _ = await ask_to_cancel(client, use_provider)
    await client.send(frame)
    assert (await client.receive_until("error"))["code"] == "bad_frame"
    await client.send({"type": "stop"})
    await client.finish(turn_id)
    assert shop.requests == []
    await client.close()


# --- Stop during a call ------------------------------------------------------------------------


async def test_stop_during_a_slow_call_closes_it_at_once(use_provider, shop):
    client = await ChatClient.connect()
    use_provider.queue(tool_round([("c1", "slowReport", {})]), answer("never"))
    turn_id = await client.ask("my report please")
    seen = await shop.wait_for_request(1)
    stopped_at = time.monotonic()
    await client.send({"type": "stop"})
    ended = await client.finish(turn_id)
    assert ended["status"] == "interrupted" and ended["generations"] == 1
    await asyncio.wait_for(seen.hung_up.wait(), 1)
    assert seen.hung_up_at - stopped_at < 0.1
    (call,) = await calls()
    assert call.outcome == "cancelled" and call.duration_ms is not None
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    assert turn.interrupted
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1
    await client.close()


async def test_a_call_that_takes_too_long_is_a_timeout_the_model_reads(use_provider, shop, settings):
    settings.KOOKEE_ACTION_TIMEOUT_SECONDS = 0.3
    client = await ChatClient.connect()
    use_provider.queue(tool_round([("c1", "slowReport", {})]), answer("It is taking too long."))
    ended = await client.finish(await client.ask("my report please"))
    assert ended["status"] == "completed"
    assert "0.3" in tool_result(use_provider.requests[1])["error"]
    (call,) = await calls()
    assert call.outcome == "timeout"
    await client.close()


# --- secrets, records, metrics ------------------------------------------------------------------


async def test_the_apis_secret_is_in_no_frame_model_request_or_log(use_provider, shop, caplog):
    caplog.set_level(logging.DEBUG)
    client = await signed_in()
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "A-1001"})]), answer("Shipped."))
    await client.finish(await client.ask("order A-1001"))
    assert shop.requests[0].headers["authorization"].endswith(API_SECRET)
    assert API_SECRET not in json.dumps(client.frames)
    assert API_SECRET not in json.dumps([request.body for request in use_provider.requests])
    assert API_SECRET not in caplog.text
    rows = await database_sync_to_async(
        lambda: [str(list(ActionCall.objects.values())), str(list(Turn.objects.values()))]
    )()
    assert API_SECRET not in "".join(rows)
    await client.close()


async def test_calls_are_counted_by_action_and_outcome(use_provider, shop):
    metrics.reset()
    client = await signed_in()
    use_provider.queue(tool_round([("c1", "getOrder", {"order_id": "A-1001"})]), answer("Shipped."))
    await client.finish(await client.ask("order A-1001"))
    body, _ = metrics.exposition(None)
    text = body.decode()
    assert 'kookee_action_calls_total{action="getOrder",outcome="ok"} 1.0' in text
    assert 'kookee_action_call_duration_seconds_count{action="getOrder"} 1.0' in text
    await client.close()


async def test_the_offline_model_is_offered_no_actions(shop, settings, monkeypatch):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    looked_up = []
    monkeypatch.setattr(catalog, "offered", lambda person: looked_up.append(person) or [])
    client = await ChatClient.connect()
    ended = await client.finish(await client.ask("Is the shop open?"))
    assert ended["status"] == "completed"
    assert looked_up == [] and shop.requests == []
    await client.close()

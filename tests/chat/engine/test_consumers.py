"""The WebSocket consumer end to end: real ASGI stack, real database, the real
openai client talking to a scripted provider over loopback HTTP. Last, the
socket speaks each tab's language (from its handshake's Accept-Language)."""

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db.backends import utils

from billing.models import LedgerEntry
from chat.engine import records, turns
from chat.engine.consumers import CLOSE_REFUSED
from chat.engine.rounds import Tool
from chat.models import Conversation, Generation, RevokedKey, ToolCall, Turn
from chat.visitors.identity import hash_key
from helpcenter.models import Article
from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, check_turn, new_session_key
from tests.provider import HTTPError, Pause, WaitFor, answer, finish, text, tool_round, usage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def articles(db):
    await database_sync_to_async(Article.objects.create)(
        title="Installing the widget",
        slug="install-widget",
        body="Paste the widget script tag into your site's HTML, before the closing body tag.",
    )


@pytest.fixture
async def chat(use_provider):
    client = await ChatClient.connect()
    assert client.connected
    yield client
    await client.close()


def turn_count():
    return database_sync_to_async(Turn.objects.count)()


async def wait_for_delta(chat, turn_id):
    return await chat.receive_until("delta", turn_id=turn_id)


async def hung_up(request):
    async with asyncio.timeout(2):
        await request.hung_up.wait()
    return request.hung_up_early


# --- turns that finish ---------------------------------------------------------------------


async def test_a_greeting_is_one_generation(chat, use_provider):
    use_provider.queue(answer("Hi! How can I help?", 200, 7))
    turn_id = await chat.ask("hi")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert ended["generations"] == 1
    assert ended["usage"] == {"input_tokens": 200, "output_tokens": 7, "estimated": False}
    assert chat.text_of(turn_id) == "Hi! How can I help?"
    assert len(use_provider.requests) == 1


async def test_a_help_question_is_two_generations(chat, use_provider, articles):
    use_provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "install widget"})], "Let me look.", 300, 12),
        answer("Paste the script tag before </body>.", 500, 20),
    )
    turn_id = await chat.ask("How do I install the widget?")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert ended["generations"] == 2
    assert ended["usage"] == {"input_tokens": 800, "output_tokens": 32, "estimated": False}
    assert chat.text_of(turn_id) == "Let me look.\n\nPaste the script tag before </body>."
    tools = [(f["name"], f["status"]) for f in chat.frames if f["type"] == "tool"]
    assert tools == [("search_help_center", "started"), ("search_help_center", "finished")]
    call = await database_sync_to_async(ToolCall.objects.get)()
    assert call.call_id == "call_1"
    assert "install-widget" in call.result
    generations = await database_sync_to_async(list)(Generation.objects.filter(turn_id=turn_id))
    assert [(g.round, g.finish_reason) for g in generations] == [(1, "tool_calls"), (2, "stop")]
    assert all(g.first_delta_at and g.ended_at >= g.started_at for g in generations)


async def test_a_help_question_takes_sixteen_statements_of_the_database(chat, use_provider, articles, monkeypatch):
    # Every statement is a trip to the one database thread that every turn's
    # first character may wait behind (chat/engine/db_lane.py). A turn of
    # a known conversation: 7 to start it (the actions it may offer, the
    # team's live guidance, conversation, limits, history, budget hold,
    # insert), 4 for its tool round (generation, tool call, budget top-up,
    # the turn's hold), 5 to end it (claim, generation,
    # search, ledger entry, budget settled). Transactions and savepoints
    # apart.
    statements: list[str] = []
    execute = utils.CursorWrapper.execute

    def counted(cursor, sql, params=None):
        if not sql.startswith(("BEGIN", "SAVEPOINT", "RELEASE SAVEPOINT")):
            statements.append(sql)
        return execute(cursor, sql, params)

    for _ in range(2):  # the first creates the conversation
        statements.clear()
        use_provider.queue(
            tool_round([("call_1", "search_help_center", {"query": "install widget"})], "Let me look.", 300, 12),
            answer("Paste the script tag before </body>.", 500, 20),
        )
        with monkeypatch.context() as patched:
            patched.setattr(utils.CursorWrapper, "execute", counted)
            patched.setattr(utils.CursorWrapper, "executemany", None)  # none expected: it would fail
            turn_id = await chat.ask("How do I install the widget?")
            ended = await chat.receive_until("turn.ended", turn_id=turn_id)
        assert ended["status"] == "completed"
        await check_turn(chat.frames, turn_id)
    assert len(statements) == 16, "\n".join(statements)


async def test_history_is_sent_to_the_model(chat, use_provider):
    use_provider.queue(answer("Hello!"), answer("You said hi."))
    await chat.finish(await chat.ask("hi"))
    await chat.finish(await chat.ask("what did I say?"))
    messages = use_provider.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in messages[1:]] == ["hi", "Hello!", "what did I say?"]


async def test_truncated_answer(chat, use_provider):
    use_provider.queue([text("A very long answer that"), finish("length"), usage(10, 4)])
    turn_id = await chat.ask("explain everything")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "truncated"


async def test_provider_error_mid_stream(chat, use_provider):
    use_provider.queue([text("Partial answer"), {"error": {"message": "upstream overloaded"}}])
    turn_id = await chat.ask("hi")
    error = await chat.receive_until("error")
    assert error["code"] == "provider_error"
    ended = await chat.finish(turn_id)
    assert ended["status"] == "failed"
    assert ended["usage"]["estimated"] is True
    assert chat.text_of(turn_id) == "Partial answer"


async def test_provider_http_error_then_the_socket_still_works(chat, use_provider, settings):
    settings.KOOKEE_PROVIDER_RETRIES = 0
    use_provider.queue([HTTPError(503, {"error": {"message": "unavailable"}})], answer("Back."))
    first = await chat.ask("hi")
    assert (await chat.finish(first))["status"] == "failed"
    second = await chat.ask("hi again")
    assert (await chat.finish(second))["status"] == "completed"


async def test_a_stream_without_finish_reason_fails(chat, use_provider):
    use_provider.queue([text("Half")])
    turn_id = await chat.ask("hi")
    assert (await chat.finish(turn_id))["status"] == "failed"


async def test_round_limit(chat, use_provider, settings):
    settings.KOOKEE_MAX_ROUNDS = 2
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "a"})]),
        tool_round([("c2", "search_help_center", {"query": "b"})]),
    )
    turn_id = await chat.ask("loop forever")
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("failed", 2)


async def test_a_server_fault_fails_the_turn_and_bills_it(chat, use_provider, monkeypatch):
    async def broken(**kwargs):
        raise AssertionError("a bug in our code")

    monkeypatch.setattr(turns.provider, "open_stream", broken)
    turn_id = await chat.ask("hi")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "failed"


# --- Stop at every stage -------------------------------------------------------------------


async def test_stop_right_after_the_message(chat, use_provider):
    # Whether or not the request reached the provider yet, nothing comes back.
    use_provider.queue([WaitFor(asyncio.Event()), *answer("Never seen.")])
    await chat.send({"type": "message", "text": "hi"})
    await chat.send({"type": "stop"})
    started = await chat.receive_until("turn.started")
    ended = await chat.finish(started["turn_id"])
    assert ended["status"] == "interrupted"
    assert chat.text_of(started["turn_id"]) == ""


async def test_stop_before_the_first_token(chat, use_provider):
    use_provider.queue([WaitFor(asyncio.Event()), text("Never seen."), finish("stop")])
    turn_id = await chat.ask("hi")
    request = await use_provider.wait_for_request(1)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert ended["generations"] == 1
    assert ended["usage"]["estimated"] is True
    assert ended["usage"]["input_tokens"] > 0
    assert await hung_up(request)


async def test_stop_mid_text(chat, use_provider):
    use_provider.queue([text("The first half"), text(" of it"), WaitFor(asyncio.Event()), text(" never")])
    turn_id = await chat.ask("tell me")
    request = await use_provider.wait_for_request(1)
    await chat.receive_text(turn_id, "The first half of it")
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert chat.text_of(turn_id) == "The first half of it"
    assert ended["usage"] == {
        "input_tokens": ended["usage"]["input_tokens"],
        "output_tokens": 5,
        "estimated": True,
    }
    assert await hung_up(request)


async def test_deltas_streamed_within_the_window_go_as_fewer_frames(chat, use_provider, settings):
    settings.KOOKEE_DELTA_WINDOW_MS = 50  # the default, said here: the test is about it
    words = [f"word{i} " for i in range(30)]
    use_provider.queue([step for w in words for step in (text(w), Pause(0.005))] + [text("end."), finish("stop")])
    turn_id = await chat.ask("tell me")
    await chat.finish(turn_id)  # seq gap-free, stored text = the deltas, one ledger entry
    deltas = [f for f in chat.frames if f["type"] == "delta" and f["turn_id"] == turn_id]
    assert chat.text_of(turn_id) == "".join(words) + "end."
    assert deltas[0]["text"] == "word0", "the first delta goes alone, at once"
    assert len(deltas) < len(words) / 2, [d["text"] for d in deltas]


async def test_stop_within_the_window_stores_what_was_shown(chat, use_provider, settings):
    settings.KOOKEE_DELTA_WINDOW_MS = 10_000  # what follows the first delta waits for the Stop
    use_provider.queue([text("Shown"), Pause(0.05), text(" gathered"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("tell me")
    request = await use_provider.wait_for_request(1)
    await chat.receive_text(turn_id, "Shown")
    await asyncio.sleep(0.2)  # " gathered" has arrived, and waits for its window
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)  # stored text = the deltas sent
    assert ended["status"] == "interrupted"
    assert chat.text_of(turn_id) == "Shown"
    assert await hung_up(request)


async def test_stop_while_a_tool_runs(chat, use_provider, monkeypatch):
    tool_running = asyncio.Event()

    async def slow_search(query):
        tool_running.set()
        await asyncio.Event().wait()

    tool = Tool("search_help_center", "Search.", {"type": "object"}, slow_search)
    monkeypatch.setattr(turns, "TOOLS", [tool])
    use_provider.queue(tool_round([("c1", "search_help_center", {"query": "sso"})], "Checking."), answer("x"))
    turn_id = await chat.ask("sso?")
    await chat.receive_until("tool", status="started")
    async with asyncio.timeout(5):
        await tool_running.wait()
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("interrupted", 1)
    assert ended["usage"]["estimated"] is False  # round 1 finished and reported usage
    assert chat.text_of(turn_id) == "Checking."
    call = await database_sync_to_async(ToolCall.objects.get)()
    assert call.error == "cancelled"
    assert len(use_provider.requests) == 1


async def test_stop_in_the_second_round(chat, use_provider, articles):
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "widget"})], "Let me look.", 100, 10),
        [text("Paste the"), text(" script"), WaitFor(asyncio.Event()), text(" never"), finish("stop")],
    )
    turn_id = await chat.ask("widget?")
    second = await use_provider.wait_for_request(2)
    while chat.text_of(turn_id) != "Let me look.\n\nPaste the script":
        await wait_for_delta(chat, turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("interrupted", 2)
    assert ended["usage"]["estimated"] is True
    assert ended["usage"]["input_tokens"] > 100  # round 1 reported + round 2 estimated
    assert await hung_up(second)
    assert not use_provider.requests[0].hung_up_early


async def test_stop_when_idle_is_ignored(chat):
    await chat.send({"type": "stop"})
    assert await chat.communicator.receive_nothing(timeout=0.3)
    assert await turn_count() == 0


async def test_disconnect_mid_stream_saves_and_bills(use_provider, settings):
    settings.KOOKEE_RESUME_GRACE_SECONDS = 0  # no grace: stopped as the tab leaves
    client = await ChatClient.connect()
    use_provider.queue([text("Streaming to"), text(" nobody"), WaitFor(asyncio.Event()), finish("stop")])
    turn_id = await client.ask("hi")
    request = await use_provider.wait_for_request(1)
    while client.text_of(turn_id) != "Streaming to nobody":
        await client.receive_until("delta", turn_id=turn_id)
    await client.close()
    assert await hung_up(request)

    @database_sync_to_async
    def stored():
        turn = Turn.objects.get(pk=turn_id)
        return (
            turn.status,
            turn.interrupted,
            turn.stop_reason,
            turn.assistant_text,
            LedgerEntry.objects.filter(turn=turn).count(),
        )

    status, interrupted, reason, stored_text, entries = await stored()
    assert (status, interrupted, reason, entries) == ("interrupted", True, "left", 1)
    assert stored_text == "Streaming to nobody"


async def test_a_second_cancel_during_the_final_write_loses_nothing(chat, use_provider, monkeypatch):
    writing = asyncio.Event()
    real_finish = records.finish_turn

    def slow_finish(*args, **kwargs):
        asyncio.run_coroutine_threadsafe(_set(writing), loop)
        import time

        time.sleep(0.3)  # a slow database, so the second cancel lands mid-write
        return real_finish(*args, **kwargs)

    async def _set(event):
        event.set()

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(records, "finish_turn", slow_finish)
    use_provider.queue([text("Hello"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("hi")
    await wait_for_delta(chat, turn_id)
    task = chat_task(chat)
    task.cancel()
    async with asyncio.timeout(5):
        await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await chat.receive_until("turn.ended", turn_id=turn_id)
    turn = await check_turn(chat.frames, turn_id)
    assert turn.status == "interrupted"


def chat_task(chat):
    """The running turn's task, found among the loop's tasks."""
    tasks = [t for t in asyncio.all_tasks() if t.get_coro().__name__ == "run_turn"]
    assert len(tasks) == 1
    return tasks[0]


# --- frames the server cannot take ----------------------------------------------------------


async def test_busy_while_a_turn_runs(chat, use_provider):
    use_provider.queue([text("Working"), WaitFor(release := asyncio.Event()), finish("stop"), usage(1, 1)])
    turn_id = await chat.ask("first")
    await wait_for_delta(chat, turn_id)
    await chat.send({"type": "message", "text": "second"})
    error = await chat.receive_until("error")
    assert error["code"] == "busy"
    release.set()
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert await turn_count() == 1


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "bad_json"),
        ("[1, 2]", "bad_frame"),
        ('{"text": "no type"}', "bad_frame"),
        ('{"type": 7}', "bad_frame"),
        ('{"type": "shout", "text": "hi"}', "unknown_type"),
        ('{"type": "message"}', "bad_text"),
        ('{"type": "message", "text": 42}', "bad_text"),
        ('{"type": "message", "text": "   "}', "bad_text"),
        ('{"type": "message", "text": "' + "x" * 5000 + '"}', "too_long"),
    ],
)
async def test_malformed_frames_get_an_error_and_change_nothing(chat, use_provider, frame, code):
    await chat.send(frame)
    error = await chat.receive()
    assert (error["type"], error["code"]) == ("error", code)
    assert error["message"]
    assert await turn_count() == 0
    use_provider.queue(answer("Still here."))
    assert (await chat.finish(await chat.ask("hi")))["status"] == "completed"


async def test_binary_frames_get_an_error(chat):
    await chat.communicator.send_to(bytes_data=b"\x00\x01")
    error = await chat.receive()
    assert error["code"] == "bad_frame"
    assert await turn_count() == 0


# --- the handshake -----------------------------------------------------------------------


async def test_refused_without_a_session(db):
    # The contract: the handshake itself is refused (HTTP 403).
    client = await ChatClient.connect(session_key="no-such-session")
    assert not client.connected


async def test_refused_from_a_foreign_origin(db):
    client = await ChatClient.connect(origin=b"https://evil.example")
    assert not client.connected


async def test_a_refused_handshake_listens_on_no_channel(db, monkeypatch):
    """Channels' own denier would open a channel on the layer and block in
    its receive: on Redis, one per refusal, and a receive that can hang when
    cancelled. Ours refuses without one."""
    from channels import consumer

    layers = []
    lookup = consumer.get_channel_layer
    monkeypatch.setattr(consumer, "get_channel_layer", lambda alias: layers.append(lookup(alias)) or layers[-1])
    for client in [
        await ChatClient.connect(origin=b"https://evil.example"),
        await ChatClient.connect(session_key="no-such-session"),
    ]:
        assert not client.connected
    assert len(layers) == 2 and layers == [None, None]


# --- the generation log -------------------------------------------------------------------


async def test_one_log_line_per_model_call(chat, use_provider, caplog):
    caplog.set_level("INFO", logger="kookee.generations")
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "sso"})], "", 40, 4),
        answer("Use SAML.", 90, 3),
    )
    turn_id = await chat.ask("sso?")
    await chat.finish(turn_id)
    lines = [r.getMessage() for r in caplog.records if r.name == "kookee.generations"]
    assert len(lines) == 2
    assert lines[0].startswith(f"generation turn={turn_id} round=1 finish_reason=tool_calls input_tokens=40")
    assert lines[1].startswith(f"generation turn={turn_id} round=2 finish_reason=stop input_tokens=90")
    assert all("ttfd_ms=" in line for line in lines)


async def test_refused_with_an_expired_session(db):
    from datetime import timedelta

    from django.contrib.sessions.models import Session
    from django.utils import timezone

    from tests.chat.chat_client import new_session_key

    key = await new_session_key()
    await database_sync_to_async(Session.objects.filter(pk=key).update)(expire_date=timezone.now() - timedelta(1))
    client = await ChatClient.connect(session_key=key)
    assert not client.connected


async def test_a_turn_that_cannot_start_is_an_error_and_the_socket_goes_on(chat, use_provider, monkeypatch):
    real_start = records.start_turn

    def broken(*args, **kwargs):
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(records, "start_turn", broken)
    await chat.send({"type": "message", "text": "hi"})
    error = await chat.receive()
    assert (error["type"], error["code"]) == ("error", "server_error")
    assert await turn_count() == 0
    monkeypatch.setattr(records, "start_turn", real_start)
    use_provider.queue(answer("Back."))
    assert (await chat.finish(await chat.ask("hi")))["status"] == "completed"


async def test_a_message_after_turn_ended_is_not_busy(chat, use_provider):
    use_provider.queue(answer("One."), answer("Two."))
    first = await chat.ask("one")
    await chat.receive_until("turn.ended", turn_id=first)
    second = await chat.ask("two")  # sent at once: never "busy"
    assert (await chat.finish(second))["status"] == "completed"
    assert "busy" not in [f.get("code") for f in chat.frames]


@pytest.mark.parametrize(
    ("parameter", "sent"),
    [("auto", "max_tokens"), ("max_completion_tokens", "max_completion_tokens"), ("max_tokens", "max_tokens")],
)
async def test_the_output_limit_parameter(chat, use_provider, settings, parameter, sent):
    settings.KOOKEE_MAX_TOKENS_PARAMETER = parameter
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 321
    use_provider.queue(answer("Hi."))
    await chat.finish(await chat.ask("hi"))
    body = use_provider.requests[0].body
    assert body[sent] == 321
    [other] = {"max_tokens", "max_completion_tokens"} - {sent}
    assert other not in body


# --- a conversation is stored at the first message; starting over ---------------------------


async def test_connecting_and_reading_history_store_nothing(chat):
    await chat.send({"type": "history"})
    assert await chat.receive() == {"type": "history", "turns": [], "messages": [], "more": False, "handoff": None}
    assert await database_sync_to_async(Conversation.objects.count)() == 0


async def test_the_first_message_creates_the_conversation_under_the_key_hash(use_provider):
    from tests.chat.chat_client import new_session_key

    key = await new_session_key()
    chat = await ChatClient.connect(session_key=key)
    try:
        use_provider.queue(answer("Hello."), answer("Again."))
        await chat.finish(await chat.ask("hi"))
        await chat.finish(await chat.ask("and again"))
    finally:
        await chat.close()
    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert conversation.visitor_hash == hash_key(key)
    assert await database_sync_to_async(conversation.turns.count)() == 2


async def test_forget_stops_the_turn_revokes_the_key_and_keeps_the_records(use_provider):
    from tests.chat.chat_client import new_session_key

    key = await new_session_key()
    chat = await ChatClient.connect(session_key=key)
    other_tab = await ChatClient.connect(session_key=key)
    use_provider.queue([text("Half an"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("long one")
    await wait_for_delta(chat, turn_id)

    await chat.send({"type": "forget"})

    ended = await chat.receive_until("turn.ended", turn_id=turn_id)
    assert ended["status"] == "interrupted"
    assert await chat.refusal() == CLOSE_REFUSED
    await check_turn(chat.frames, turn_id)
    # The key opens nothing any more, in a new tab or in one already open.
    again = await ChatClient.connect(session_key=key)
    assert await again.refusal() == CLOSE_REFUSED
    # The other tab followed the turn to its end (every tab sees the turn).
    await other_tab.receive_until("turn.ended", turn_id=turn_id)
    await other_tab.send({"type": "message", "text": "still me?"})
    assert await other_tab.refusal() == CLOSE_REFUSED
    await other_tab.close()
    reading_tab = await ChatClient.connect(session_key=key)  # refused outright, as above
    assert await reading_tab.refusal() == CLOSE_REFUSED
    # Support and finance keep the records; they belong to nobody now.
    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert conversation.visitor_hash == ""
    assert await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)() == 1
    assert await database_sync_to_async(RevokedKey.objects.filter(visitor_hash=hash_key(key)).exists)()


# --- history pages -----------------------------------------------------------------------


async def test_history_comes_in_pages_latest_first(chat, use_provider, settings):
    settings.KOOKEE_HISTORY_PAGE_TURNS = 2
    for n in range(5):
        use_provider.queue(answer(f"A to q{n}."))
        await chat.finish(await chat.ask(f"q{n}"))

    await chat.send({"type": "history"})
    latest = await chat.receive_until("history")
    assert [t["user_text"] for t in latest["turns"]] == ["q3", "q4"]
    assert latest["more"] is True
    assert "before" not in latest

    await chat.send({"type": "history", "before": latest["turns"][0]["turn_id"]})
    older = await chat.receive_until("history")
    assert [t["user_text"] for t in older["turns"]] == ["q1", "q2"]
    assert older == {**older, "more": True, "before": latest["turns"][0]["turn_id"]}

    await chat.send({"type": "history", "before": older["turns"][0]["turn_id"]})
    oldest = await chat.receive_until("history")
    assert [t["user_text"] for t in oldest["turns"]] == ["q0"]
    assert oldest["more"] is False


@pytest.mark.parametrize("before", [0, -1, "12", 1.5, True, [], {}])
async def test_a_bad_history_page_is_a_clear_error(chat, before):
    await chat.send({"type": "history", "before": before})
    error = await chat.receive()
    assert (error["type"], error["code"]) == ("error", "bad_frame")
    assert "before" in error["message"]


async def test_an_open_tab_cannot_read_a_conversation_started_over_elsewhere(use_provider):
    from tests.chat.chat_client import new_session_key

    key = await new_session_key()
    reader, leaver = await ChatClient.connect(session_key=key), await ChatClient.connect(session_key=key)
    use_provider.queue(answer("Private."))
    turn_id = await reader.ask("something private")
    await reader.finish(turn_id)
    # The other tab of the visitor followed the turn.
    await leaver.finish(turn_id)
    await leaver.send({"type": "forget"})
    assert await leaver.refusal() == CLOSE_REFUSED

    await reader.send({"type": "history"})

    assert await reader.refusal() == CLOSE_REFUSED
    assert not [f for f in reader.frames if f["type"] == "history"]
    await reader.close()
    await leaver.close()


async def test_a_history_page_never_reaches_another_conversation(chat, use_provider):
    use_provider.queue(answer("Mine."))
    mine = await chat.ask("mine")
    await chat.finish(mine)
    other = await ChatClient.connect()
    try:
        use_provider.queue(answer("Theirs."))
        await other.finish(await other.ask("theirs"))
        await other.send({"type": "history", "before": mine + 1000})
        page = await other.receive_until("history")
        assert [t["user_text"] for t in page["turns"]] == ["theirs"]
    finally:
        await other.close()


async def test_two_tabs_opened_before_the_first_message_share_one_conversation(use_provider):
    from tests.chat.chat_client import new_session_key

    key = await new_session_key()
    first, second = await ChatClient.connect(session_key=key), await ChatClient.connect(session_key=key)
    try:
        use_provider.queue(answer("One."), answer("Two."))
        one = await first.ask("from the first tab")
        await first.finish(one)
        await second.send({"type": "history"})
        assert [t["turn_id"] for t in (await second.receive_until("history"))["turns"]] == [one]
        two = await second.ask("from the second tab")
        await second.finish(two)
    finally:
        await first.close()
        await second.close()
    assert await database_sync_to_async(Conversation.objects.count)() == 1


# --- each tab's language -------------------------------------------------------------------
# What the server tells a visitor (an error, why a turn failed) is in the
# language their browser asked for on the handshake, while the codes stay the same.


async def tab(session_key: str, language: str) -> ChatClient:
    headers = [(b"origin", ORIGIN), (b"host", HOST), (b"cookie", f"sessionid={session_key}".encode())]
    if language:
        headers.append((b"accept-language", language.encode()))
    client = ChatClient(WebsocketCommunicator(application, "/ws/chat/", headers=headers))
    client.connected, _ = await client.communicator.connect()
    return client


@pytest.mark.parametrize(
    ("accept_language", "message"),
    [
        ("pt-BR,pt;q=0.9,en;q=0.8", "As mensagens podem ter no máximo 4000 caracteres."),
        ("pt", "As mensagens podem ter no máximo 4000 caracteres."),
        ("en-US,en;q=0.9", "Messages are limited to 4000 characters."),
        ("de-DE,fr;q=0.8", "Messages are limited to 4000 characters."),
        ("", "Messages are limited to 4000 characters."),
    ],
)
async def test_a_refused_frame_is_explained_in_the_tabs_language(settings, accept_language, message):
    settings.KOOKEE_MAX_MESSAGE_CHARS = 4000
    client = await tab(await new_session_key(), accept_language)
    try:
        await client.send({"type": "message", "text": "x" * 4001})
        frame = await client.receive_until("error")
    finally:
        await client.close()
    assert (frame["code"], frame["message"]) == ("too_long", message)


async def test_a_failed_turn_is_explained_to_each_tab_in_its_own_language(use_provider):
    use_provider.queue([HTTPError(400, {"error": {"message": "unknown model"}})])
    key = await new_session_key()
    portuguese, english = await tab(key, "pt-BR"), await tab(key, "en")
    try:
        turn_id = await english.ask("hello?")
        in_english = await english.receive_until("error", turn_id=turn_id)
        in_portuguese = await portuguese.receive_until("error", turn_id=turn_id)
        await english.finish(turn_id)
    finally:
        await portuguese.close()
        await english.close()
    assert in_english["code"] == in_portuguese["code"] == "provider_rejected"
    assert in_english["message"] == "The assistant could not take this request. Please try again later."
    assert in_portuguese["message"] != in_english["message"]
    assert "tente novamente" in in_portuguese["message"].lower()


async def test_the_language_chosen_on_the_page_wins_over_the_browsers(db):
    from chat.engine import handshake

    scope = {"headers": [(b"accept-language", b"en-US,en")], "cookies": {"django_language": "pt-br"}}
    assert handshake.language(scope) == "pt-br"
    assert handshake.language({**scope, "cookies": {"django_language": "xx"}}) == "en"
    assert handshake.language({"headers": [(b"accept-language", b"pt-BR")]}) == "pt-br"

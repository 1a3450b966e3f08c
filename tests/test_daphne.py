"""The app as users run it: a real daphne process, a real WebSocket client,
the session cookie from GET /, and the database checked afterwards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import websockets

from tests.provider import ScriptedProvider, WaitFor, text
from tests.servers import ROOT, _template, daphne


def _session_cookie(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/") as response:
        assert response.status == 200
        cookies = response.headers.get_all("Set-Cookie")
    [session] = [c.split(";")[0] for c in cookies if c.startswith("sessionid=")]
    return session


def _page(address: str, cookie: str, path: str = "/") -> str:
    request = urllib.request.Request(f"http://{address}{path}", headers={"Cookie": cookie})
    with urllib.request.urlopen(request) as response:
        return response.read().decode()


class Visitor:
    def __init__(self, socket) -> None:
        self.socket = socket
        self.frames: list[dict] = []

    async def receive(self) -> dict:
        async with asyncio.timeout(20):
            frame = json.loads(await self.socket.recv())
        self.frames.append(frame)
        return frame

    async def receive_until(self, frame_type: str) -> dict:
        while (frame := await self.receive())["type"] != frame_type:
            pass
        return frame

    async def ask(self, question: str) -> dict:
        await self.socket.send(json.dumps({"type": "message", "text": question}))
        return await self.receive_until("turn.started")

    def text_of(self, turn_id: int) -> str:
        return "".join(f["text"] for f in self.frames if f["type"] == "delta" and f["turn_id"] == turn_id)


def _connect(address: str, cookie: str | None, origin: str | None = None):
    headers = {"Cookie": cookie} if cookie else {}
    return websockets.connect(
        f"ws://{address}/ws/chat/", additional_headers=headers, origin=origin or f"http://{address}"
    )


def _stored(database: Path, turn_id: int) -> tuple[str, int, str, int, int]:
    with sqlite3.connect(database) as db:
        status, interrupted, assistant_text = db.execute(
            "select status, interrupted, assistant_text from chat_turn where id = ?", [turn_id]
        ).fetchone()
        generations = db.execute("select count(*) from chat_generation where turn_id = ?", [turn_id]).fetchone()[0]
        entries = db.execute("select count(*) from billing_ledgerentry where turn_id = ?", [turn_id]).fetchone()[0]
    return status, interrupted, assistant_text, generations, entries


# One server for the module's tests of it (a visitor each: a session of
# its own from GET /), not one per test: each start and stop took two seconds.
@pytest.fixture(scope="module")
def offline_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("offline")
    with daphne(folder, KOOKEE_OFFLINE_TOKENS_PER_SECOND="60", KOOKEE_OFFLINE_FIRST_TOKEN_MS="50") as server:
        yield server[:2]


async def test_offline_model_over_daphne(offline_server):
    address, database = offline_server
    cookie = _session_cookie(address)
    async with _connect(address, cookie) as socket:
        visitor = Visitor(socket)

        hi = (await visitor.ask("hi"))["turn_id"]
        ended = await visitor.receive_until("turn.ended")
        assert (ended["status"], ended["generations"]) == ("completed", 1)
        assert _stored(database, hi) == ("completed", 0, visitor.text_of(hi), 1, 1)

        question = (await visitor.ask("How do I cancel my subscription?"))["turn_id"]
        ended = await visitor.receive_until("turn.ended")
        assert (ended["status"], ended["generations"]) == ("completed", 2)
        assert re.search(r"\(/help/cancel-subscription/(#[\w-]+)?\)", visitor.text_of(question))
        assert _stored(database, question) == ("completed", 0, visitor.text_of(question), 2, 1)

        stopped = (await visitor.ask("What can you do?"))["turn_id"]
        await visitor.receive_until("delta")
        await socket.send(json.dumps({"type": "stop"}))
        ended = await visitor.receive_until("turn.ended")
        assert ended["status"] == "interrupted"
        assert _stored(database, stopped) == ("interrupted", 1, visitor.text_of(stopped), 1, 1)

    # The history is on the page after a reload.
    page = await asyncio.to_thread(_page, address, cookie)
    assert "chat/chat.js" in page
    assert "Stopped" in await asyncio.to_thread(_page, address, cookie, "/static/chat/chat.js")
    assert '"user_text": "How do I cancel my subscription?"' in page


def _manage(database: Path, *args: str, **env: str) -> str:
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "OPENAI_API_KEY": "", **env}
    done = subprocess.run(
        [sys.executable, "manage.py", *args], env=environment, cwd=ROOT, check=True, capture_output=True, text=True
    )
    return done.stdout


def _search_results(database: Path, turn_id: int) -> list[dict]:
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "select result from chat_toolcall join chat_generation on chat_generation.id = generation_id "
            "where turn_id = ? and name = 'search_help_center'",
            [turn_id],
        ).fetchall()
    return [json.loads(result) for (result,) in rows]


async def test_the_default_set_up_finds_answers_by_meaning_and_follows_edits(tmp_path):
    # The default: the offline model, and the local embedding model. The
    # help center is embedded first, as `reindex_help_center` does.
    database = tmp_path / "db.sqlite3"
    shutil.copyfile(_template(), database)
    local = {"KOOKEE_EMBEDDINGS": "local", "KOOKEE_EMBEDDINGS_MODEL": "multilingual-e5-small-q4"}
    # (On both cores: nothing else runs meanwhile.)
    reindexed = _manage(database, "reindex_help_center", KOOKEE_EMBEDDINGS_THREADS="2", **local)
    assert "embedded with multilingual-e5-small-q4" in reindexed
    env = {**local, "KOOKEE_OFFLINE_TOKENS_PER_SECOND": "500", "KOOKEE_HELP_CENTER_RECHECK_SECONDS": "0.5"}
    with daphne(tmp_path, **env) as (address, _, _):
        cookie = _session_cookie(address)
        async with _connect(address, cookie) as socket:
            visitor = Visitor(socket)
            # None of the article's words: "end our plan", "stop paying".
            asked = "We're not using it anymore and I want to stop paying. How do I end our plan?"
            turn = (await visitor.ask(asked))["turn_id"]
            await visitor.receive_until("turn.ended")
            assert "/help/cancel-subscription/" in visitor.text_of(turn)
            [result] = _search_results(database, turn)
            first = result["articles"][0]
            assert first["url"].startswith("/help/cancel-subscription/") and first["confidence"] == "high"
            assert first["similarity"] > 0 and "by_words_only" not in result

            # Another process renames the article; this one answers with the
            # new title within seconds (its index rechecks, and embeds the
            # changed passages itself: the editing process is gone).
            _manage(
                database,
                "shell",
                "-c",
                "from helpcenter.models import Article; a = Article.objects.get(slug='cancel-subscription'); "
                "a.title = 'Ending your Kookee plan'; a.save()",
                **local,
            )
            deadline = time.monotonic() + 60
            while True:
                turn = (await visitor.ask(asked))["turn_id"]
                await visitor.receive_until("turn.ended")
                [result] = _search_results(database, turn)
                first = result["articles"][0]
                # Renamed, and its passages embedded again (until then it
                # ranks by its words alone: similarity 0).
                if first["title"] == "Ending your Kookee plan" and first["similarity"] > 0:
                    break
                assert time.monotonic() < deadline, result
                await asyncio.sleep(0.5)
            assert first["confidence"] == "high"
            assert "Ending your Kookee plan" in visitor.text_of(turn)


async def test_handshake_is_refused_without_session_or_from_another_origin(offline_server):
    address, _ = offline_server
    with pytest.raises(websockets.InvalidStatus):
        async with _connect(address, cookie=None):
            pass
    cookie = _session_cookie(address)
    with pytest.raises(websockets.InvalidStatus):
        async with _connect(address, cookie, origin="https://evil.example"):
            pass


async def test_a_frame_flood_is_closed_with_a_code_daphne_can_send(offline_server):
    # Imported here: bench/ imports this module's helpers without Django set up.
    from chat.engine.consumers import CLOSE_FLOOD

    address, _ = offline_server
    async with _connect(address, _session_cookie(address)) as socket:
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            for _ in range(100):
                await socket.send(json.dumps({"type": "stop"}))
            while True:
                await socket.recv()
    # Daphne refuses to send 1008 from an application: that was a 1011 crash.
    assert closed.value.rcvd.code == CLOSE_FLOOD


async def test_a_bad_widget_token_is_refused_with_a_code_the_page_can_read(offline_server):
    # Imported here: bench/ imports this module's helpers without Django set up.
    from chat.engine.consumers import CLOSE_REFUSED

    address, _ = offline_server
    # A browser sees a refused handshake only as 1006, like a network
    # failure; the widget must tell "this token is no good" from "try again".
    socket = websockets.connect(f"ws://{address}/ws/chat/?token=forged", origin=f"http://{address}")
    async with socket as connection:
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            await connection.recv()
    assert closed.value.rcvd.code == CLOSE_REFUSED


async def test_stop_closes_the_provider_request(tmp_path):
    provider = ScriptedProvider()
    url = await provider.start()
    provider.queue([text("Streaming"), text(" slowly"), WaitFor(asyncio.Event()), text(" never")])
    try:
        with daphne(tmp_path, OPENAI_BASE_URL=url, OPENAI_API_KEY="test-key") as (address, database, _):
            async with _connect(address, _session_cookie(address)) as socket:
                visitor = Visitor(socket)
                turn_id = (await visitor.ask("hi"))["turn_id"]
                while visitor.text_of(turn_id) != "Streaming slowly":
                    await visitor.receive_until("delta")
                request = provider.requests[0]
                assert not request.hung_up.is_set()
                await socket.send(json.dumps({"type": "stop"}))
                ended = await visitor.receive_until("turn.ended")
                async with asyncio.timeout(2):
                    await request.hung_up.wait()
            assert request.hung_up_early
            assert ended["status"] == "interrupted"
            assert ended["usage"]["estimated"] is True
            assert _stored(database, turn_id) == ("interrupted", 1, "Streaming slowly", 1, 1)
    finally:
        await provider.stop()


async def _wait_for_row(database: Path, turn_id: int, predicate) -> tuple:
    """Polls the database a server process writes, with a bound."""
    async with asyncio.timeout(15):
        while not predicate(row := _stored(database, turn_id)):  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    return row


@pytest.fixture
async def slow_provider():
    provider = ScriptedProvider()
    provider.url = await provider.start()
    provider.queue([text("Before"), text(" the end"), WaitFor(asyncio.Event())])
    yield provider
    await provider.stop()


def _checkpoint_text(database: Path, turn_id: int) -> str:
    with sqlite3.connect(database) as db:
        return db.execute("select assistant_text from chat_turn where id = ?", [turn_id]).fetchone()[0]


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
async def test_a_killed_process_leaves_a_turn_the_next_one_closes_and_bills(tmp_path, slow_provider, server):
    env = {
        "OPENAI_BASE_URL": slow_provider.url,
        "OPENAI_API_KEY": "test-key",
        "KOOKEE_CHECKPOINT_SECONDS": "0.1",
        "KOOKEE_STALE_TURN_SECONDS": "1",
        "KOOKEE_SWEEP_SECONDS": "0.5",
    }
    with daphne(tmp_path, server=server, **env) as (address, database, process):
        async with _connect(address, _session_cookie(address)) as socket:
            visitor = Visitor(socket)
            turn_id = (await visitor.ask("hi"))["turn_id"]
            while visitor.text_of(turn_id) != "Before the end":
                await visitor.receive_until("delta")
            await _wait_for_row(database, turn_id, lambda row: row[2] == "Before the end")
            process.kill()  # SIGKILL: no finally runs
            process.wait()
    assert _stored(database, turn_id) == ("streaming", 0, "Before the end", 0, 0)

    # Restarted at night: nobody visits. The process reconciles on its own.
    with daphne(tmp_path, server=server, **env) as (address, database, _):
        row = await _wait_for_row(database, turn_id, lambda row: row[0] != "streaming")
    assert row == ("interrupted", 1, "Before the end", 1, 1)
    with sqlite3.connect(database) as db:
        estimated, reason, error = db.execute(
            "select l.estimated, t.stop_reason, t.error from billing_ledgerentry l join chat_turn t on t.id = l.turn_id"
        ).fetchone()
    assert (estimated, reason, error) == (1, "process_lost", "")


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
async def test_sigterm_stops_saves_and_bills_running_turns(tmp_path, slow_provider, server):
    env = {"OPENAI_BASE_URL": slow_provider.url, "OPENAI_API_KEY": "test-key"}
    with daphne(tmp_path, server=server, **env) as (address, database, process):
        async with _connect(address, _session_cookie(address)) as socket:
            visitor = Visitor(socket)
            turn_id = (await visitor.ask("hi"))["turn_id"]
            while visitor.text_of(turn_id) != "Before the end":
                await visitor.receive_until("delta")
            process.terminate()  # SIGTERM: a normal deploy
            # Uvicorn, once shut down gracefully, re-raises the signal it caught.
            assert await asyncio.to_thread(process.wait, 20) == {"daphne": 0, "uvicorn": -15}[server]
            try:
                while True:
                    await visitor.receive()
            except websockets.ConnectionClosed:
                pass
    assert _stored(database, turn_id) == ("interrupted", 1, visitor.text_of(turn_id), 1, 1)
    assert slow_provider.requests[0].hung_up_early


async def test_an_idle_socket_outlives_the_redis_layers_blocking_pop(tmp_path):
    """With REDIS_URL, each consumer listens on the channel layer with a
    5 s blocking pop; a read timeout no longer than it killed idle sockets."""
    redis_url = "redis://127.0.0.1:6379/14"
    if not _listening(6379):
        if os.environ.get("CI"):
            pytest.fail("CI runs with Redis on 127.0.0.1:6379")
        pytest.skip("no Redis on 127.0.0.1:6379")
    with daphne(tmp_path, REDIS_URL=redis_url, KOOKEE_OFFLINE_FIRST_TOKEN_MS="50") as (address, database, _):
        cookie = _session_cookie(address)
        async with _connect(address, cookie) as socket:
            visitor = Visitor(socket)
            await asyncio.sleep(7)  # idle past the pop and redis-py's default read timeout
            turn = (await visitor.ask("hi"))["turn_id"]
            ended = await visitor.receive_until("turn.ended")
            assert ended["status"] == "completed"
            assert _stored(database, turn)[0] == "completed"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_many_page_loads_at_once_on_postgresql_stay_within_its_connections(tmp_path):
    """Under ASGI each request's sync code runs in a thread of its own; with
    persistent connections, 150 page loads at once opened 150 connections,
    past PostgreSQL's 100: "too many clients", HTTP 500. The pool bounds them."""
    if not _listening(5432):
        if os.environ.get("CI"):
            pytest.fail("CI runs with PostgreSQL on 127.0.0.1:5432")
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    import psycopg

    name = f"kookee_pool_{os.getpid()}"
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"postgres://postgres@127.0.0.1:5432/{name}"
        with daphne(tmp_path, DATABASE_URL=url) as (address, _, _):
            with concurrent.futures.ThreadPoolExecutor(150) as threads:
                statuses = list(await asyncio.to_thread(threads.map, _status, [address] * 150))
            assert statuses == [200] * 150
    finally:
        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _status(address: str) -> int | str:
    try:
        with urllib.request.urlopen(f"http://{address}/", timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_make_run_logs_no_query_string(tmp_path):
    """`make run`'s server, as the Makefile starts it: a visitor's search on
    /help/?q=... reaches no log line."""
    from tests.servers import ROOT, free_port

    line = re.search(r"^SERVE_daphne = (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    port = free_port()
    command = line.replace("$(VENV)/bin/daphne", f"{sys.executable} -m daphne").replace("$(HOST)", "127.0.0.1")
    database = tmp_path / "db.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "DJANGO_DEBUG": "true"}
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env, check=True, cwd=ROOT)
    output = tmp_path / "out.log"
    with output.open("w") as out:
        server = subprocess.Popen(
            command.replace("$(PORT)", str(port)).split(), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/help/?q=my+secret+question") as response:
                        assert response.status == 200
                    break
                except OSError:
                    assert time.monotonic() < deadline and server.poll() is None, output.read_text()
                    time.sleep(0.2)
        finally:
            server.terminate()
            server.wait(30)
    assert "secret" not in output.read_text()

"""Actions checked from outside, through the contract only: a real daphne
process, the actions imported and their secret set with the management
commands, a WebSocket client with a session from GET /, a visitor proved
by a token the customer's backend signed, the scripted model, and the
customer's API (the shop of tests/shop_api.py) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import websockets

from tests.e2e.conftest import copy_database
from tests.e2e.shop import API_SECRET, DOCUMENT, ENV, running_shop, token_for, tool_result
from tests.provider import answer, tool_round
from tests.servers import ROOT, daphne

pytestmark = pytest.mark.slow

CANCEL = ("c1", "cancelOrder", {"order_id": "A-1001", "reason": "ordered twice"})


@pytest.fixture(scope="module")
def shop():
    with running_shop() as api:
        yield api


@pytest.fixture(autouse=True)
def fresh_shop(shop):
    shop.requests.clear()
    yield


def manage(database: Path, *args: str, stdin: str = "") -> str:
    """A management command against the served app's database, as an operator runs it."""
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "OPENAI_API_KEY": ""}
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        input=stdin,
        env=environment,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


@pytest.fixture(scope="module")
def imported() -> list[Path]:
    """The first server's database just after the commands: the module's
    next server starts from a copy of it (running them again took three seconds)."""
    return []


def serve(tmp_path: Path, provider_thread, shop, imported: list[Path], **env: str) -> Iterator[tuple[str, Path]]:
    if imported:
        copy_database(imported[0], tmp_path / "db.sqlite3")
    environment = {
        "OPENAI_BASE_URL": provider_thread.url,
        "OPENAI_API_KEY": "test-key",
        "KOOKEE_PROVIDER_RETRIES": "0",
        **ENV,
        **env,
    }
    with daphne(tmp_path, **environment) as (address, database, _):
        if not imported:
            said = manage(database, "import_actions", str(DOCUMENT), "--base-url", shop.url)
            assert "added: cancelOrder" in said and "shopKey" in said  # its credential is still to set
            # printf SECRET | manage.py set_action_secret shopKey
            assert "Credential shopKey set." in manage(database, "set_action_secret", "shopKey", stdin=API_SECRET)
            snapshot = tmp_path / "imported" / "db.sqlite3"
            copy_database(database, snapshot)
            imported.append(snapshot)
        yield address, database


@pytest.fixture
def server(tmp_path, provider_thread, shop, imported) -> Iterator[tuple[str, Path]]:
    yield from serve(tmp_path, provider_thread, shop, imported)


@pytest.fixture
def hasty_server(tmp_path, provider_thread, shop, imported) -> Iterator[tuple[str, Path]]:
    """Half a second to answer an action's question."""
    yield from serve(tmp_path, provider_thread, shop, imported, KOOKEE_ACTION_CONFIRM_SECONDS="0.5")


def session_cookie(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/") as response:
        cookies = response.headers.get_all("Set-Cookie")
    [session] = [cookie.split(";")[0] for cookie in cookies if cookie.startswith("sessionid=")]
    return session


class Tab:
    """A visitor's tab, speaking only the contract."""

    def __init__(self, socket) -> None:
        self.socket = socket
        self.frames: list[dict] = []

    async def send(self, frame: dict) -> None:
        await self.socket.send(json.dumps(frame))

    async def receive_until(self, frame_type: str) -> dict:
        async with asyncio.timeout(20):
            while True:
                frame = json.loads(await self.socket.recv())
                self.frames.append(frame)
                if frame["type"] == frame_type:
                    return frame

    def of(self, frame_type: str) -> list[dict]:
        return [frame for frame in self.frames if frame["type"] == frame_type]


@asynccontextmanager
async def signed_in(address: str, sub: str = "user-42") -> AsyncIterator[Tab]:
    """A tab of a new visitor (a session from GET /), proved to be the customer's user `sub`."""
    cookie = await asyncio.to_thread(session_cookie, address)
    async with websockets.connect(
        f"ws://{address}/ws/chat/", additional_headers={"Cookie": cookie}, origin=f"http://{address}"
    ) as socket:
        tab = Tab(socket)
        await tab.send({"type": "identify", "token": token_for(sub, "Ana")})
        identified = await tab.receive_until("identified")
        assert (identified["id"], identified["name"]) == (sub, "Ana")
        yield tab


def outcomes(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        return [outcome for (outcome,) in db.execute("select outcome from chat_actioncall order by id")]


async def test_a_change_runs_after_the_visitors_yes(server, provider, shop):
    address, database = server
    async with signed_in(address) as tab:
        asked_before = len(provider.requests)
        provider.queue(tool_round([CANCEL]), answer("Your order A-1001 is cancelled."))
        await tab.send({"type": "message", "text": "Cancel my order A-1001, I ordered twice"})
        turn_id = (await tab.receive_until("turn.started"))["turn_id"]

        confirm = await tab.receive_until("action.confirm")
        assert confirm["turn_id"] == turn_id and isinstance(confirm["call_id"], str) and confirm["call_id"]
        assert (confirm["action"], confirm["title"]) == ("cancelOrder", "Cancelling your order")
        # As the visitor reads them: never the customer id, which the verified identity fills.
        assert confirm["arguments"] == {"order_id": "A-1001", "reason": "ordered twice"}
        await asyncio.sleep(0.2)
        assert shop.requests == []  # nothing before the yes

        await tab.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
        ended = await tab.receive_until("turn.ended")
        assert (ended["turn_id"], ended["status"], ended["generations"]) == (turn_id, "completed", 2)
        assert "".join(frame["text"] for frame in tab.of("delta")) == "Your order A-1001 is cancelled."
        assert [(f["name"], f["status"], f.get("title")) for f in tab.of("tool")] == [
            ("cancelOrder", "started", "Cancelling your order"),
            ("cancelOrder", "finished", "Cancelling your order"),
        ]

        # The shop saw the verified visitor's id and Kookee's bearer secret.
        [seen] = shop.requests
        assert (seen.method, seen.path) == ("POST", "/orders/A-1001/cancel")
        assert seen.body == {"reason": "ordered twice", "customer_id": "user-42"}
        assert seen.headers["authorization"] == f"Bearer {API_SECRET}"
        # The model was offered the action without the identity's parameter, and
        # its second request carried the shaped result; never the id, nor the secret.
        first, second = provider.requests[asked_before:]
        [offered] = [t for t in first.body["tools"] if t["function"]["name"] == "cancelOrder"]
        assert "customer_id" not in json.dumps(offered)
        assert tool_result(second) == {"status": 200, "result": {"id": "A-1001", "status": "cancelled"}}
        said = json.dumps([first.body, second.body])
        assert "user-42" not in said and API_SECRET not in said
        assert API_SECRET not in json.dumps(tab.frames)
        assert outcomes(database) == ["ok"]

        # The question is over: answering it again changes nothing.
        await tab.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
        assert (await tab.receive_until("error"))["code"] == "not_found"
        assert len(shop.requests) == 1


async def test_no_answer_in_time_is_a_no(hasty_server, provider, shop):
    address, database = hasty_server
    async with signed_in(address) as tab:
        asked_before = len(provider.requests)
        provider.queue(tool_round([CANCEL]), answer("You did not confirm, so nothing changed."))
        await tab.send({"type": "message", "text": "Cancel my order A-1001"})
        confirm = await tab.receive_until("action.confirm")
        ended = await tab.receive_until("turn.ended")  # no answer from the visitor
        assert (ended["status"], ended["generations"]) == ("completed", 2)
        assert shop.requests == []
        assert tool_result(provider.requests[asked_before + 1])["declined"] is True
        assert outcomes(database) == ["declined"]

        # A yes after the time ran out is an answer to a question that is over.
        await tab.send({"type": "action.answer", "call_id": confirm["call_id"], "approve": True})
        assert (await tab.receive_until("error"))["code"] == "not_found"
        await asyncio.sleep(0.2)
        assert shop.requests == []

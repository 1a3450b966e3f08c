"""The team's guidance, checked from outside: two running server processes
on one database, `manage.py set_guidance FILE` run beside them as an
operator would, and the next message's model request, on either process,
carries it; no restart."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import websockets

from tests.provider import answer
from tests.servers import ROOT, daphne

pytestmark = pytest.mark.slow

GUIDANCE = "Call paid plans memberships.\nAsk for the order number before looking an order up."


def set_guidance(database: Path, path: Path) -> str:
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "OPENAI_API_KEY": ""}
    done = subprocess.run(
        [sys.executable, "manage.py", "set_guidance", str(path)],
        env=environment,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def session_cookie(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/") as response:
        [cookie] = [c.split(";")[0] for c in response.headers.get_all("Set-Cookie") if c.startswith("sessionid=")]
    return cookie


async def ask(address: str, text: str) -> dict:
    """One visitor's question on the server at `address`, through the contract: its turn.ended."""
    cookie = await asyncio.to_thread(session_cookie, address)
    async with websockets.connect(
        f"ws://{address}/ws/chat/", additional_headers={"Cookie": cookie}, origin=f"http://{address}"
    ) as socket:
        await socket.send(json.dumps({"type": "message", "text": text}))
        async with asyncio.timeout(20):
            while True:
                frame = json.loads(await socket.recv())
                if frame["type"] == "turn.ended":
                    return frame


async def test_set_guidance_reaches_the_next_message_on_every_process(tmp_path, provider):
    env = {"OPENAI_BASE_URL": provider.url, "OPENAI_API_KEY": "test-key", "KOOKEE_PROVIDER_RETRIES": "0"}
    with daphne(tmp_path, **env) as (first, database, _), daphne(tmp_path, **env) as (second, same, _):
        assert same == database  # two processes, one database
        provider.queue(answer("Hi."), answer("Hi."), answer("Hi."))
        await ask(first, "hello")
        assert "<guidance>" not in provider.requests[-1].body["messages"][0]["content"]

        path = tmp_path / "guidance.md"
        path.write_text(GUIDANCE, encoding="utf-8")
        assert "live from the next message on" in set_guidance(database, path)

        for address in (first, second):
            ended = await ask(address, "hello again")
            assert ended["status"] == "completed"
            system = provider.requests[-1].body["messages"][0]["content"]
            assert GUIDANCE in system, address
            assert system.index("Answer questions about Kookee") < system.index(GUIDANCE)

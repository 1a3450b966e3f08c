"""The app plus a bare relay and a pass-through, for the benches:
`bench.relay:application`.

/ws/bare/ is a Channels consumer that sends, for each question, the frames
the real app sent for it (recorded from one visitor, bench/harness.py), at
the pace they came, with no model, no search and no database. Serving the
same visitors from it and from /ws/chat/ in the same server process gives
the floor: what WebSocket framing, Twisted (or uvicorn) and Channels cost by
themselves.

/ws/pass/ passes the model through to the visitor and does nothing else:
the app's own round loop and provider module (the official client, reads
paced to the delta window) stream each question's two rounds, and each
delta goes out as the app's `delta` frame. No database (nothing stored, no
limits, nothing billed), no hub, and no search: the search round is answered
with what the real search answered for that question, from memory. It is
what any app streaming this model through the official client pays before
it stores, bills or searches anything.

Everything else is served by the app itself.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from pathlib import Path

from channels.generic.websocket import AsyncWebsocketConsumer

from kookee.asgi import application as app  # sets Django up: first

# isort: split
from django.conf import settings

from chat.engine import fastjson, frames, prompt, provider
from chat.engine.rounds import Round, RoundLoop, Tool
from chat.engine.tools import TOOLS
from helpcenter import search

# Recorded before the benches start this server (bench/harness.py).
_scripts = Path(os.environ.get("BENCH_RELAY_SCRIPTS", "/nonexistent"))
SCRIPTS: dict[str, list] = json.loads(_scripts.read_text()) if _scripts.exists() else {}
MARKER = re.compile(r"\s+k\d+x\d+$")  # the load client's per-turn tag
turn_ids = itertools.count(1)


class BareRelay(AsyncWebsocketConsumer):
    task: asyncio.Task | None = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = fastjson.loads(text_data)
        if frame.get("type") == "message":
            script = SCRIPTS[MARKER.sub("", frame["text"])]
            self.task = asyncio.create_task(self.play(script))

    async def play(self, script: list) -> None:
        turn_id = next(turn_ids)
        for delay, frame in script:
            await asyncio.sleep(delay)
            await self.send(text_data=fastjson.dumps({**frame, "turn_id": turn_id}))

    async def disconnect(self, code: int) -> None:
        if self.task:
            self.task.cancel()


class PassThrough(AsyncWebsocketConsumer):
    task: asyncio.Task | None = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = fastjson.loads(text_data)
        if frame.get("type") == "message" and (self.task is None or self.task.done()):
            self.task = asyncio.create_task(self.answer(frame["text"]))

    async def answer(self, question: str) -> None:
        turn_id = next(turn_ids)
        loop = RoundLoop(
            provider.open_stream,
            _tools(),
            _Frames(self, turn_id),
            settings.KOOKEE_MAX_ROUNDS,
            window=settings.KOOKEE_DELTA_WINDOW_MS / 1000,
        )
        await self.send(text_data=fastjson.dumps(frames.turn_started(turn_id)))
        outcome = await loop.run(prompt.messages(await _system(), [], question))
        usage = frames.usage(0, 0, estimated=True)
        ended = frames.turn_ended(turn_id, outcome.status, len(loop.rounds), usage, loop.text, [])
        await self.send(text_data=fastjson.dumps(ended))

    async def disconnect(self, code: int) -> None:
        if self.task:
            self.task.cancel()


class _Frames:
    """The round loop's sink: each delta and tool step as the app frames it,
    straight to this socket."""

    def __init__(self, consumer: PassThrough, turn_id: int) -> None:
        self.consumer = consumer
        self.turn_id = turn_id
        self.seq = 0

    async def delta(self, text: str) -> None:
        self.seq += 1
        await self.consumer.send(text_data=fastjson.dumps({**frames.delta(self.turn_id, text), "seq": self.seq}))

    async def tool(self, name: str, status: str) -> None:
        self.seq += 1
        frame = {**frames.tool(self.turn_id, name, status), "seq": self.seq}
        await self.consumer.send(text_data=fastjson.dumps(frame))

    async def round_ended(self, rnd: Round, next_prompt_tokens: int) -> None:
        pass


_answers: dict[str, object] = {}
_prompt: list[str] = []


async def _system() -> str:
    """The app's system prompt (it names the help center's articles), read once."""
    if not _prompt:
        _prompt.append(await asyncio.to_thread(prompt.system_prompt))
    return _prompt[0]


def _tools() -> list[Tool]:
    """The app's tools, the search answered from memory: what the real search
    answered for the question (looked up once per question, before the
    measured window, as every visitor asks every question in turn)."""

    async def answer(query: str, language: str = "") -> object:
        query = MARKER.sub("", query)
        if query not in _answers:
            _answers[query] = await asyncio.to_thread(search.search_sync, query)
        return _answers[query]

    return [Tool(t.name, t.description, t.parameters, answer) if t.name == "search_help_center" else t for t in TOOLS]


bare = BareRelay.as_asgi()
passing = PassThrough.as_asgi()


async def application(scope, receive, send):
    if scope["type"] == "websocket" and scope["path"] == "/ws/bare/":
        return await bare(scope, receive, send)
    if scope["type"] == "websocket" and scope["path"] == "/ws/pass/":
        return await passing(scope, receive, send)
    return await app(scope, receive, send)

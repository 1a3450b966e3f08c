"""The app plus a bare relay, for the benches: `bench.relay:application`.

/ws/bare/ is a Channels consumer that sends, for each question, the frames
the real app sent for it (recorded from one visitor, bench/harness.py), at
the pace they came, with no model, no search and no database. Serving the
same visitors from it and from /ws/chat/ in the same server process gives
the floor: what WebSocket framing, Twisted (or uvicorn) and Channels cost by
themselves. Everything else is served by the app itself.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from pathlib import Path

from channels.generic.websocket import AsyncWebsocketConsumer

from chat.engine import fastjson
from kookee.asgi import application as app

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


bare = BareRelay.as_asgi()


async def application(scope, receive, send):
    if scope["type"] == "websocket" and scope["path"] == "/ws/bare/":
        return await bare(scope, receive, send)
    return await app(scope, receive, send)

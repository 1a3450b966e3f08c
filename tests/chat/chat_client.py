"""A test client for /ws/chat/: the real ASGI application (origin check,
sessions, consumer) through Channels' WebsocketCommunicator, plus the
contract's invariants checked against the database."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore

from billing.models import LedgerEntry
from chat.models import Turn
from kookee.asgi import application

ORIGIN = b"http://localhost:8000"
# The Host a browser sends with it: the socket must come from the site itself (chat/visitors/origins.py).
HOST = b"localhost:8000"


@database_sync_to_async
def new_session_key() -> str:
    session = SessionStore()
    session.create()
    return session.session_key


class ChatClient:
    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[dict[str, Any]] = []

    @classmethod
    async def connect(
        cls, session_key: str | None = None, origin: bytes = ORIGIN, language: str = "", path: str = "/ws/chat/"
    ) -> ChatClient:
        key = session_key or await new_session_key()
        headers = [(b"origin", origin), (b"host", HOST), (b"cookie", f"sessionid={key}".encode())]
        if language:
            headers.append((b"accept-language", language.encode()))
        client = cls(WebsocketCommunicator(application, path, headers=headers))
        client.connected, client.close_code = await client.communicator.connect()
        return client

    async def refusal(self, timeout: float = 2) -> int:
        """The close code the server refused this connection with: at the
        handshake (a foreign origin), or right after accepting it, where the
        browser can see the code (a session or token that is no good)."""
        if not self.connected:
            return self.close_code
        message = await self.communicator.receive_output(timeout)
        assert message["type"] == "websocket.close", message
        return message["code"]

    async def send(self, frame: dict[str, Any] | str) -> None:
        await self.communicator.send_to(text_data=frame if isinstance(frame, str) else json.dumps(frame))

    async def receive(self, timeout: float = 10) -> dict[str, Any]:
        frame = json.loads(await self.communicator.receive_from(timeout=timeout))
        self.frames.append(frame)
        return frame

    async def receive_until(self, frame_type: str, timeout: float = 10, **fields: Any) -> dict[str, Any]:
        while True:
            frame = await self.receive(timeout)
            if frame["type"] == frame_type and all(frame.get(k) == v for k, v in fields.items()):
                return frame

    async def ask(self, text: str) -> int:
        await self.send({"type": "message", "text": text})
        return (await self.receive_until("turn.started"))["turn_id"]

    async def finish(self, turn_id: int, timeout: float = 10) -> dict[str, Any]:
        """Reads to the turn's end, asserts silence after it, checks invariants."""
        ended = await self.receive_until("turn.ended", timeout, turn_id=turn_id)
        assert await self.communicator.receive_nothing(timeout=0.2)
        await check_turn(self.frames, turn_id)
        return ended

    async def receive_text(self, turn_id: int, wanted: str, timeout: float = 10) -> dict[str, Any]:
        """Reads deltas until the turn shows `wanted`, however many frames
        carry it (text that streams within a window goes as one delta)."""
        while True:
            frame = await self.receive_until("delta", timeout, turn_id=turn_id)
            if self.text_of(turn_id) == wanted:
                return frame

    def text_of(self, turn_id: int) -> str:
        return "".join(f["text"] for f in self.frames if f["type"] == "delta" and f["turn_id"] == turn_id)

    async def close(self) -> None:
        # A receive that timed out has cancelled the app already: disconnecting
        # it again would raise CancelledError and skip the database teardown.
        if not self.communicator.future.done():
            await self.communicator.disconnect()


@database_sync_to_async
def check_turn(frames: list[dict[str, Any]], turn_id: int) -> Turn:
    """The contract's invariants for one turn, whatever its ending."""
    mine = [f for f in frames if f.get("turn_id") == turn_id]
    ended = [f for f in mine if f["type"] == "turn.ended"]
    assert len(ended) == 1, "exactly one turn.ended"
    assert mine[-1]["type"] == "turn.ended", "no frame of the turn after turn.ended"
    ended = ended[0]
    turn = Turn.objects.get(pk=turn_id)
    # After a turn.resume (a tab that came in mid-turn), its text, then the
    # frames after its seq; else every frame from turn.started, seq 1 on.
    resumes = [i for i, f in enumerate(mine) if f["type"] == "turn.resume"]
    if resumes:
        resume = mine[resumes[-1]]
        shown, seq, later = resume["text"], resume["seq"], mine[resumes[-1] + 1 :]
        assert [f["type"] for f in mine].count("turn.started") <= 1
    else:
        shown, seq, later = "", 0, mine
        assert [f["type"] for f in mine].count("turn.started") == 1
    numbered = [f for f in later if f["type"] in ("delta", "tool")]
    assert [f["seq"] for f in numbered] == list(range(seq + 1, seq + 1 + len(numbered))), "seq: no gap, no repeat"
    deltas = shown + "".join(f["text"] for f in numbered if f["type"] == "delta")
    assert turn.assistant_text == deltas, "stored text equals the deltas sent"
    assert turn.status == ended["status"]
    assert turn.interrupted == (ended["status"] == "interrupted")
    assert ended["generations"] == turn.generations.count()
    entries = list(LedgerEntry.objects.filter(turn=turn))
    assert len(entries) == 1, "exactly one ledger entry"
    entry = entries[0]
    assert ended["usage"] == {
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "estimated": entry.estimated,
    }
    rounds = list(turn.generations.values_list("round", flat=True))
    assert rounds == list(range(1, len(rounds) + 1))
    return turn

"""Thousands of random frames at one connection: each bad one is answered
with exactly one `error` frame, `stop` with silence, a valid message with a
whole turn; afterwards the same socket still runs a normal turn. (What a tab may send
is checked by chat/engine/client_frames.py.)"""

import json
import random

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings

from chat.models import Turn
from tests.chat.chat_client import ChatClient, check_turn
from tests.provider import answer

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 20240603
FRAMES = 2500

# Characters that tend to break things: NUL and other controls, whitespace
# that str.strip() removes, lone surrogates, non-BMP, quotes and escapes.
AWKWARD = ["\x00", "\x01", "\x1f", "\x7f", "\t", "\n", "\r", "\u2028", "\u3000", "\ufeff", "\ufffd"]
AWKWARD += ["\ud800", "\udfff", "\U0001f600", "\U0010ffff", '"', "\\", "{", "}", "[", "]", "é", "中", "\u202e"]


def random_text(rng: random.Random, max_length: int = 30) -> str:
    length = rng.choice([0, 1, 2, 5, max_length, rng.randint(0, max_length)])
    pieces = []
    for _ in range(length):
        kind = rng.random()
        if kind < 0.5:
            pieces.append(chr(rng.randint(0x20, 0x7E)))
        elif kind < 0.8:
            pieces.append(rng.choice(AWKWARD))
        else:
            pieces.append(chr(rng.randint(0, 0x10FFFF)))
    return "".join(pieces)


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**63, -(2**64) - 1, 10**40, rng.randint(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, 1e-308, float("nan"), float("inf"), float("-inf")])
    if kind == 4:
        return random_text(rng)
    if kind == 5:
        return rng.choice(["x", "\ud800", "\x00"]) * rng.choice([4001, 20_000])  # huge strings
    if kind in (6, 7):
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_text(rng, 8): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def random_frame(rng: random.Random) -> str | bytes:
    kind = rng.random()
    if kind < 0.08:
        return rng.randbytes(rng.choice([0, 1, 7, 300]))
    if kind < 0.2:
        return random_text(rng, 60)
    if kind < 0.23:
        return "1" * 5000  # an integer too long for Python to convert
    if kind < 0.45:
        return _dumps(rng, random_json(rng))
    if kind < 0.65:
        frame = {"type": random_json(rng)} if rng.random() < 0.5 else {"type": random_text(rng, 12)}
        return _dumps(rng, {**frame, "text": random_json(rng)})
    if kind < 0.8:
        extra = {random_text(rng, 6): random_json(rng) for _ in range(rng.randint(0, 2))}
        return _dumps(rng, {**extra, "type": "stop"})
    frame = {"type": "message"}
    if rng.random() < 0.9:
        frame["text"] = _message_text(rng)
    return _dumps(rng, frame)


def _message_text(rng: random.Random):
    kind = rng.random()
    if kind < 0.05:
        return random_text(rng, 40) + "?"  # a valid question, now and then
    if kind < 0.4:
        return rng.choice(["", " ", "\t\n", "\u3000", "\u2028"]) * rng.randint(1, 3)
    if kind < 0.6:
        return "x" * (django_settings.KOOKEE_MAX_MESSAGE_CHARS + rng.choice([1, 10_000]))
    if kind < 0.8:
        return random_text(rng)  # empty or whitespace: refused; anything else: a turn
    return random_json(rng)


def _dumps(rng: random.Random, value) -> str:
    # Both escaped and raw unicode, the way different clients send it.
    return json.dumps(value, ensure_ascii=rng.random() < 0.5)


def expected_reply(raw: str | bytes) -> str:
    """What the contract promises for a frame: "error", "nothing" (a stop
    while idle) or "turn"."""
    if isinstance(raw, bytes):
        return "error"
    try:
        frame = json.loads(raw)
    except ValueError:
        return "error"
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return "error"
    if frame["type"] == "stop":
        return "nothing"
    text = frame.get("text")
    if frame["type"] != "message" or not isinstance(text, str) or not text.strip():
        return "error"
    return "error" if len(text) > django_settings.KOOKEE_MAX_MESSAGE_CHARS else "turn"


async def send_raw(chat: ChatClient, raw: str | bytes) -> None:
    # send_to() refuses empty frames; a client can send them.
    key = "bytes" if isinstance(raw, bytes) else "text"
    await chat.communicator.send_input({"type": "websocket.receive", key: raw})


async def test_random_frames_never_break_the_connection(use_provider, settings):
    settings.KOOKEE_FRAME_BURST = 10**9
    settings.KOOKEE_FRAME_BYTES_BURST = 10**12  # huge frames, thousands of them: limits are tested elsewhere
    settings.KOOKEE_TURNS_PER_MINUTE = 10**6
    settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS = 10**6
    settings.KOOKEE_PROVIDER_RETRIES = 0
    rng = random.Random(SEED)
    chat = await ChatClient.connect()
    assert chat.connected
    seen = {"error": 0, "nothing": 0, "turn": 0}
    codes = set()
    try:
        for number in range(FRAMES):
            raw = random_frame(rng)
            expected = expected_reply(raw)
            where = f"frame {number} (seed {SEED}): {raw[:200]!r}"
            seen[expected] += 1
            if expected == "turn":
                use_provider.queue(answer("ok"))
            await send_raw(chat, raw)
            if expected == "error":
                reply = await chat.receive()
                assert reply["type"] == "error", where
                assert reply["message"], where
                codes.add(reply["code"])
            elif expected == "turn":
                started = await chat.receive()
                assert started["type"] == "turn.started", where
                ended = await chat.receive_until("turn.ended", turn_id=started["turn_id"])
                assert ended["status"] == "completed", where
                await check_turn(chat.frames, started["turn_id"])
        # Every frame got exactly its replies: nothing is left over.
        assert await chat.communicator.receive_nothing(timeout=0.2)

        use_provider.queue(answer("Hello!"))
        turn_id = await chat.ask("hi")
        ended = await chat.finish(turn_id)
        assert ended["status"] == "completed"
        assert chat.text_of(turn_id) == "Hello!"
    finally:
        await chat.close()

    assert await database_sync_to_async(Turn.objects.count)() == seen["turn"] + 1
    assert len(use_provider.requests) == seen["turn"] + 1
    # The generator reached every kind of bad frame, idle stops and real turns.
    assert codes == {"bad_frame", "bad_json", "unknown_type", "bad_text", "too_long"}
    assert seen["nothing"] >= 100
    assert seen["turn"] >= 5


async def test_deeply_nested_json_is_an_error_frame(use_provider):
    chat = await ChatClient.connect()
    try:
        # json.loads raises RecursionError, not ValueError, past ~1000 levels.
        await chat.send("[" * 100_000)  # 100 kB: a small frame for any server
        reply = await chat.receive(timeout=2)
        assert (reply["type"], reply["code"]) == ("error", "bad_json")
        use_provider.queue(answer("Still here."))
        assert (await chat.finish(await chat.ask("hi")))["status"] == "completed"
    finally:
        await chat.close()

"""The `feedback` frame: a visitor rates their own finished answers
(chat/support/feedback.py)."""

import asyncio

import pytest
from channels.db import database_sync_to_async

from chat.models import Feedback
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer, text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def chat(use_provider):
    client = await ChatClient.connect()
    yield client
    await client.close()


async def answered(chat, provider, question="How do I add a board?"):
    provider.queue(answer("Open Boards and press New."))
    turn_id = await chat.ask(question)
    await chat.finish(turn_id)
    return turn_id


def stored():
    return database_sync_to_async(lambda: list(Feedback.objects.values_list("turn_id", "rating", "comment")))()


async def test_a_visitor_rates_their_answer(chat, use_provider):
    turn_id = await answered(chat, use_provider)

    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "up"})

    assert await chat.receive() == {"type": "feedback.saved", "turn_id": turn_id}
    assert await stored() == [(turn_id, "up", "")]


async def test_rating_again_replaces_the_rating(chat, use_provider):
    turn_id = await answered(chat, use_provider)
    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "up"})
    await chat.receive_until("feedback.saved")

    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "down", "comment": "  Not what I asked.  "})

    assert await chat.receive() == {"type": "feedback.saved", "turn_id": turn_id}
    assert await stored() == [(turn_id, "down", "Not what I asked.")]


async def test_another_visitors_answer_is_not_found(chat, use_provider):
    theirs = await answered(chat, use_provider)
    other = await ChatClient.connect()
    try:
        await other.send({"type": "feedback", "turn_id": theirs, "rating": "down", "comment": "spite"})
        frame = await other.receive()
    finally:
        await other.close()

    assert (frame["type"], frame["code"], frame["turn_id"]) == ("error", "not_found", theirs)
    assert await stored() == []


async def test_an_unfinished_answer_is_not_found(chat, use_provider):
    use_provider.queue([text("Working on it"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("hi")
    await chat.receive_until("delta", turn_id=turn_id)

    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "up"})
    frame = await chat.receive_until("error")

    assert frame["code"] == "not_found"
    await chat.send({"type": "stop"})
    await chat.finish(turn_id)
    assert await stored() == []
    # Once finished, it can be rated.
    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "down"})
    assert (await chat.receive())["type"] == "feedback.saved"


async def test_an_unknown_turn_is_not_found(chat, use_provider):
    await chat.send({"type": "feedback", "turn_id": 999_999, "rating": "up"})

    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "not_found")


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"rating": "up"},
        {"turn_id": "1", "rating": "up"},
        {"turn_id": True, "rating": "up"},
        {"turn_id": 0, "rating": "up"},
        {"turn_id": 1.5, "rating": "up"},
        {"turn_id": None, "rating": "up"},
        {"turn_id": -3, "rating": "up"},
        {"turn_id": "TURN"},
        {"turn_id": "TURN", "rating": "meh"},
        {"turn_id": "TURN", "rating": "UP"},
        {"turn_id": "TURN", "rating": ["up"]},
        {"turn_id": "TURN", "rating": "down", "comment": 42},
        {"turn_id": "TURN", "rating": "down", "comment": {"text": "x"}},
        {"turn_id": "TURN", "rating": "down", "comment": "x" * 1001},
    ],
)
async def test_a_malformed_rating_is_refused_and_changes_nothing(chat, use_provider, fields):
    turn_id = await answered(chat, use_provider)
    if fields.get("turn_id") == "TURN":
        fields = {**fields, "turn_id": turn_id}

    await chat.send({"type": "feedback", **fields})

    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "bad_feedback")
    assert frame["message"]
    assert await stored() == []


async def test_a_long_comment_up_to_the_limit_is_kept(chat, use_provider):
    turn_id = await answered(chat, use_provider)

    await chat.send({"type": "feedback", "turn_id": turn_id, "rating": "down", "comment": "x" * 1000})

    assert (await chat.receive())["type"] == "feedback.saved"
    assert (await stored())[0][2] == "x" * 1000


async def test_history_shows_the_visitors_ratings(chat, use_provider):
    rated = await answered(chat, use_provider)
    unrated = await answered(chat, use_provider, "And a roadmap?")
    await chat.send({"type": "feedback", "turn_id": rated, "rating": "down"})
    await chat.receive_until("feedback.saved")

    await chat.send({"type": "history"})
    history = await chat.receive_until("history")

    assert {t["turn_id"]: t["rating"] for t in history["turns"]} == {rated: "down", unrated: None}

"""Nothing lost: checkpoints while a turn runs, the sweeper that closes turns
a dead process left, and endings where the database or the socket fails."""

import asyncio
import io
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.utils import timezone

from billing.models import LedgerEntry
from chat.engine import records, sweeper
from chat.models import Conversation, Generation, ToolCall, Turn
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer, finish, text, tool_fragment, usage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def chat(use_provider):
    client = await ChatClient.connect()
    yield client
    await client.close()


def get_turn(turn_id):
    return database_sync_to_async(Turn.objects.get)(pk=turn_id)


async def eventually(check, timeout=5):
    """Polls a database condition with a bound (there is no event to wait on)."""
    async with asyncio.timeout(timeout):
        while not await database_sync_to_async(check)():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


# --- checkpoints -------------------------------------------------------------------------


async def test_a_running_turn_is_checkpointed(chat, use_provider, settings):
    settings.KOOKEE_CHECKPOINT_SECONDS = 0.05
    use_provider.queue([text("Saved"), text(" so far"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("hi")
    while chat.text_of(turn_id) != "Saved so far":
        await chat.receive_until("delta", turn_id=turn_id)

    def checkpointed():
        turn = Turn.objects.get(pk=turn_id)
        return turn.assistant_text == "Saved so far" and turn.checkpoint_output_tokens > 0

    await eventually(checkpointed)
    turn = await get_turn(turn_id)
    assert turn.status == "streaming"
    assert turn.checkpoint_round == 1
    assert turn.checkpoint_input_tokens > 0
    assert timezone.now() - turn.heartbeat_at < timedelta(seconds=5)
    await chat.send({"type": "stop"})
    await chat.finish(turn_id)


async def test_a_failing_calibration_save_never_stops_the_checkpoints(chat, use_provider, settings, monkeypatch):
    from billing import calibration

    def broken():
        raise RuntimeError("database away")

    monkeypatch.setattr(calibration, "flush_due", lambda: True)
    monkeypatch.setattr(calibration, "flush", broken)
    settings.KOOKEE_CHECKPOINT_SECONDS = 0.05
    more = asyncio.Event()
    use_provider.queue([text("Saved"), WaitFor(more), text(" so far"), WaitFor(asyncio.Event())])
    turn_id = await chat.ask("hi")
    await eventually(lambda: Turn.objects.get(pk=turn_id).assistant_text == "Saved")
    await asyncio.sleep(0.2)  # several failed saves
    more.set()
    await eventually(lambda: Turn.objects.get(pk=turn_id).assistant_text == "Saved so far")
    await chat.send({"type": "stop"})
    await chat.finish(turn_id)


async def test_checkpoints_are_timed_not_per_token(chat, use_provider, settings):
    settings.KOOKEE_CHECKPOINT_SECONDS = 3600
    use_provider.queue([*[text(f" w{n}") for n in range(50)], WaitFor(asyncio.Event())])
    turn_id = await chat.ask("hi")
    while not chat.text_of(turn_id).endswith(" w49"):
        await chat.receive_until("delta", turn_id=turn_id)
    turn = await get_turn(turn_id)
    assert turn.assistant_text == ""  # no checkpoint yet: none per token
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"


# --- the sweeper -------------------------------------------------------------------------


def stale_turn(*, minutes_ago=5, checkpoint_round=2, recorded_rounds=1):
    conversation = Conversation.objects.create(visitor_hash="dead-process")
    heartbeat = timezone.now() - timedelta(minutes=minutes_ago)
    turn = Turn.objects.create(
        conversation=conversation,
        user_text="question",
        assistant_text="Checkpointed text",
        model="gpt-4o-mini",
        heartbeat_at=heartbeat,
        checkpoint_round=checkpoint_round,
        checkpoint_input_tokens=200,
        checkpoint_output_tokens=20,
    )
    for number in range(1, recorded_rounds + 1):
        Generation.objects.create(
            turn=turn,
            round=number,
            finish_reason="tool_calls",
            input_tokens=100,
            output_tokens=10,
            started_at=heartbeat,
            ended_at=heartbeat,
        )
    return turn


def test_the_sweeper_closes_and_bills_a_turn_a_dead_process_left():
    turn = stale_turn()
    assert sweeper.close_stale_turns(stale_after_seconds=30) == [(turn.conversation.visitor_hash, turn.id)]
    turn.refresh_from_db()
    assert (turn.status, turn.interrupted, turn.stop_reason, turn.error) == ("interrupted", True, "process_lost", "")
    assert turn.assistant_text == "Checkpointed text"
    rounds = list(turn.generations.values_list("round", "input_tokens", "output_tokens", "usage_estimated"))
    assert rounds == [(1, 100, 10, False), (2, 200, 20, True)]
    entry = LedgerEntry.objects.get(turn=turn)
    assert (entry.input_tokens, entry.output_tokens, entry.estimated) == (300, 30, True)


def test_the_sweeper_bills_once():
    turn = stale_turn()
    sweeper.close_stale_turns(stale_after_seconds=30)
    assert sweeper.close_stale_turns(stale_after_seconds=30) == []
    assert LedgerEntry.objects.filter(turn=turn).count() == 1


def test_the_sweeper_leaves_live_turns_alone():
    turn = stale_turn(minutes_ago=0)
    assert sweeper.close_stale_turns(stale_after_seconds=30) == []
    turn.refresh_from_db()
    assert turn.status == "streaming"
    assert not LedgerEntry.objects.filter(turn=turn).exists()


def test_a_recorded_round_is_not_estimated_again():
    turn = stale_turn(checkpoint_round=1, recorded_rounds=1)
    sweeper.close_stale_turns(stale_after_seconds=30)
    assert turn.generations.count() == 1
    entry = LedgerEntry.objects.get(turn=turn)
    assert (entry.input_tokens, entry.output_tokens) == (100, 10)


async def test_a_finished_turn_cannot_be_swept_by_its_own_late_checkpoint(chat, use_provider):
    use_provider.queue(answer("Done."))
    turn_id = await chat.ask("hi")
    await chat.finish(turn_id)
    late = records.Checkpoint(turn_id, text="stale", round_number=1, input_tokens=1, output_tokens=1)
    await database_sync_to_async(records.checkpoint_turns)([late])
    turn = await get_turn(turn_id)
    assert (turn.status, turn.assistant_text) == ("completed", "Done.")


# --- endings where the database or the socket fails ----------------------------------------


async def test_a_failed_final_write_still_ends_the_turn_and_the_sweeper_bills_it(chat, use_provider, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(records, "finish_turn", broken)
    use_provider.queue(answer("Hello there."))
    turn_id = await chat.ask("hi")
    error = await chat.receive_until("error", turn_id=turn_id)
    assert error["code"] == "server_error"
    ended = await chat.receive_until("turn.ended", turn_id=turn_id)
    assert ended["status"] == "failed"
    assert await chat.communicator.receive_nothing(timeout=0.2)
    monkeypatch.undo()

    closed = await database_sync_to_async(sweeper.close_stale_turns)(stale_after_seconds=0)
    assert [turn for _, turn in closed] == [turn_id]
    entries = await database_sync_to_async(LedgerEntry.objects.filter(turn_id=turn_id).count)()
    assert entries == 1


async def test_a_long_tool_call_id_is_stored(chat, use_provider):
    long_id = "call_" + "x" * 600  # LiteLLM packs provider signatures into ids
    use_provider.queue(
        [tool_fragment(0, long_id, "search_help_center", '{"query": "sso"}'), finish("tool_calls"), usage(5, 5)],
        answer("SSO is on Business."),
    )
    turn_id = await chat.ask("sso?")
    assert (await chat.finish(turn_id))["status"] == "completed"
    stored = await database_sync_to_async(ToolCall.objects.get)()
    assert stored.call_id == long_id
    assert use_provider.requests[1].body["messages"][-1]["tool_call_id"] == long_id


def test_the_start_up_command_closes_stale_turns():
    turn = stale_turn()
    out = io.StringIO()
    call_command("close_stale_turns", stale_after=30, stdout=out)
    assert "Closed 1 stale turn(s)." in out.getvalue()
    turn.refresh_from_db()
    assert turn.status == "interrupted"
    assert LedgerEntry.objects.filter(turn=turn).count() == 1

"""Provider faults (chat/engine/provider.py, their codes provider_errors.py),
one test each: the visitor gets an error frame with a stable code, then
turn.ended failed; the partial text is saved, the ledger entry written, and
the socket (and every other conversation) keeps working."""

import asyncio
import socket

import pytest
from channels.db import database_sync_to_async

from billing.models import LedgerEntry
from chat.engine import provider as provider_module
from tests.chat.chat_client import ChatClient
from tests.provider import HTTPError, Pause, WaitFor, answer, chunk, finish, text, usage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fast_faults(settings):
    settings.KOOKEE_PROVIDER_CONNECT_TIMEOUT = 2
    settings.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT = 2
    settings.KOOKEE_PROVIDER_STALL_TIMEOUT = 2
    settings.KOOKEE_PROVIDER_RETRIES = 2
    settings.KOOKEE_PROVIDER_BACKOFF_SECONDS = 0.01
    return settings


@pytest.fixture
def kept_streams(monkeypatch):
    """Every stream the turns open, kept: a stream the round let go of
    unclosed would be closed by the garbage collector, as its task ends.
    Kept, a round that ends between two reads is hung up by its own close
    alone (a read it interrupts, a timeout's, httpx2 closes itself)."""
    streams = []
    open_stream = provider_module.open_stream

    async def opening(**request):
        stream = await open_stream(**request)
        streams.append(stream)
        return stream

    monkeypatch.setattr(provider_module, "open_stream", opening)
    return streams


@pytest.fixture
async def chat(use_provider, fast_faults):
    client = await ChatClient.connect()
    yield client
    await client.close()


async def failed_turn(chat, code, question="hi"):
    """Asks, expects the error frame then turn.ended failed; checks invariants."""
    turn_id = await chat.ask(question)
    error = await chat.receive_until("error")
    assert error["code"] == code
    assert error["message"]
    ended = await chat.finish(turn_id)
    assert ended["status"] == "failed"
    return turn_id, ended


async def still_works(chat, provider):
    provider.queue(answer("Fine again."))
    turn_id = await chat.ask("hello again")
    assert (await chat.finish(turn_id))["status"] == "completed"


def unused_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_connection_refused(chat, use_provider, settings):
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{unused_port()}/v1"
    _, ended = await failed_turn(chat, "provider_unreachable")
    assert ended["usage"] == {"input_tokens": 0, "output_tokens": 0, "estimated": False}
    settings.OPENAI_BASE_URL = use_provider.url
    await still_works(chat, use_provider)


async def test_dns_failure(chat, use_provider, settings):
    settings.OPENAI_BASE_URL = "http://no-such-provider.invalid/v1"
    _, ended = await failed_turn(chat, "provider_unreachable")
    assert ended["usage"]["input_tokens"] == 0
    settings.OPENAI_BASE_URL = use_provider.url
    await still_works(chat, use_provider)


async def test_timeout_before_the_first_token(chat, use_provider, fast_faults, kept_streams):
    fast_faults.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT = 0.3
    use_provider.queue([WaitFor(asyncio.Event()), text("too late"), finish("stop")])
    turn_id, ended = await failed_turn(chat, "provider_timeout")
    assert chat.text_of(turn_id) == ""
    assert ended["usage"]["estimated"] is True  # the provider may have read the prompt
    # On a loaded machine the timeout may come before the provider has read
    # the request, and its hang-up is seen after the turn's end: wait for both.
    request = await use_provider.wait_for_request(1)
    await asyncio.wait_for(request.hung_up.wait(), 2)
    assert request.hung_up_early
    await still_works(chat, use_provider)


async def test_stall_between_chunks(chat, use_provider, fast_faults, kept_streams):
    fast_faults.KOOKEE_PROVIDER_STALL_TIMEOUT = 0.3
    use_provider.queue([text("Half of"), text(" it"), WaitFor(asyncio.Event()), text(" never")])
    turn_id, ended = await failed_turn(chat, "provider_stalled")
    assert chat.text_of(turn_id) == "Half of it"
    assert ended["usage"]["estimated"] is True
    await asyncio.wait_for(use_provider.requests[0].hung_up.wait(), 2)
    await still_works(chat, use_provider)


async def test_slow_but_steady_streams_are_not_stalls(chat, use_provider, fast_faults):
    fast_faults.KOOKEE_PROVIDER_STALL_TIMEOUT = 0.3
    steps = []
    for word in ["one", " two", " three", " four", " five"]:
        steps += [text(word), Pause(0.15)]
    use_provider.queue([*steps, finish("stop"), usage(5, 5)])
    turn_id = await chat.ask("count slowly")
    assert (await chat.finish(turn_id))["status"] == "completed"


async def test_429_is_retried_before_the_stream_starts(chat, use_provider):
    use_provider.queue(
        [HTTPError(429, {"error": {"message": "slow down"}}, {"retry-after": "0"})],
        answer("Worth the wait.", 30, 4),
    )
    turn_id = await chat.ask("hi")
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("completed", 1)
    assert chat.text_of(turn_id) == "Worth the wait."
    assert ended["usage"] == {"input_tokens": 30, "output_tokens": 4, "estimated": False}
    assert len(use_provider.requests) == 2


async def test_429_after_every_retry(chat, use_provider):
    use_provider.queue(*[[HTTPError(429, {"error": {"message": "slow down"}})] for _ in range(3)])
    _, ended = await failed_turn(chat, "provider_rate_limited")
    assert ended["usage"] == {"input_tokens": 0, "output_tokens": 0, "estimated": False}
    assert len(use_provider.requests) == 3  # the first try and two retries
    await still_works(chat, use_provider)


async def test_5xx_after_every_retry(chat, use_provider):
    use_provider.queue(*[[HTTPError(503, {"error": {"message": "overloaded"}})] for _ in range(3)])
    await failed_turn(chat, "provider_unavailable")
    assert len(use_provider.requests) == 3
    await still_works(chat, use_provider)


async def test_a_bad_request_is_not_retried(chat, use_provider):
    use_provider.queue([HTTPError(400, {"error": {"message": "unknown model"}})])
    await failed_turn(chat, "provider_rejected")
    assert len(use_provider.requests) == 1
    await still_works(chat, use_provider)


async def test_stop_during_backoff(chat, use_provider, fast_faults):
    fast_faults.KOOKEE_PROVIDER_BACKOFF_SECONDS = 5
    fast_faults.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT = 30
    use_provider.queue([HTTPError(503, {"error": {"message": "overloaded"}})])
    turn_id = await chat.ask("hi")
    await use_provider.wait_for_request(1)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert len(use_provider.requests) == 1


async def test_error_event_mid_stream_is_never_retried(chat, use_provider):
    use_provider.queue([text("Partial"), {"error": {"message": "upstream overloaded"}}], answer("NO"))
    turn_id, ended = await failed_turn(chat, "provider_error")
    assert chat.text_of(turn_id) == "Partial"
    assert ended["usage"]["estimated"] is True
    assert len(use_provider.requests) == 1
    use_provider.scripts.clear()
    await still_works(chat, use_provider)


async def test_a_fault_mid_stream_hangs_up(chat, use_provider, kept_streams):
    # The provider holds its end open after the error: only the round's close ends the request.
    use_provider.queue([text("Partial"), {"error": {"message": "upstream overloaded"}}, WaitFor(asyncio.Event())])
    turn_id, _ = await failed_turn(chat, "provider_error")
    assert chat.text_of(turn_id) == "Partial"
    await asyncio.wait_for(use_provider.requests[0].hung_up.wait(), 2)
    assert use_provider.requests[0].hung_up_early
    await still_works(chat, use_provider)


async def test_stream_cut_without_finish_reason(chat, use_provider):
    use_provider.queue([text("Cut"), text(" here")])
    turn_id, _ = await failed_turn(chat, "incomplete_stream")
    assert chat.text_of(turn_id) == "Cut here"
    await still_works(chat, use_provider)


async def test_malformed_chunk(chat, use_provider):
    use_provider.queue([text("Before"), b"data: {oops\n\n", text(" after"), finish("stop")])
    turn_id, _ = await failed_turn(chat, "bad_stream")
    assert chat.text_of(turn_id) == "Before"
    await still_works(chat, use_provider)


async def test_other_conversations_keep_working(chat, use_provider, fast_faults):
    fast_faults.KOOKEE_PROVIDER_STALL_TIMEOUT = 0.5
    other = await ChatClient.connect()
    try:
        use_provider.queue([text("Stalling"), WaitFor(asyncio.Event())], answer("Other visitor is fine."))
        stalled = await chat.ask("first")
        await chat.receive_until("delta", turn_id=stalled)
        fine = await other.ask("second")
        assert (await other.finish(fine))["status"] == "completed"
        error = await chat.receive_until("error")
        assert error["code"] == "provider_stalled"
        assert (await chat.finish(stalled))["status"] == "failed"
    finally:
        await other.close()
    assert await database_sync_to_async(LedgerEntry.objects.count)() == 2


async def test_an_opening_role_chunk_does_not_end_the_first_token_wait(chat, use_provider, fast_faults):
    """The first-token timeout covers a model thinking after its role chunk;
    the shorter stall timeout only starts once it says something."""
    fast_faults.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT = 5
    fast_faults.KOOKEE_PROVIDER_STALL_TIMEOUT = 0.3
    use_provider.queue([chunk(delta={"role": "assistant", "content": ""}), Pause(0.6), *answer("Thought it over.")])
    turn_id = await chat.ask("hard question")
    ended = await chat.finish(turn_id)
    assert ended["status"] == "completed"
    assert chat.text_of(turn_id) == "Thought it over."


@pytest.mark.parametrize("status", [408, 409, 500, 503, 529])
async def test_retryable_statuses_end_as_unavailable(chat, use_provider, status):
    use_provider.queue(*[[HTTPError(status, {"error": {"message": "try later"}})] for _ in range(3)])
    await failed_turn(chat, "provider_unavailable")
    assert len(use_provider.requests) == 3

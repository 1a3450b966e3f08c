"""Chunks that arrive together go to the visitor as one delta; chunks that
arrive apart stay apart, and the first is never held back. The text seen and
stored is the same however the chunks came. (The provider's reader hands on
what one network read brought as one batch, chat/engine/provider.py; the
round loop sends a batch's text as one delta, chat/engine/rounds.py.)"""

import asyncio
import json

import pytest

from chat.engine.rounds import RoundLoop, Tool
from tests.chat.engine.test_rounds import Sink as RecordingSink
from tests.provider import DONE, Pause, WaitFor, chunk, finish, text, tool_fragment, usage

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "question"}]
ROLE = chunk(delta={"role": "assistant", "content": ""})


def together(*chunks) -> bytes:
    """Several SSE events written at once: one step of the script, one network read."""
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)


class Sink(RecordingSink):
    """Records each delta and when it came."""

    def __init__(self):
        super().__init__()
        self.times = []

    async def delta(self, text):
        self.times.append(asyncio.get_running_loop().time())
        await super().delta(text)


async def search(query):
    return {"articles": [{"id": 1, "title": f"About {query}", "url": "/help/x/", "snippet": "..."}]}


SEARCH = Tool("search_help_center", "Search.", {"type": "object", "properties": {}}, search)


async def run(open_stream, tools=()):
    sink = Sink()
    loop = RoundLoop(open_stream, list(tools), sink, 5)
    outcome = await loop.run(MESSAGES)
    assert sink.text == loop.text
    return outcome, loop, sink


async def test_chunks_that_arrive_together_are_one_delta(provider, open_stream):
    provider.queue([ROLE, together(text("Hello"), text(", "), text("world"), text("!")), finish("stop"), DONE])
    outcome, loop, sink = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.deltas == ["Hello, world!"]
    assert loop.rounds[0].content == "Hello, world!"


async def test_chunks_that_arrive_apart_stay_apart(provider, open_stream):
    provider.queue([ROLE, text("One"), Pause(0.1), text(" two"), Pause(0.1), text(" three"), finish("stop"), DONE])
    outcome, _, sink = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.deltas == ["One", " two", " three"]


async def test_together_then_apart(provider, open_stream):
    provider.queue(
        [
            together(ROLE, text("A"), text("B")),
            Pause(0.1),
            text("C"),
            Pause(0.1),
            together(text("D"), text("E"), finish("stop"), usage(4, 5)),
            DONE,
        ]
    )
    outcome, loop, sink = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.deltas == ["AB", "C", "DE"]
    assert (loop.rounds[0].usage.input_tokens, loop.rounds[0].usage.output_tokens) == (4, 5)


async def test_a_whole_answer_in_one_read(provider, open_stream):
    provider.queue([together(ROLE, text("All "), text("at "), text("once."), finish("stop"), usage(9, 3)) + DONE])
    outcome, loop, sink = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.deltas == ["All at once."]
    assert loop.rounds[0].finish_reason == "stop"
    assert loop.rounds[0].usage.estimated is False


async def test_the_first_delta_is_not_held_back(provider, open_stream):
    release = asyncio.Event()
    provider.queue([ROLE, text("First"), WaitFor(release), text(" second"), finish("stop"), DONE])
    sink = Sink()
    loop = RoundLoop(open_stream, [], sink, 5)
    task = asyncio.create_task(loop.run(MESSAGES))
    try:
        async with asyncio.timeout(2):
            await sink.got_text.wait()
        assert sink.deltas == ["First"]
        assert not task.done()
    finally:
        release.set()
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "completed"
    assert sink.deltas == ["First", " second"]


async def test_the_first_delta_comes_before_a_long_pause_ends(provider, open_stream):
    pause = 0.6
    provider.queue([ROLE, text("Thinking"), Pause(pause), text(" done."), finish("stop"), DONE])
    outcome, _, sink = await run(open_stream)
    finished = asyncio.get_running_loop().time()
    assert outcome.status == "completed"
    assert sink.deltas == ["Thinking", " done."]
    assert finished - sink.times[0] >= pause * 0.8, "the first delta waited for the pause"


PIECES = ["Paste ", "the ", "widget ", "snippet ", "before ", "</body>", ".\n\n", "Smile \ud83d", "\ude00 ", "done.\n"]


@pytest.mark.parametrize("arrival", ["together", "apart", "pairs"])
async def test_the_text_is_the_same_however_it_arrives(provider, open_stream, arrival, settings):
    # Unpaced reads: with the window, chunks 20 ms apart are read together.
    settings.KOOKEE_DELTA_WINDOW_MS = 0
    chunks = [text(piece) for piece in PIECES]
    if arrival == "together":
        steps = [together(*chunks)]
    elif arrival == "apart":
        steps = [step for c in chunks for step in (c, Pause(0.02))]
    else:
        steps = [together(*chunks[i : i + 2]) for i in range(0, len(chunks), 2)]
    provider.queue([ROLE, *steps, finish("stop"), usage(30, 12), DONE])
    outcome, loop, sink = await run(open_stream)
    assert outcome.status == "completed"
    expected = "Paste the widget snippet before </body>.\n\nSmile \U0001f600 done.\n"
    assert sink.text == loop.text == loop.rounds[0].content == expected
    if arrival == "together":
        # One delta, and the trailing whitespace held back until the turn's end.
        assert sink.deltas == [expected.rstrip(), "\n"]
    elif arrival == "apart":
        assert len(sink.deltas) >= len(PIECES) - 2


async def test_an_emoji_split_between_chunks_of_one_read_is_whole(provider, open_stream):
    provider.queue([together(text("Smile \ud83d"), text("\ude00!")), finish("stop"), DONE])
    _, _, sink = await run(open_stream)
    assert sink.deltas == ["Smile \U0001f600!"]


async def test_narration_and_tool_call_in_one_read_then_the_answer(provider, open_stream):
    provider.queue(
        [
            together(
                ROLE,
                text("Let me "),
                text("check.\n"),
                tool_fragment(0, "c1", "search_help_center", '{"query": '),
                tool_fragment(0, arguments='"widget"}'),
                finish("tool_calls"),
                usage(10, 8),
            )
            + DONE
        ],
        [together(ROLE, text("\n"), text("Found "), text("it.")), finish("stop"), DONE],
    )
    outcome, loop, sink = await run(open_stream, [SEARCH])
    assert outcome.status == "completed"
    assert sink.deltas == ["Let me check.", "\n\nFound it."]
    assert sink.tools == [("search_help_center", "started"), ("search_help_center", "finished")]
    assert loop.rounds[0].tool_calls[0].arguments == '{"query": "widget"}'
    assert json.loads(provider.requests[1].body["messages"][-1]["content"])["articles"][0]["title"] == "About widget"


# --- what arrived with a fault in the same read --------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code"),
    [(together({"error": {"message": "overloaded"}}), "provider_error"), (b"data: {oops\n\n", "bad_stream")],
    ids=["error-object", "not-json"],
)
async def test_text_that_arrived_with_a_fault_is_kept(provider, open_stream, fault, code):
    provider.queue([ROLE, Pause(0.05), together(text("Partial"), text(" answer")) + fault])
    outcome, loop, sink = await run(open_stream)
    assert (outcome.status, outcome.error) == ("failed", code)
    assert sink.text == loop.rounds[0].content == "Partial answer"


async def test_a_broken_tail_in_the_same_read_as_the_finish(provider, open_stream):
    provider.queue([ROLE, Pause(0.05), together(text("All said."), finish("stop"), usage(9, 3), {"error": "late"})])
    outcome, loop, sink = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.text == "All said."
    assert loop.rounds[0].usage.output_tokens == 3


# --- the window: deltas that stream within it go as one ---------------------------------------


class Events(Sink):
    """Records every frame the loop sends, deltas and tools, in order."""

    def __init__(self, fail_after=None):
        super().__init__()
        self.events = []
        self.fail_after = fail_after

    async def delta(self, text):
        if self.fail_after is not None and len(self.deltas) >= self.fail_after:
            raise ConnectionError("the hub is gone")
        await super().delta(text)
        self.events.append(("delta", text))

    async def tool(self, name, status):
        await super().tool(name, status)
        self.events.append(("tool", status))


def windowed(open_stream, sink, window, tools=()):
    return RoundLoop(open_stream, list(tools), sink, 5, window=window)


@pytest.fixture
def unpaced(settings):
    """The provider's reads not paced (the window setting is what paces
    them): the loop's coalescer gathers, as for the offline model's stream."""
    settings.KOOKEE_DELTA_WINDOW_MS = 0


@pytest.mark.usefixtures("unpaced")
async def test_chunks_streamed_within_the_window_go_as_fewer_deltas(provider, open_stream):
    words = [f"w{i} " for i in range(20)]
    provider.queue([ROLE, *[step for w in words for step in (text(w), Pause(0.01))], text("end"), finish("stop"), DONE])
    sink = Events()
    loop = windowed(open_stream, sink, 0.1)
    outcome = await loop.run(MESSAGES)
    assert outcome.status == "completed"
    assert sink.text == loop.text == loop.rounds[0].content == "".join(words) + "end"
    # The first goes alone, at once; the rest gather (20 chunks over ~0.2 s
    # in 0.1 s windows: a handful of deltas, not 20).
    assert sink.deltas[0] == "w0"
    assert 2 <= len(sink.deltas) <= 8, sink.deltas


async def test_without_a_window_every_read_is_a_delta(provider, open_stream, settings):
    settings.KOOKEE_DELTA_WINDOW_MS = 0  # nor are the provider's reads paced
    provider.queue([ROLE, *[step for w in ("a ", "b ", "c") for step in (text(w), Pause(0.02))], finish("stop"), DONE])
    sink = Events()
    outcome = await windowed(open_stream, sink, 0).run(MESSAGES)
    assert outcome.status == "completed"
    assert sink.deltas == ["a", " b", " c"]


@pytest.mark.usefixtures("unpaced")
async def test_the_window_never_holds_back_the_first_delta(provider, open_stream):
    release = asyncio.Event()
    provider.queue([ROLE, text("First"), WaitFor(release), text(" second"), finish("stop"), DONE])
    sink = Events()
    task = asyncio.create_task(windowed(open_stream, sink, 30).run(MESSAGES))  # a window far longer than the test
    try:
        async with asyncio.timeout(2):
            await sink.got_text.wait()
        assert sink.deltas == ["First"]
    finally:
        release.set()
    # The end of the answer does not wait for the window either.
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "completed"
    assert sink.deltas == ["First", " second"]


@pytest.mark.usefixtures("unpaced")
async def test_text_after_a_quiet_spell_goes_at_once(provider, open_stream):
    release = asyncio.Event()
    provider.queue([ROLE, text("One."), Pause(0.3), text(" Two."), WaitFor(release), finish("stop"), DONE])
    sink = Events()
    task = asyncio.create_task(windowed(open_stream, sink, 0.1).run(MESSAGES))
    try:
        async with asyncio.timeout(2):
            while sink.text != "One. Two.":  # noqa: ASYNC110 - polls what the loop owns; it has no event to wait on
                await asyncio.sleep(0.01)
        # Both went out while the stream was still open: the window had ended.
        assert sink.deltas == ["One.", " Two."]
    finally:
        release.set()
    assert (await asyncio.wait_for(task, 5)).status == "completed"


@pytest.mark.usefixtures("unpaced")
async def test_gathered_text_goes_before_the_tool_frame(provider, open_stream):
    provider.queue(
        [
            ROLE,
            text("Let "),
            text("me "),
            text("check."),
            tool_fragment(0, "c1", "search_help_center", "{}"),
            finish("tool_calls"),
            DONE,
        ],
        [ROLE, text("Found "), Pause(0.01), text("it."), finish("stop"), DONE],
    )
    sink = Events()
    loop = windowed(open_stream, sink, 30, [SEARCH])
    outcome = await asyncio.wait_for(loop.run(MESSAGES), 10)
    assert outcome.status == "completed"
    kinds = [kind for kind, _ in sink.events]
    assert kinds.index("tool") > 0 and kinds[: kinds.index("tool")] == ["delta"] * kinds.index("tool")
    assert "".join(t for k, t in sink.events[: kinds.index("tool")] if k == "delta") == "Let me check."
    # The answer's first delta was not held back by the narration's window.
    assert sink.text == loop.text == "Let me check.\n\nFound it."


@pytest.mark.usefixtures("unpaced")
async def test_a_stop_drops_what_the_window_gathered_and_nothing_seen(provider, open_stream):
    provider.queue([ROLE, text("Seen"), Pause(0.05), text(" gathered"), WaitFor(asyncio.Event())])
    sink = Events()
    loop = windowed(open_stream, sink, 30)
    task = asyncio.create_task(loop.run(MESSAGES))
    async with asyncio.timeout(2):
        await sink.got_text.wait()
        while loop.rounds[0].content != "Seen gathered":  # noqa: ASYNC110 - as above
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # What the visitor saw is what the loop says was sent (and is stored).
    assert sink.deltas == ["Seen"]
    assert loop.text == "Seen"
    await asyncio.sleep(0.05)
    assert sink.deltas == ["Seen"], "nothing went out after the Stop"


@pytest.mark.usefixtures("unpaced")
async def test_a_send_that_fails_ends_the_loop_and_is_not_counted_as_seen(provider, open_stream):
    provider.queue([ROLE, text("One"), Pause(0.05), text(" two"), Pause(0.05), text(" three"), finish("stop"), DONE])
    sink = Events(fail_after=1)
    loop = windowed(open_stream, sink, 0.02)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(loop.run(MESSAGES), 5)
    assert sink.deltas == ["One"]
    assert loop.text == "One"


# --- the provider's connection, read once per window -----------------------------------------


def count_reads(monkeypatch):
    from chat.engine import transport

    reads = []
    read = transport._Stream.read

    async def counted(self, max_bytes, timeout=None):
        data = await read(self, max_bytes, timeout)
        reads.append(data)
        return data

    monkeypatch.setattr(transport._Stream, "read", counted)
    return reads


@pytest.mark.parametrize(("window_ms", "fewest", "most"), [(0, 20, 100), (100, 2, 10)])
async def test_once_the_answer_has_begun_the_provider_is_read_once_per_window(
    provider, open_stream, settings, monkeypatch, window_ms, fewest, most
):
    settings.KOOKEE_DELTA_WINDOW_MS = window_ms
    reads = count_reads(monkeypatch)
    words = [f"w{i} " for i in range(20)]
    provider.queue([ROLE, *[step for w in words for step in (text(w), Pause(0.01))], finish("stop"), DONE])
    sink = Events()
    loop = windowed(open_stream, sink, window_ms / 1000)
    outcome = await asyncio.wait_for(loop.run(MESSAGES), 10)
    assert outcome.status == "completed"
    assert sink.text == "".join(words)
    # The response's head and body: one read per chunk without a window;
    # with one, the chunks of ~0.2 s come in a few reads.
    assert fewest <= len([r for r in reads if r]) <= most, len(reads)
    # At most one delta per read (and the trailing whitespace held back to
    # the end): what a read brought goes out whole.
    assert len(sink.deltas) <= len([r for r in reads if r]) + 1, (sink.deltas, len(reads))


async def test_a_paced_streams_reads_go_out_as_they_are_read(provider, open_stream, settings):
    """Read once per window, each read is a window's text: it goes out at
    once, not after the round loop's own window (here far longer)."""
    settings.KOOKEE_DELTA_WINDOW_MS = 50
    release = asyncio.Event()
    provider.queue(
        [ROLE, text("One"), Pause(0.1), text(" two"), text(" three"), WaitFor(release), finish("stop"), DONE]
    )
    sink = Events()
    task = asyncio.create_task(windowed(open_stream, sink, 30).run(MESSAGES))
    try:
        async with asyncio.timeout(2):
            while sink.text != "One two three":  # noqa: ASYNC110 - polls what the loop owns
                await asyncio.sleep(0.01)
        assert sink.deltas == ["One", " two three"]
    finally:
        release.set()
    assert (await asyncio.wait_for(task, 5)).status == "completed"


async def test_a_stop_between_paced_reads_ends_at_once_and_keeps_what_was_seen(provider, open_stream, settings):
    settings.KOOKEE_DELTA_WINDOW_MS = 10_000  # the next read would wait ten seconds
    provider.queue([ROLE, text("Seen"), Pause(0.05), text(" unread"), WaitFor(asyncio.Event())])
    sink = Events()
    loop = windowed(open_stream, sink, 10)
    task = asyncio.create_task(loop.run(MESSAGES))
    async with asyncio.timeout(2):
        await sink.got_text.wait()
    await asyncio.sleep(0.1)  # " unread" has arrived, and waits for the window
    stopped_at = asyncio.get_running_loop().time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asyncio.get_running_loop().time() - stopped_at < 1
    assert sink.deltas == ["Seen"]
    assert loop.text == loop.rounds[0].content == "Seen"

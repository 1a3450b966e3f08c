"""The round loop over scripted SSE streams, read by the real openai client.

Each test serves one provider's stream shape and checks what the visitor
would see, what would be recorded, and what went back to the model.
"""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from chat.engine import hub
from chat.engine.rounds import EndTurn, Round, RoundLoop, Tool
from chat.engine.usage import Ratios, Usage
from chat.models import Turn
from tests.chat.chat_client import ChatClient
from tests.provider import (
    CHUNK_BASE,
    DONE,
    Pause,
    WaitFor,
    _usage,
    answer,
    chunk,
    finish,
    text,
    tool_fragment,
    tool_round,
    usage,
)


class Sink:
    def __init__(self):
        self.deltas = []
        self.tools = []
        self.rounds = []
        self.next_prompt_tokens = []
        self.got_text = asyncio.Event()

    async def delta(self, text):
        self.deltas.append(text)
        self.got_text.set()

    async def tool(self, name, status):
        self.tools.append((name, status))

    async def round_ended(self, rnd: Round, next_prompt_tokens: int):
        self.rounds.append(rnd)
        self.next_prompt_tokens.append(next_prompt_tokens)

    @property
    def text(self):
        return "".join(self.deltas)


class Search:
    """A tool that records its calls."""

    def __init__(self, fail=False):
        self.queries = []
        self.fail = fail

    async def __call__(self, query):
        self.queries.append(query)
        if self.fail:
            raise RuntimeError("search index unavailable")
        return {"articles": [{"id": 1, "title": f"About {query}", "url": "/help/x/", "snippet": "..."}]}


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "question"}]


async def run(open_stream, search=None, max_rounds=5):
    search = search or Search()
    tool = Tool("search_help_center", "Search.", {"type": "object", "properties": {}}, search)
    sink = Sink()
    loop = RoundLoop(open_stream, [tool], sink, max_rounds)
    outcome = await loop.run(MESSAGES)
    assert sink.text == loop.text
    return outcome, loop, sink, search


async def stop_after_first_text(open_stream):
    """Runs a turn and cancels it (a Stop) once its first text is sent."""
    sink = Sink()
    loop = RoundLoop(open_stream, [], sink, 5)
    task = asyncio.create_task(loop.run(MESSAGES))
    async with asyncio.timeout(5):
        await sink.got_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return loop, sink


def tool_messages(request_body):
    return [m for m in request_body["messages"] if m["role"] == "tool"]


@pytest.fixture
def kept_streams(open_stream):
    """Opens streams as open_stream does, and keeps each one: a stream the
    loop let go of unclosed would be closed by the garbage collector, as
    its task ends. Kept, a round that ends between two reads is hung up by
    its own close alone (a read it interrupts, httpx2 closes itself)."""
    streams = []

    async def opening(**request):
        stream = await open_stream(**request)
        streams.append(stream)
        return stream

    opening.streams = streams
    return opening


# --- plain answers and usage --------------------------------------------------------------


async def test_plain_answer_is_one_generation(provider, open_stream):
    steps = answer("Hello there, how can I help?", 120, 9)
    steps.insert(2, Pause(0.02))  # the rest comes after the first piece was read
    provider.queue(steps)
    outcome, loop, sink, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.text == "Hello there, how can I help?"
    assert len(sink.deltas) > 1  # streamed, not delivered whole
    assert len(provider.requests) == 1
    body = provider.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "search_help_center"
    [rnd] = loop.rounds
    assert (rnd.finish_reason, rnd.usage.input_tokens, rnd.usage.output_tokens) == ("stop", 120, 9)
    assert rnd.usage.estimated is False
    assert rnd.first_delta_at is not None


async def test_usage_on_a_chunk_that_still_has_choices(provider, open_stream):
    provider.queue([text("Hi"), finish("stop", usage=_usage(30, 2)), DONE])
    outcome, loop, _, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert (loop.rounds[0].usage.input_tokens, loop.rounds[0].usage.output_tokens) == (30, 2)
    assert loop.rounds[0].usage.estimated is False


async def test_usage_on_every_chunk_keeps_the_last_never_sums(provider, open_stream):
    provider.queue(
        [
            text("One", usage=_usage(50, 1)),
            text(" two", usage=_usage(50, 2)),
            text(" three", usage=_usage(50, 3)),
            finish("stop", usage=_usage(50, 3)),
            DONE,
        ]
    )
    _, loop, sink, _ = await run(open_stream)
    assert sink.text == "One two three"
    assert (loop.rounds[0].usage.input_tokens, loop.rounds[0].usage.output_tokens) == (50, 3)


async def test_usage_under_x_groq(provider, open_stream):
    provider.queue([text("Hi"), finish("stop"), {**CHUNK_BASE, "choices": [], "x_groq": {"usage": _usage(21, 1)}}])
    _, loop, _, _ = await run(open_stream)
    assert (loop.rounds[0].usage.input_tokens, loop.rounds[0].usage.output_tokens) == (21, 1)
    assert loop.rounds[0].usage.estimated is False


async def test_null_usage_on_content_chunks_then_real_usage(provider, open_stream):
    provider.queue([text("Hi", usage=None), finish("stop", usage=None), usage(12, 1), DONE])
    _, loop, _, _ = await run(open_stream)
    assert (loop.rounds[0].usage.input_tokens, loop.rounds[0].usage.output_tokens) == (12, 1)


async def test_no_usage_at_all_is_estimated(provider, open_stream):
    provider.queue([text("Twelve chars"), finish("stop"), DONE])
    outcome, loop, _, _ = await run(open_stream)
    assert outcome.status == "completed"
    rnd = loop.rounds[0]
    assert rnd.usage.estimated is True
    assert rnd.usage.output_tokens == 3  # 12 characters, ~4 per token
    assert rnd.usage.input_tokens > 0


# --- what the estimate counts, and usage details -----------------------------------------------


async def test_the_input_estimate_counts_tool_definitions_and_message_framing(provider, open_stream):
    provider.queue([text("Hi"), finish("stop"), DONE])  # no usage: estimated
    _, loop, _, _ = await run(open_stream)
    rnd = loop.rounds[0]
    body = provider.requests[0].body
    tools_chars = len(json.dumps(body["tools"], separators=(",", ":")))
    text_chars = sum(len(m["content"]) for m in MESSAGES)
    assert rnd.prompt_chars == tools_chars + text_chars
    # 3 tokens a message and 3 to prime the reply, as OpenAI counts them.
    assert rnd.usage.input_tokens == -(-rnd.prompt_chars // 4) + 3 * len(MESSAGES) + 3


async def test_the_sink_hears_the_next_prompts_estimate_before_it_is_asked(provider, open_stream):
    provider.queue(tool_round([("call_a", "search_help_center", {"query": "sso"})]), answer("Use SAML."))
    outcome, loop, sink, _ = await run(open_stream)

    assert outcome.status == "completed"
    # As the second round itself would estimate its prompt (its tool result included).
    assert sink.next_prompt_tokens == [_estimate(loop.rounds[1])]


def _estimate(rnd):
    return -(-rnd.prompt_chars // 4) + 3 * rnd.prompt_messages + 3


async def test_a_sink_may_end_the_turn_between_rounds(provider, open_stream):
    class Refusing(Sink):
        async def round_ended(self, rnd, next_prompt_tokens):
            await super().round_ended(rnd, next_prompt_tokens)
            raise EndTurn("budget_exhausted")

    provider.queue(tool_round([("call_a", "search_help_center", {"query": "sso"})], "Let me check."), answer("No."))
    sink = Refusing()
    tool = Tool("search_help_center", "Search.", {"type": "object", "properties": {}}, Search())
    loop = RoundLoop(open_stream, [tool], sink, 5)

    outcome = await loop.run(MESSAGES)

    assert (outcome.status, outcome.error) == ("failed", "budget_exhausted")
    assert len(provider.requests) == 1 and len(loop.rounds) == 1
    assert loop.text == sink.text == "Let me check."


async def test_a_round_is_estimated_with_the_ratios_it_was_given(provider, open_stream):
    provider.queue([text("x" * 100), WaitFor(asyncio.Event())])
    sink = Sink()
    loop = RoundLoop(open_stream, [], sink, 5, ratios=lambda: Ratios(input=2.0, output=2.5))
    task = asyncio.create_task(loop.run(MESSAGES))
    await sink.got_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rnd = loop.rounds[0]
    assert rnd.usage.output_tokens == 40  # 100 characters at 2.5 a token
    assert rnd.usage.input_tokens == -(-len("Be brief.question") // 2) + 3 * 2 + 3
    assert rnd.sample() is None  # cut short: nothing to learn from


@pytest.mark.parametrize(
    "reported",
    [
        # OpenAI, xAI, Anthropic's and Gemini's compatibility layers, OpenRouter, vLLM
        {"prompt_tokens_details": {"cached_tokens": 60}, "completion_tokens_details": {"reasoning_tokens": 7}},
        # DeepSeek
        {"prompt_cache_hit_tokens": 60, "prompt_cache_miss_tokens": 40, "reasoning_tokens": 7},
        # Moonshot (top level), Responses-style details
        {"cached_tokens": 60, "output_tokens_details": {"reasoning_tokens": 7}},
        {"input_tokens_details": {"cached_tokens": 60}, "completion_tokens_details": {"reasoning_tokens": 7}},
    ],
)
async def test_cached_and_reasoning_tokens_are_read_from_each_providers_usage(provider, open_stream, reported):
    provider.queue([text("Hi"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": {**_usage(100, 9), **reported}}])
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].usage == Usage(100, 9, False, cached_input_tokens=60, reasoning_tokens=7)


async def test_absent_or_null_usage_details_are_zero(provider, open_stream):
    details = {"prompt_tokens_details": None, "completion_tokens_details": {"reasoning_tokens": None}}
    provider.queue([text("Hi"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": {**_usage(10, 2), **details}}])
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].usage == Usage(10, 2, False)


async def test_usage_named_as_the_responses_api_names_it(provider, open_stream):
    provider.queue(
        [text("Hi"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": {"input_tokens": 33, "output_tokens": 4}}]
    )
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].usage == Usage(33, 4, False)


async def test_a_whole_round_is_a_calibration_sample_net_of_framing(provider, open_stream):
    provider.queue([text("Twelve chars"), finish("stop"), usage(200, 5), DONE])
    _, loop, _, _ = await run(open_stream)
    rnd = loop.rounds[0]
    assert rnd.sample() == (rnd.prompt_chars, 200 - (3 * 2 + 3), 12, 5)


async def test_reasoning_reported_beside_the_output_is_billed_as_output(provider, open_stream):
    # xAI counts reasoning apart from completion_tokens; total_tokens holds both.
    reported = {
        "prompt_tokens": 200,
        "completion_tokens": 5,
        "total_tokens": 305,
        "completion_tokens_details": {"reasoning_tokens": 100},
    }
    provider.queue([text("Twelve chars"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": reported}])
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].usage == Usage(200, 105, False, reasoning_tokens=100)
    assert loop.rounds[0].sample().output_tokens == 5


async def test_anthropic_shaped_usage_counts_cached_input_as_input(provider, open_stream):
    reported = {
        "input_tokens": 40,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 60,
        "output_tokens": 7,
    }
    provider.queue([text("Hi"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": reported}])
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].usage == Usage(1000, 7, False, cached_input_tokens=900)


async def test_a_streamed_reasoning_summary_does_not_skew_the_output_sample(provider, open_stream):
    # 20 characters of summary for 300 reasoning tokens billed.
    reported = {**_usage(200, 305), "completion_tokens_details": {"reasoning_tokens": 300}}
    provider.queue(
        [
            chunk(delta={"reasoning": "Thinking it through."}),
            text("Twelve chars"),
            finish("stop"),
            {**CHUNK_BASE, "choices": [], "usage": reported},
        ]
    )
    _, loop, _, _ = await run(open_stream)
    sample = loop.rounds[0].sample()
    assert (sample.output_chars, sample.output_tokens) == (12, 5)


async def test_hidden_reasoning_is_left_out_of_the_output_sample(provider, open_stream):
    reported = {**_usage(200, 105), "completion_tokens_details": {"reasoning_tokens": 100}}
    provider.queue([text("Twelve chars"), finish("stop"), {**CHUNK_BASE, "choices": [], "usage": reported}])
    _, loop, _, _ = await run(open_stream)
    assert loop.rounds[0].sample().output_tokens == 5  # the 12 characters shown
    assert loop.rounds[0].usage.reasoning_tokens == 100


# --- finish_reason ------------------------------------------------------------------------


async def test_finish_reason_on_the_last_content_chunk(provider, open_stream):
    provider.queue([text("Done"), chunk(delta={"content": "."}, finish_reason="stop"), usage(5, 2), DONE])
    outcome, loop, sink, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.text == "Done."
    assert loop.rounds[0].finish_reason == "stop"


async def test_a_later_null_finish_reason_does_not_erase_it(provider, open_stream):
    provider.queue([text("Done"), finish("stop"), chunk(delta={}, finish_reason=None), usage(5, 1), DONE])
    outcome, loop, _, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert loop.rounds[0].finish_reason == "stop"


async def test_length_is_truncated(provider, open_stream):
    provider.queue([text("The answer is long and"), finish("length"), usage(5, 6), DONE])
    outcome, loop, sink, _ = await run(open_stream)
    assert outcome.status == "truncated"
    assert sink.text == "The answer is long and"
    assert loop.rounds[0].finish_reason == "length"


async def test_length_with_tool_calls_does_not_run_them(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_1", "search_help_center", '{"query": "wid'),
            finish("length"),
            usage(5, 6),
            DONE,
        ]
    )
    outcome, _loop, sink, search = await run(open_stream)
    assert outcome.status == "truncated"
    assert search.queries == []
    assert sink.tools == []
    assert len(provider.requests) == 1


async def test_stream_without_finish_reason_failed_and_tools_not_run(provider, open_stream):
    provider.queue([text("Let me look"), tool_fragment(0, "call_1", "search_help_center", '{"query": "x"}'), DONE])
    outcome, _loop, sink, search = await run(open_stream)
    assert outcome.status == "failed"
    assert outcome.error == "incomplete_stream"
    assert sink.text == "Let me look"
    assert search.queries == []
    assert len(provider.requests) == 1


async def test_stream_cut_without_done_or_finish_reason(provider, open_stream):
    provider.queue([text("Half an ans")])
    outcome, _, sink, _ = await run(open_stream)
    assert (outcome.status, outcome.error) == ("failed", "incomplete_stream")
    assert sink.text == "Half an ans"


# --- odd chunks ---------------------------------------------------------------------------


async def test_azure_prompt_filter_chunk_comments_and_missing_choices(provider, open_stream):
    provider.queue(
        [
            {**CHUNK_BASE, "choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
            b": keep-alive\n\n",
            b": OPENROUTER PROCESSING\n\n",
            {**CHUNK_BASE, "choices": None},
            {"id": "x", "object": "chat.completion.chunk"},
            text("Hello"),
            chunk(delta=None),
            finish("stop"),
            usage(7, 1),
            DONE,
        ]
    )
    outcome, loop, sink, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.text == "Hello"
    assert loop.rounds[0].usage.input_tokens == 7


async def test_error_event_mid_stream_fails_and_keeps_the_text(provider, open_stream):
    provider.queue([text("Partial"), {"error": {"message": "overloaded", "type": "server_error"}}, finish("stop")])
    outcome, loop, sink, _ = await run(open_stream)
    assert (outcome.status, outcome.error) == ("failed", "provider_error")
    assert "overloaded" in outcome.detail
    assert sink.text == "Partial"
    assert loop.rounds[0].usage.estimated is True


async def test_malformed_chunk_fails(provider, open_stream):
    provider.queue([text("Partial"), b"data: {not json\n\n", finish("stop"), DONE])
    outcome, _, sink, _ = await run(open_stream)
    assert (outcome.status, outcome.error) == ("failed", "bad_stream")
    assert sink.text == "Partial"


async def test_http_error_before_the_stream_fails(provider, open_stream):
    from tests.provider import HTTPError

    provider.queue([HTTPError(500, {"error": {"message": "boom"}})])
    outcome, loop, sink, _ = await run(open_stream)
    assert (outcome.status, outcome.error) == ("failed", "provider_unavailable")
    assert sink.deltas == []
    assert len(loop.rounds) == 1


async def test_other_choices_are_ignored(provider, open_stream):
    other = {"index": 1, "delta": {"content": "IGNORED"}, "finish_reason": None}
    mine = {"index": 0, "delta": {"content": "Mine"}, "finish_reason": None}
    provider.queue([{**CHUNK_BASE, "choices": [mine, other]}, finish("stop"), usage(1, 1), DONE])
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Mine"


# --- tool calls ---------------------------------------------------------------------------


async def test_narrate_then_call_then_answer_separated_by_one_blank_line(provider, open_stream):
    provider.queue(
        tool_round([("call_a", "search_help_center", {"query": "widget install"})], "Let me check."),
        answer("Paste the script tag before </body>."),
    )
    outcome, loop, sink, search = await run(open_stream)
    assert outcome.status == "completed"
    assert sink.text == "Let me check.\n\nPaste the script tag before </body>."
    assert search.queries == ["widget install"]
    assert sink.tools == [("search_help_center", "started"), ("search_help_center", "finished")]
    assert len(loop.rounds) == 2
    second = provider.requests[1].body["messages"]
    assistant = second[-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me check."
    assert assistant["tool_calls"][0]["id"] == "call_a"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"query": "widget install"}
    assert second[-1]["role"] == "tool"
    assert second[-1]["tool_call_id"] == "call_a"
    assert json.loads(second[-1]["content"])["articles"][0]["title"] == "About widget install"


async def test_a_tool_only_round_adds_no_separator(provider, open_stream):
    provider.queue(tool_round([("call_a", "search_help_center", {"query": "sso"})]), answer("Use SAML."))
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Use SAML."


async def test_separator_is_exactly_one_blank_line_whatever_the_whitespace(provider, open_stream):
    provider.queue(
        [
            text("Let me check.\n"),
            tool_fragment(0, "c1", "search_help_center", "{}"),
            finish("tool_calls"),
            DONE,
        ],
        [text("\n"), text("  "), text("\n\nFound it."), finish("stop"), DONE],
    )
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Let me check.\n\nFound it."


async def test_whole_tool_call_in_one_chunk(provider, open_stream):
    call = {
        "index": 0,
        "id": "call_whole",
        "type": "function",
        "function": {"name": "search_help_center", "arguments": '{"query": "refunds"}'},
    }
    provider.queue([chunk(delta={"tool_calls": [call]}, finish_reason="tool_calls"), DONE], answer("Yes."))
    _, loop, _, search = await run(open_stream)
    assert search.queries == ["refunds"]
    assert loop.rounds[0].tool_calls[0].call_id == "call_whole"


async def test_two_parallel_calls_interleaved(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_a", "search_help_center", ""),
            tool_fragment(1, "call_b", "search_help_center", ""),
            tool_fragment(1, arguments='{"query": '),
            tool_fragment(0, arguments='{"query": '),
            tool_fragment(0, arguments='"refunds"}'),
            tool_fragment(1, arguments='"export"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Both answered."),
    )
    _, _, sink, search = await run(open_stream)
    assert search.queries == ["refunds", "export"]
    ids = [m["tool_call_id"] for m in tool_messages(provider.requests[1].body)]
    assert ids == ["call_a", "call_b"]
    assert sink.text == "Both answered."


async def test_fragments_without_index_fall_back_on_the_id(provider, open_stream):
    provider.queue(
        [
            tool_fragment(None, "call_a", "search_help_center", '{"query"'),
            tool_fragment(None, "call_b", "search_help_center", '{"query": "b"}'),
            tool_fragment(None, "call_a", None, ': "a"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["a", "b"]


async def test_continuations_without_index_or_id_extend_the_latest_call(provider, open_stream):
    provider.queue(
        [
            tool_fragment(None, "call_a", "search_help_center", '{"que'),
            tool_fragment(None, None, None, 'ry": "sso"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["sso"]


async def test_whole_calls_without_index_or_id_one_per_chunk(provider, open_stream):
    provider.queue(
        [
            tool_fragment(None, "", "search_help_center", '{"query": "first"}'),
            tool_fragment(None, "", "search_help_center", '{"query": "second"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["first", "second"]


async def test_indexes_that_do_not_start_at_zero(provider, open_stream):
    provider.queue(
        [
            tool_fragment(3, "call_a", "search_help_center", '{"query":'),
            tool_fragment(3, arguments=' "roadmap"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["roadmap"]


async def test_one_index_reused_by_calls_with_different_ids(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_a", "search_help_center", '{"query": "first"}'),
            tool_fragment(0, "call_b", "search_help_center", '{"query": "second"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["first", "second"]
    ids = [m["tool_call_id"] for m in tool_messages(provider.requests[1].body)]
    assert ids == ["call_a", "call_b"]


async def test_empty_strings_on_continuations_are_absent(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_a", "search_help_center", ""),
            tool_fragment(0, "", "", '{"query": '),
            tool_fragment(0, "", "", '"api keys"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, loop, _, search = await run(open_stream)
    assert search.queries == ["api keys"]
    call = loop.rounds[0].tool_calls[0]
    assert (call.call_id, call.name) == ("call_a", "search_help_center")


async def test_id_and_name_repeated_on_every_fragment_are_not_concatenated(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_a", "search_help_center", '{"query": '),
            tool_fragment(0, "call_a", "search_help_center", '"billing"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, loop, _, search = await run(open_stream)
    assert search.queries == ["billing"]
    call = loop.rounds[0].tool_calls[0]
    assert (call.call_id, call.name) == ("call_a", "search_help_center")


async def test_tool_calls_with_finish_reason_stop_still_run(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, "call_a", "search_help_center", '{"query": "sso"}'),
            finish("stop"),
            usage(3, 3),
            DONE,
        ],
        answer("SSO is on Business."),
    )
    outcome, loop, _sink, search = await run(open_stream)
    assert outcome.status == "completed"
    assert search.queries == ["sso"]
    assert len(loop.rounds) == 2


async def test_arguments_sent_as_an_object(provider, open_stream):
    call = {"index": 0, "id": "c1", "function": {"name": "search_help_center", "arguments": {"query": "vat"}}}
    provider.queue([chunk(delta={"tool_calls": [call]}), finish("tool_calls"), DONE], answer("Done."))
    _, _, _, search = await run(open_stream)
    assert search.queries == ["vat"]


async def test_missing_call_ids_get_one_so_results_match(provider, open_stream):
    call = {"index": 0, "function": {"name": "search_help_center", "arguments": '{"query": "x"}'}}
    provider.queue([chunk(delta={"tool_calls": [call]}), finish("tool_calls"), DONE], answer("Done."))
    await run(open_stream)
    messages = provider.requests[1].body["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == messages[-1]["tool_call_id"] != ""


async def test_empty_arguments_are_an_empty_object(provider, open_stream):
    calls = []

    async def no_args():
        calls.append(True)
        return {"ok": True}

    tool = Tool("ping", "Ping.", {"type": "object", "properties": {}}, no_args)
    provider.queue([tool_fragment(0, "c1", "ping", ""), finish("tool_calls"), DONE], answer("Pong."))
    loop = RoundLoop(open_stream, [tool], Sink(), 5)
    outcome = await loop.run(MESSAGES)
    assert outcome.status == "completed"
    assert calls == [True]


# --- tool errors go back to the model -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "error_part"),
    [
        ("delete_everything", '{"query": "x"}', "unknown tool"),
        ("search_help_center", '{"query": "unterminated', "not valid JSON"),
        ("search_help_center", '["a", "list"]', "JSON object"),
        ("search_help_center", '{"wrong": "x"}', "bad arguments"),
    ],
)
async def test_bad_tool_calls_become_error_results(provider, open_stream, name, arguments, error_part):
    provider.queue(
        [tool_fragment(0, "c1", name, arguments), finish("tool_calls"), DONE],
        answer("Sorry, let me answer without it."),
    )
    outcome, loop, sink, search = await run(open_stream)
    assert outcome.status == "completed"
    assert search.queries == []
    assert sink.tools == [(name, "started"), (name, "failed")]
    [result] = tool_messages(provider.requests[1].body)
    assert error_part in json.loads(result["content"])["error"]
    assert error_part in loop.rounds[0].tool_calls[0].error
    # What goes back in history must parse, or strict providers reject it.
    json.loads(provider.requests[1].body["messages"][-2]["tool_calls"][0]["function"]["arguments"])


async def test_a_tool_that_raises_becomes_an_error_result(provider, open_stream):
    provider.queue(tool_round([("c1", "search_help_center", {"query": "x"})]), answer("The search is down."))
    outcome, _, sink, _ = await run(open_stream, search=Search(fail=True))
    assert outcome.status == "completed"
    assert sink.tools[-1] == ("search_help_center", "failed")
    [result] = tool_messages(provider.requests[1].body)
    assert "search index unavailable" in json.loads(result["content"])["error"]


# --- the round cap ------------------------------------------------------------------------


async def test_the_last_round_is_asked_to_answer_without_tools(provider, open_stream):
    provider.queue(
        tool_round([("c1", "search_help_center", {"query": "a"})]),
        answer("Here is what I found."),
    )
    outcome, _, _, _ = await run(open_stream, max_rounds=2)
    assert outcome.status == "completed"
    assert provider.requests[0].body["tool_choice"] == "auto"
    assert provider.requests[1].body["tool_choice"] == "none"


async def test_a_model_that_keeps_calling_tools_fails_at_the_cap(provider, open_stream):
    provider.queue(
        tool_round([("c1", "search_help_center", {"query": "a"})]),
        tool_round([("c2", "search_help_center", {"query": "b"})]),
    )
    outcome, loop, _, search = await run(open_stream, max_rounds=2)
    assert (outcome.status, outcome.error) == ("failed", "round_limit")
    assert search.queries == ["a"]  # the last round's calls are not run
    assert len(loop.rounds) == len(provider.requests) == 2


# --- closing the provider request ---------------------------------------------------------


async def test_cancelling_mid_stream_closes_the_provider_request(provider, kept_streams):
    release = asyncio.Event()
    provider.queue([text("Streaming"), WaitFor(release), finish("stop"), DONE])
    loop, _ = await stop_after_first_text(kept_streams)
    request = await provider.wait_for_request(1)
    async with asyncio.timeout(5):
        await request.hung_up.wait()
    assert request.hung_up_early
    assert loop.text == "Streaming"
    assert loop.rounds[0].ended_at is not None
    assert loop.rounds[0].usage.estimated is True


async def test_cancelling_while_the_sink_is_busy_still_closes_the_request(provider, kept_streams):
    """A cancel that lands outside the stream read (here, in the sink) must
    close the response too: leaving `async for` alone would not."""
    provider.queue([text("a"), text("b"), WaitFor(asyncio.Event()), finish("stop"), DONE])
    in_sink = asyncio.Event()

    class SlowSink(Sink):
        async def delta(self, text):
            await super().delta(text)
            in_sink.set()
            await asyncio.Event().wait()

    loop = RoundLoop(kept_streams, [], SlowSink(), 5)
    task = asyncio.create_task(loop.run(MESSAGES))
    request = await provider.wait_for_request(1)
    async with asyncio.timeout(5):
        await in_sink.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(5):
        await request.hung_up.wait()
    assert request.hung_up_early


async def test_a_stall_closes_the_provider_request(provider, kept_streams, settings):
    settings.KOOKEE_PROVIDER_STALL_TIMEOUT = 0.2
    provider.queue([text("Half of it"), WaitFor(asyncio.Event())])
    outcome, loop, _, _ = await run(kept_streams)
    assert (outcome.status, outcome.error) == ("failed", "provider_stalled")
    assert loop.text == "Half of it"
    request = await provider.wait_for_request(1)
    async with asyncio.timeout(5):
        await request.hung_up.wait()
    assert request.hung_up_early


async def test_a_fault_mid_stream_closes_the_provider_request(provider, kept_streams):
    # The provider holds its end open after the error: only our close ends the request.
    provider.queue([text("Partial"), {"error": {"message": "overloaded"}}, WaitFor(asyncio.Event())])
    outcome, loop, _, _ = await run(kept_streams)
    assert (outcome.status, outcome.error) == ("failed", "provider_error")
    assert loop.text == "Partial"
    request = await provider.wait_for_request(1)
    async with asyncio.timeout(5):
        await request.hung_up.wait()
    assert request.hung_up_early


# --- text whose send fails ----------------------------------------------------------------


async def test_text_whose_send_fails_is_taken_back(provider, open_stream):
    """The visitor never got it: the loop raises, and its text (what the
    caller stores) holds only what was sent."""

    class FailingSink(Sink):
        async def delta(self, text):
            if self.deltas:
                raise ConnectionError("the visitor is gone")
            await super().delta(text)

    sink = FailingSink()
    provider.queue([text("Sent."), WaitFor(sink.got_text), text(" Never sent."), finish("stop"), DONE])
    loop = RoundLoop(open_stream, [], sink, 5)
    with pytest.raises(ConnectionError):
        await loop.run(MESSAGES)
    assert loop.text == sink.text == "Sent."


@pytest.mark.django_db(transaction=True)
async def test_a_turn_stores_none_of_the_text_whose_send_failed(use_provider, monkeypatch):
    """The same, end to end: the stored answer is what the tabs were sent.
    No tab can fail a send (the hub delivers to each quietly), so the hub's
    publish, the one door to the visitor, is made to fail for one delta."""
    publish = hub.Hub.publish

    async def publish_but_fail(self, broadcast, frame):
        if frame["type"] == "delta" and "Never sent" in frame["text"]:
            raise RuntimeError("the delta could not be published")
        await publish(self, broadcast, frame)

    monkeypatch.setattr(hub.Hub, "publish", publish_but_fail)
    more = asyncio.Event()
    use_provider.queue([text("Sent."), WaitFor(more), text(" Never sent."), finish("stop"), DONE])
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("hi")
        await chat.receive_until("delta", turn_id=turn_id)
        more.set()
        assert (await chat.receive_until("error", turn_id=turn_id))["code"] == "server_error"
        ended = await chat.finish(turn_id)  # checks that the stored text is the deltas sent
    finally:
        await chat.close()
    assert ended["status"] == "failed"
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    assert turn.assistant_text == chat.text_of(turn_id) == "Sent."


# --- regressions from review: whitespace, odd characters, broken tails --------------------


async def test_a_whitespace_only_tool_round_adds_nothing(provider, open_stream):
    provider.queue(
        [text("\n\n"), tool_fragment(0, "c1", "search_help_center", '{"query": "x"}'), finish("tool_calls"), DONE],
        answer("Found it."),
    )
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Found it."


async def test_many_trailing_newlines_still_make_one_blank_line(provider, open_stream):
    provider.queue(
        [text("Let me check.\n\n\n"), tool_fragment(0, "c1", "search_help_center", "{}"), finish("tool_calls"), DONE],
        answer("Found it."),
    )
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Let me check.\n\nFound it."


async def test_a_single_answer_keeps_its_own_whitespace(provider, open_stream):
    provider.queue([text(" Hello"), text(" there.\n"), finish("stop"), usage(1, 2), DONE])
    _, loop, sink, _ = await run(open_stream)
    assert sink.text == loop.text == " Hello there.\n"


async def test_a_stopped_answer_holds_no_unsent_text(provider, open_stream):
    """Whitespace held back at Stop was never sent, so it is not stored."""
    release = asyncio.Event()
    provider.queue([text("Line one.\n"), WaitFor(release), text("never"), finish("stop"), DONE])
    loop, sink = await stop_after_first_text(open_stream)
    assert sink.text == loop.text == "Line one."


async def test_an_emoji_split_across_chunks_arrives_whole(provider, open_stream):
    provider.queue([text("Smile \ud83d"), text("\ude00 done"), finish("stop"), DONE])
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "Smile \U0001f600 done"


async def test_nul_and_lone_surrogates_are_replaced(provider, open_stream):
    provider.queue([text("a\x00b \udc00c"), finish("stop"), DONE])
    _, _, sink, _ = await run(open_stream)
    assert sink.text == "a\ufffdb \ufffdc"
    sink.text.encode("utf-8")  # storable and sendable


async def test_a_broken_tail_after_finish_reason_does_not_fail_the_round(provider, open_stream):
    provider.queue([text("All said."), finish("stop"), usage(9, 3), {"error": {"message": "late hiccup"}}])
    outcome, loop, _, _ = await run(open_stream)
    assert outcome.status == "completed"
    assert loop.rounds[0].usage == Usage(9, 3, False)


async def test_one_index_reused_by_whole_calls_without_ids(provider, open_stream):
    provider.queue(
        [
            tool_fragment(0, None, "search_help_center", '{"query": "a"}'),
            tool_fragment(0, None, "search_help_center", '{"query": "b"}'),
            finish("tool_calls"),
            DONE,
        ],
        answer("Done."),
    )
    _, _, _, search = await run(open_stream)
    assert search.queries == ["a", "b"]


async def test_a_providers_extra_call_fields_go_back_with_the_call(provider, open_stream):
    signature = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "search_help_center", "arguments": '{"query": "sso"}'},
        "extra_content": signature,
    }
    provider.queue([chunk(delta={"tool_calls": [call]}), finish("tool_calls"), DONE], answer("Done."))
    await run(open_stream)
    echoed = provider.requests[1].body["messages"][-2]["tool_calls"][0]
    assert echoed["extra_content"] == signature
    assert echoed["id"] == "c1"


async def test_a_round_stopped_mid_reasoning_estimates_its_output(provider, open_stream):
    # The visible text after the reasoning tells the test the reasoning was read.
    provider.queue([chunk(delta={"reasoning_content": "x" * 400}), text("A"), WaitFor(asyncio.Event())])
    loop, _ = await stop_after_first_text(open_stream)
    assert loop.rounds[0].usage.output_tokens == 101  # 401 characters, ~4 per token
    assert loop.rounds[0].usage.estimated is True


async def test_running_usage_on_a_stopped_round_is_an_estimate(provider, open_stream):
    provider.queue([text("Hello world, this is long", usage=_usage(40, 1)), WaitFor(asyncio.Event())])
    loop, _ = await stop_after_first_text(open_stream)
    usage_now = loop.rounds[0].usage
    assert (usage_now.input_tokens, usage_now.estimated) == (40, True)
    assert usage_now.output_tokens == 7  # 25 characters, more than the stale running total of 1

"""The streaming round loop: one streamed model call per round, no probing.

A stream yields batches: the chunks that arrived together (see provider.py).
Each round streams text to the visitor as it arrives and assembles any tool
calls from their fragments; when the round asked for tools, they run, their
results go back to the model, and the next round continues the same answer.

This module knows the Chat Completions chunk format and nothing of Django:
the caller hands it a function that opens a stream, the tools, and a sink
that receives what the visitor should see and what should be recorded.
Provider streams differ (usage on every chunk or on none, finish_reason on
its own chunk, fragments without index...); every reader here is lenient.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from billing.tokens import CHARS_PER_TOKEN, Sample
from chat.text import storable
from chat.vocabulary import Code, Status, ToolStatus

PARAGRAPH_BREAK = "\n\n"
# A round cut short is estimated from its characters (billing/tokens.py).
# Providers also bill each message's framing (role, separators) and the tool
# definitions, which they render into the prompt.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_PROMPT = 3  # the reply's priming ("<|start|>assistant")


class StreamError(Exception):
    """A provider fault with a stable code. `billable` is false when the
    request was refused before the provider generated anything."""

    def __init__(self, code: str, detail: str, billable: bool = True) -> None:
        # Only the code in its message: a logged traceback must not print the
        # detail, the provider's words, which can quote the visitor's.
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.billable = billable


class EndTurn(Exception):
    """Raised by a sink between rounds to end the turn there, failed with
    `code` (a daily budget that cannot hold the next round)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[..., Awaitable[Any]]

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass
class ToolRequest:
    """A tool call the model asked for, assembled from its fragments; its
    result or error once it ran. (Stored as chat.models.ToolCall.)"""

    call_id: str
    name: str = ""
    arguments: str = ""
    # Fields a provider attaches to a call and expects back with it (Gemini's
    # thought signatures in "extra_content", for one).
    extra: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str = ""


@dataclass(frozen=True)
class Ratios:
    """Characters per token of a model's prompts and of its output."""

    input: float = CHARS_PER_TOKEN
    output: float = CHARS_PER_TOKEN


@dataclass
class Usage:
    input_tokens: int
    output_tokens: int
    estimated: bool
    # Parts of the two above, as the provider reported them (0 when not).
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass
class Round:
    number: int
    prompt_chars: int  # what the provider tokenizes: message texts, tool definitions
    prompt_messages: int = 0
    ratios: Ratios = Ratios()  # the estimate's, for what the provider does not report
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    first_delta_at: datetime | None = None
    ended_at: datetime | None = None
    finish_reason: str = ""
    content: str = ""  # the model's own text this round, as generated
    reasoning_chars: int = 0  # reasoning the provider streamed but we do not show
    reported_usage: Any = None  # the provider's usage object, if it sent one
    refused: bool = False  # the request failed before the provider generated anything
    tool_calls: list[ToolRequest] = field(default_factory=list)
    # Text of this round not shown yet: leading whitespace, half a surrogate pair.
    pending: str = ""
    carry: str = ""
    shown: bool = False

    @property
    def usage(self) -> Usage:
        """The provider's figures; an estimate for any part it did not report."""
        if self.refused and self.reported_usage is None:
            return Usage(0, 0, False)
        reported = _read_usage(self.reported_usage)
        input_tokens, output_tokens = reported.input_tokens, reported.output_tokens
        estimated_input = math.ceil(self.prompt_chars / self.ratios.input) + self.framing_tokens
        estimated_output = math.ceil(self.output_chars / self.ratios.output)
        if not self.finish_reason:
            # Cut short: whatever was reported was a running total at best.
            input_tokens = estimated_input if input_tokens is None else input_tokens
            output_tokens = max(output_tokens or 0, estimated_output)
            estimated = True
        else:
            estimated = input_tokens is None or output_tokens is None
            input_tokens = estimated_input if input_tokens is None else input_tokens
            output_tokens = estimated_output if output_tokens is None else output_tokens
        return Usage(
            input_tokens,
            output_tokens,
            estimated,
            cached_input_tokens=min(reported.cached, input_tokens),
            reasoning_tokens=min(reported.reasoning, output_tokens),
        )

    @property
    def framing_tokens(self) -> int:
        return _framing(self.prompt_messages)

    @property
    def shown_chars(self) -> int:
        """What the model generated besides reasoning: text and tool calls."""
        return len(self.content) + sum(len(c.name) + len(c.arguments) for c in self.tool_calls)

    @property
    def output_chars(self) -> int:
        """What the model generated: text, tool calls, streamed reasoning."""
        return self.shown_chars + self.reasoning_chars

    def sample(self) -> Sample | None:
        """This round's calibration sample: only a whole round with reported
        usage is one."""
        reported = _read_usage(self.reported_usage)
        if not self.finish_reason or reported.input_tokens is None or reported.output_tokens is None:
            return None
        output_chars, output_tokens = self.output_chars, reported.output_tokens
        if reported.reasoning:
            # Learnt from the text and tool calls alone: the reasoning counted
            # may never have been streamed (OpenAI's o-series), or only as a
            # summary far shorter than what was billed.
            output_chars, output_tokens = self.shown_chars, output_tokens - reported.reasoning
        return Sample(
            prompt_chars=self.prompt_chars,
            prompt_tokens=reported.input_tokens - self.framing_tokens,
            output_chars=output_chars,
            output_tokens=output_tokens,
        )


@dataclass(frozen=True)
class _Reported:
    input_tokens: int | None
    output_tokens: int | None
    cached: int
    reasoning: int


def _read_usage(usage: Any) -> _Reported:
    """A provider's usage object, in Chat Completions terms: the input with
    its cached part, the output with its reasoning part."""
    input_tokens = _token_count(usage, "prompt_tokens")
    if input_tokens is None:
        # Anthropic's shape: its input_tokens leave out what the cache served
        # or stored, which are billed input all the same.
        input_tokens = _token_count(usage, "input_tokens")
        if input_tokens is not None:
            for name in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                input_tokens += _token_count(usage, name) or 0
    output_tokens = _token_count(usage, "completion_tokens")
    if output_tokens is None:
        output_tokens = _token_count(usage, "output_tokens")
    reasoning = _reasoning_tokens(usage)
    total = _token_count(usage, "total_tokens")
    if (
        reasoning
        and input_tokens is not None
        and output_tokens is not None
        and total == input_tokens + output_tokens + reasoning
    ):
        # Reasoning counted beside the output, not in it (xAI): billed output.
        output_tokens += reasoning
    return _Reported(input_tokens, output_tokens, _cached_tokens(usage), reasoning)


@dataclass
class Outcome:
    status: str
    error: str = ""  # a short, stable code when status is failed
    detail: str = ""


class Sink(Protocol):
    async def delta(self, text: str) -> None: ...
    async def tool(self, name: str, status: str) -> None: ...
    # A round whose tools ran ended; another follows, whose prompt is
    # estimated at `next_prompt_tokens`. It may raise EndTurn instead. (Not
    # called for the last round: whoever ends the turn records it from
    # `RoundLoop.rounds`.)
    async def round_ended(self, round: Round, next_prompt_tokens: int) -> None: ...


def spec_chars(tools: Sequence[Tool]) -> int:
    """The characters of the tool definitions, which are part of every prompt."""
    return len(json.dumps([tool.spec() for tool in tools], separators=(",", ":"))) if tools else 0


def prompt_tokens(messages: Sequence[Mapping[str, Any]], tool_chars: int, ratios: Ratios) -> int:
    """What a provider will count for a prompt, estimated as a round that
    was cut short is: its characters at the model's ratio, and the framing."""
    return math.ceil((tool_chars + sum(map(_message_chars, messages))) / ratios.input) + _framing(len(messages))


def _framing(messages: int) -> int:
    return TOKENS_PER_MESSAGE * messages + TOKENS_PER_PROMPT if messages else 0


OpenStream = Callable[..., Awaitable[Any]]


class ToolCallAssembler:
    """Rebuilds tool calls from streamed fragments.

    Fragments are keyed by `index`; `id` and `name` are taken from the first
    fragment that carries them and never concatenated; `arguments` are. Some
    providers omit `index` (fall back on the id), reuse an index for a call
    with another id (a new call), or send empty strings for absent fields.
    """

    def __init__(self) -> None:
        self.calls: list[ToolRequest] = []
        self._by_index: dict[Any, ToolRequest] = {}

    def add(self, fragment: Any) -> None:
        call_id = _field(fragment, "id") or ""
        function = _field(fragment, "function")
        name = _field(function, "name") or ""
        arguments = _field(function, "arguments")
        call = self._call_for(_field(fragment, "index"), call_id, name, arguments)
        if call_id and not call.call_id:
            call.call_id = call_id
        if name and not call.name:
            call.name = name
        for key, value in _extra_fields(fragment).items():
            call.extra.setdefault(key, value)
        if isinstance(arguments, str):
            call.arguments += arguments
        elif arguments is not None:
            # A few servers send the arguments as an object, whole.
            call.arguments = json.dumps(arguments)

    def _call_for(self, index: Any, call_id: str, name: str, arguments: Any) -> ToolRequest:
        if index is None:
            return self._call_by_id(call_id, name, arguments)
        call = self._by_index.get(index)
        if (
            call is None
            or (call_id and call.call_id and call.call_id != call_id)
            or (not call_id and _starts_another(call, name, arguments))
        ):
            call = self._new_call()
            self._by_index[index] = call
        return call

    def _call_by_id(self, call_id: str, name: str, arguments: Any) -> ToolRequest:
        for call in self.calls:
            if call_id and call.call_id == call_id:
                return call
        if not call_id and self.calls and not _starts_another(self.calls[-1], name, arguments):
            return self.calls[-1]  # a continuation of the latest call
        return self._new_call()

    def _new_call(self) -> ToolRequest:
        call = ToolRequest(call_id="")
        self.calls.append(call)
        return call


def _starts_another(latest: ToolRequest, name: str, arguments: Any) -> bool:
    """A named fragment with arguments but no id of its own, after a call
    that is already complete, is a new call (whole calls, one per chunk)."""
    if not name or not arguments or not latest.name:
        return False
    try:
        json.loads(latest.arguments)
    except ValueError:
        return False
    return True


class RoundLoop:
    """Runs one turn: rounds until the model answers, or the cap is reached.

    `text` is everything sent to the visitor, and `rounds` every model call
    made, so that a caller whose task is cancelled can still record both.
    """

    def __init__(
        self,
        open_stream: OpenStream,
        tools: Sequence[Tool],
        sink: Sink,
        max_rounds: int,
        ratios: Callable[[], Ratios] = Ratios,
    ) -> None:
        self.open_stream = open_stream
        self.tools = {tool.name: tool for tool in tools}
        self.specs = [tool.spec() for tool in tools]
        # Tool definitions are part of every prompt; counted once.
        self.spec_chars = spec_chars(tools)
        self.ratios = ratios
        self.sink = sink
        self.max_rounds = max(1, max_rounds)
        self.rounds: list[Round] = []
        self.text = ""  # everything sent to the visitor
        self._held = ""  # whitespace received after it, not sent yet

    async def run(self, messages: list[dict[str, Any]]) -> Outcome:
        messages = list(messages)
        for number in range(1, self.max_rounds + 1):
            last = number == self.max_rounds
            rnd = Round(
                number=number,
                prompt_chars=self.spec_chars + sum(map(_message_chars, messages)),
                prompt_messages=len(messages),
                ratios=self.ratios(),
            )
            self.rounds.append(rnd)
            calls, outcome = await self._stream(rnd, messages, last)
            if outcome is None and calls and last:
                # The model ignored tool_choice="none" on the last round.
                outcome = Outcome(Status.FAILED, Code.ROUND_LIMIT, "the model still wanted tools")
            if outcome is not None or not calls:
                # The last round is recorded with the turn's end, in one
                # transaction (the caller has `rounds`).
                await self._flush()
                return outcome or Outcome(Status.COMPLETED)
            messages.append(_assistant_message(rnd))
            for call in calls:
                messages.append(await self._run_tool(call))
            try:
                await self.sink.round_ended(rnd, prompt_tokens(messages, self.spec_chars, self.ratios()))
            except EndTurn as end:
                await self._flush()
                return Outcome(Status.FAILED, end.code, "a daily budget could not hold the next round")
        raise AssertionError("unreachable: the last round always returns")

    async def _stream(
        self, rnd: Round, messages: list[dict[str, Any]], last: bool
    ) -> tuple[list[ToolRequest], Outcome | None]:
        """Streams one round. Returns its tool calls and, if the turn must end, why."""
        assembler = ToolCallAssembler()
        rnd.tool_calls = assembler.calls
        try:
            outcome = await self._read(rnd, messages, last, assembler)
        finally:
            rnd.ended_at = _now()
        if outcome is not None:
            return [], outcome
        if not rnd.finish_reason:
            return [], Outcome(Status.FAILED, Code.INCOMPLETE_STREAM, "the stream ended without finish_reason")
        if rnd.finish_reason == "length":
            return [], Outcome(Status.TRUNCATED)
        # Decide from the fragments: some providers say "stop" after tool calls.
        return [c for c in assembler.calls if c.name or c.arguments or c.call_id], None

    async def _read(
        self, rnd: Round, messages: list[dict[str, Any]], last: bool, assembler: ToolCallAssembler
    ) -> Outcome | None:
        """Reads one round's stream; returns why the turn failed, if it did.

        Only the provider's faults are caught here; the sink's propagate.
        """
        try:
            stream = await self.open_stream(
                messages=messages,
                tools=self.specs or None,
                tool_choice="none" if last else "auto",
            )
        except Exception as exc:
            rnd.refused = isinstance(exc, StreamError) and not exc.billable
            return _failure(exc)
        # `async with` closes the provider's response on every exit,
        # cancellation included; leaving the loop alone does not.
        async with stream:
            batches = aiter(stream)
            while True:
                try:
                    batch = await anext(batches)
                except StopAsyncIteration:
                    return None
                except Exception as exc:
                    # After finish_reason the round is whole; only its tail broke.
                    return None if rnd.finish_reason else _failure(exc)
                # The chunks that arrived together go on as one delta: the
                # visitor sees the same text, sooner, in fewer frames.
                text = "".join([self._take_chunk(rnd, chunk, assembler) for chunk in batch])
                if text:
                    await self._forward(rnd, text)

    def _take_chunk(self, rnd: Round, chunk: Any, assembler: ToolCallAssembler) -> str:
        """Reads usage, finish_reason, text and tool-call fragments from a chunk."""
        # Groq has sent usage under "x_groq" rather than at the top level.
        usage = _field(chunk, "usage") or _field(_field(chunk, "x_groq"), "usage")
        if usage is not None:
            rnd.reported_usage = usage  # cumulative where repeated: keep the last
        text = ""
        for choice in _field(chunk, "choices") or []:
            if _field(choice, "index") not in (0, None):
                continue  # only one answer was asked for
            finish_reason = _field(choice, "finish_reason")
            if finish_reason:
                rnd.finish_reason = str(finish_reason)
            delta = _field(choice, "delta")
            content = _field(delta, "content")
            if isinstance(content, str):
                text += content
            for name in ("reasoning_content", "reasoning"):
                reasoning = _field(delta, name)
                if isinstance(reasoning, str):
                    rnd.reasoning_chars += len(reasoning)
            fragments = _field(delta, "tool_calls") or []
            for fragment in fragments:
                assembler.add(fragment)
            if (content or fragments) and rnd.first_delta_at is None:
                rnd.first_delta_at = _now()
        return text

    async def _forward(self, rnd: Round, text: str) -> None:
        """Sends a round's text on, so that whatever the model's whitespace,
        rounds are joined by exactly one blank line.

        Whitespace at the end of what was sent is held back until more text
        follows (or the turn ends); a round's leading whitespace is held until
        it says something, and dropped if it never does.
        """
        text, rnd.carry = rnd.carry + text, ""
        if "\ud800" <= text[-1] <= "\udbff":
            text, rnd.carry = text[:-1], text[-1]  # half an emoji: wait for the rest
        text = storable(text)
        rnd.content += text
        if not rnd.shown:
            text = rnd.pending + text
            if not text.strip():
                rnd.pending = text
                return
            rnd.pending, rnd.shown = "", True
            if self.text:  # earlier rounds said something
                self._held, text = "", PARAGRAPH_BREAK + text.lstrip()
        out = self._held + text
        body = out.rstrip()
        self._held = out[len(body) :]
        if body:
            await self._send(body)

    async def _flush(self) -> None:
        """Sends the whitespace held back at the end of the answer."""
        held, self._held = self._held, ""
        if held:
            await self._send(held)

    async def _send(self, text: str) -> None:
        # Recorded before sending: a cancellation that lands during the send
        # cannot tell whether it went out, and text handed on counts as seen.
        # A send that fails did not go out.
        self.text += text
        try:
            await self.sink.delta(text)
        except Exception:
            self.text = self.text[: -len(text)]
            raise

    async def _run_tool(self, call: ToolRequest) -> dict[str, Any]:
        await self.sink.tool(call.name, ToolStatus.STARTED)
        try:
            call.result = await self._invoke(call)
        except asyncio.CancelledError:
            call.error = "cancelled"
            raise
        except Exception as exc:
            # The model gets the error as the tool's result and can recover.
            call.error = describe(exc)
        await self.sink.tool(call.name, ToolStatus.FAILED if call.error else ToolStatus.FINISHED)
        content = {"error": call.error} if call.error else call.result
        return {"role": "tool", "tool_call_id": call.call_id, "content": json.dumps(content)}

    async def _invoke(self, call: ToolRequest) -> Any:
        tool = self.tools.get(call.name)
        if tool is None:
            raise LookupError(f"unknown tool {call.name!r}")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            raise ValueError(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise ValueError("arguments must be a JSON object")
        try:
            return await tool.run(**arguments)
        except TypeError as exc:
            raise ValueError(f"bad arguments for {call.name}: {exc}") from None


def _assistant_message(rnd: Round) -> dict[str, Any]:
    for number, call in enumerate(rnd.tool_calls, start=1):
        # Some servers omit ids; the tool results must still point at a call.
        call.call_id = call.call_id or f"call_{rnd.number}_{number}"
    return {
        "role": "assistant",
        "content": rnd.content or None,
        "tool_calls": [
            {
                **call.extra,
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _json_or_empty(call.arguments)},
            }
            for call in rnd.tool_calls
        ],
    }


def _json_or_empty(arguments: str) -> str:
    # Providers reject history whose arguments do not parse; the error result
    # tells the model what went wrong.
    try:
        json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments


def _failure(exc: Exception) -> Outcome:
    if isinstance(exc, StreamError):
        return Outcome(Status.FAILED, exc.code, exc.detail)
    return Outcome(Status.FAILED, _error_code(exc), describe(exc))


KNOWN_CALL_FIELDS = frozenset({"index", "id", "type", "function"})


def _extra_fields(fragment: Any) -> dict[str, Any]:
    if isinstance(fragment, Mapping):
        extra = {k: v for k, v in fragment.items() if k not in KNOWN_CALL_FIELDS}
    else:
        extra = dict(getattr(fragment, "model_extra", None) or {})
    return {k: v for k, v in extra.items() if v is not None}


def _field(obj: Any, name: str) -> Any:
    """Reads a field from a parsed chunk part, tolerating absent or null parts."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value


def _token_count(usage: Any, name: str) -> int | None:
    value = _field(usage, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _cached_tokens(usage: Any) -> int:
    """Prompt tokens served from the provider's cache, under any of the names
    providers use (OpenAI and most compatible servers, DeepSeek, Moonshot,
    Anthropic-style)."""
    for parent, name in (
        ("prompt_tokens_details", "cached_tokens"),
        ("input_tokens_details", "cached_tokens"),
        (None, "prompt_cache_hit_tokens"),
        (None, "cache_read_input_tokens"),
        (None, "cached_tokens"),
    ):
        value = _token_count(_field(usage, parent) if parent else usage, name)
        if value:
            return value
    return 0


def _reasoning_tokens(usage: Any) -> int:
    """Output tokens the model spent reasoning (included in completion_tokens)."""
    for parent in ("completion_tokens_details", "output_tokens_details", None):
        value = _token_count(_field(usage, parent) if parent else usage, "reasoning_tokens")
        if value:
            return value
    return 0


def _message_chars(message: Mapping[str, Any]) -> int:
    """The characters of a message that a tokenizer reads: its text, name and
    tool calls, not its JSON punctuation."""
    content = message.get("content")
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):
        chars = sum(len(part.get("text") or "") for part in content if isinstance(part, Mapping))
    else:
        chars = 0
    chars += len(message.get("name") or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        chars += len(function.get("name") or "") + len(function.get("arguments") or "")
    return chars


def _error_code(exc: Exception) -> str:
    if isinstance(exc, ValueError):  # a chunk that is not JSON
        return Code.BAD_STREAM
    return Code.PROVIDER_ERROR


def describe(exc: BaseException) -> str:
    """An exception in a line, for a stored error or a tool result: its type
    and message, cut short."""
    return f"{type(exc).__name__}: {exc}"[:200]


def _now() -> datetime:
    return datetime.now(UTC)

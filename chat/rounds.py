"""The streaming round loop: one streamed model call per round, no probing.

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

COMPLETED = "completed"
TRUNCATED = "truncated"
FAILED = "failed"
INTERRUPTED = "interrupted"

PARAGRAPH_BREAK = "\n\n"
# Without a tokenizer for every provider's model, estimate ~4 characters per
# token (OpenAI's rule of thumb for English) plus a few tokens per message.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


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
class ToolCall:
    call_id: str
    name: str = ""
    arguments: str = ""
    result: Any = None
    error: str = ""


@dataclass
class Usage:
    input_tokens: int
    output_tokens: int
    estimated: bool


@dataclass
class Round:
    number: int
    prompt_chars: int
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    first_delta_at: datetime | None = None
    ended_at: datetime | None = None
    finish_reason: str = ""
    content: str = ""  # the model's own text this round, as generated
    reported_usage: Any = None  # the provider's usage object, if it sent one
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def usage(self) -> Usage:
        """The provider's figures; an estimate for any part it did not report."""
        reported = self.reported_usage
        input_tokens = _token_count(reported, "prompt_tokens")
        output_tokens = _token_count(reported, "completion_tokens")
        estimated = input_tokens is None or output_tokens is None
        if input_tokens is None:
            input_tokens = math.ceil(self.prompt_chars / CHARS_PER_TOKEN)
        if output_tokens is None:
            generated = self.content + "".join(c.name + c.arguments for c in self.tool_calls)
            output_tokens = math.ceil(len(generated) / CHARS_PER_TOKEN)
        return Usage(input_tokens, output_tokens, estimated)


@dataclass
class Outcome:
    status: str
    error: str = ""  # a short, stable code when status is failed
    detail: str = ""


class Sink(Protocol):
    async def delta(self, text: str) -> None: ...
    async def tool(self, name: str, status: str) -> None: ...
    async def round_ended(self, round: Round) -> None: ...


OpenStream = Callable[..., Awaitable[Any]]


class ToolCallAssembler:
    """Rebuilds tool calls from streamed fragments.

    Fragments are keyed by `index`; `id` and `name` are taken from the first
    fragment that carries them and never concatenated; `arguments` are. Some
    providers omit `index` (fall back on the id), reuse an index for a call
    with another id (a new call), or send empty strings for absent fields.
    """

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._by_index: dict[Any, ToolCall] = {}

    def add(self, fragment: Any) -> None:
        call_id = _field(fragment, "id") or ""
        function = _field(fragment, "function")
        name = _field(function, "name") or ""
        arguments = _field(function, "arguments")
        call = self._call_for(_field(fragment, "index"), call_id, name)
        if call_id and not call.call_id:
            call.call_id = call_id
        if name and not call.name:
            call.name = name
        if isinstance(arguments, str):
            call.arguments += arguments
        elif arguments is not None:
            # A few servers send the arguments as an object, whole.
            call.arguments = json.dumps(arguments)

    def _call_for(self, index: Any, call_id: str, name: str) -> ToolCall:
        if index is None:
            return self._call_by_id(call_id, name)
        call = self._by_index.get(index)
        if call is None or (call_id and call.call_id and call.call_id != call_id):
            call = self._new_call()
            self._by_index[index] = call
        return call

    def _call_by_id(self, call_id: str, name: str) -> ToolCall:
        for call in self.calls:
            if call_id and call.call_id == call_id:
                return call
        if not call_id and self.calls and not _starts_another(self.calls[-1], name):
            return self.calls[-1]  # a continuation of the latest call
        return self._new_call()

    def _new_call(self) -> ToolCall:
        call = ToolCall(call_id="")
        self.calls.append(call)
        return call


def _starts_another(latest: ToolCall, name: str) -> bool:
    """A named fragment with neither index nor id, after a call that is
    already complete, is a new call (whole calls sent one per chunk)."""
    if not name or not latest.name:
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
    ) -> None:
        self.open_stream = open_stream
        self.tools = {tool.name: tool for tool in tools}
        self.sink = sink
        self.max_rounds = max(1, max_rounds)
        self.rounds: list[Round] = []
        self.text = ""

    async def run(self, messages: list[dict[str, Any]]) -> Outcome:
        messages = list(messages)
        for number in range(1, self.max_rounds + 1):
            last = number == self.max_rounds
            rnd = Round(number=number, prompt_chars=_prompt_chars(messages))
            self.rounds.append(rnd)
            calls, outcome = await self._stream(rnd, messages, last)
            if outcome is None and calls and last:
                # The model ignored tool_choice="none" on the last round.
                outcome = Outcome(FAILED, "round_limit", "the model still wanted tools")
            if outcome is not None or not calls:
                await self.sink.round_ended(rnd)
                return outcome or Outcome(COMPLETED)
            messages.append(_assistant_message(rnd))
            for call in calls:
                messages.append(await self._run_tool(call))
            await self.sink.round_ended(rnd)
        raise AssertionError("unreachable: the last round always returns")

    async def _stream(
        self, rnd: Round, messages: list[dict[str, Any]], last: bool
    ) -> tuple[list[ToolCall], Outcome | None]:
        """Streams one round. Returns its tool calls and, if the turn must end, why."""
        assembler = ToolCallAssembler()
        rnd.tool_calls = assembler.calls
        pending = ""  # leading whitespace of a round that continues earlier text
        try:
            stream = await self.open_stream(
                messages=messages,
                tools=[tool.spec() for tool in self.tools.values()] or None,
                tool_choice="none" if last else "auto",
            )
            # `async with` closes the provider's response on every exit,
            # cancellation included; leaving `async for` alone does not.
            async with stream:
                async for chunk in stream:
                    text = self._take_chunk(rnd, chunk, assembler)
                    if text:
                        pending = await self._forward(rnd, pending + text)
        except Exception as exc:  # the provider failed: the turn fails, it does not crash
            return [], Outcome(FAILED, _error_code(exc), _describe(exc))
        finally:
            rnd.ended_at = _now()
        if not rnd.finish_reason:
            return [], Outcome(FAILED, "incomplete_stream", "the stream ended without finish_reason")
        if rnd.finish_reason == "length":
            return [], Outcome(TRUNCATED)
        # Decide from the fragments: some providers say "stop" after tool calls.
        return [c for c in assembler.calls if c.name or c.arguments or c.call_id], None

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
            fragments = _field(delta, "tool_calls") or []
            for fragment in fragments:
                assembler.add(fragment)
            if (content or fragments) and rnd.first_delta_at is None:
                rnd.first_delta_at = _now()
        return text

    async def _forward(self, rnd: Round, text: str) -> str:
        """Sends text to the visitor; returns what is held back for later."""
        sent = text
        if not rnd.content and self.text:
            if not text.strip():
                return text  # hold whitespace until the round says something
            text = text.lstrip()
            sent = _separator(self.text) + text
        rnd.content += text
        # Record before sending: the text counts as seen once it is handed on.
        self.text += sent
        await self.sink.delta(sent)
        return ""

    async def _run_tool(self, call: ToolCall) -> dict[str, Any]:
        await self.sink.tool(call.name, "started")
        try:
            call.result = await self._invoke(call)
        except asyncio.CancelledError:
            call.error = "cancelled"
            raise
        except Exception as exc:
            # The model gets the error as the tool's result and can recover.
            call.error = _describe(exc)
        await self.sink.tool(call.name, "failed" if call.error else "finished")
        content = {"error": call.error} if call.error else call.result
        return {"role": "tool", "tool_call_id": call.call_id, "content": json.dumps(content)}

    async def _invoke(self, call: ToolCall) -> Any:
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


def _separator(sent: str) -> str:
    """What makes exactly one blank line after the text sent so far."""
    trailing = sent[len(sent.rstrip()) :]
    return "\n" * max(0, len(PARAGRAPH_BREAK) - trailing.count("\n"))


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
    return value if isinstance(value, int) and value >= 0 else None


def _prompt_chars(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages)) + TOKENS_PER_MESSAGE * CHARS_PER_TOKEN * len(messages)


def _error_code(exc: Exception) -> str:
    if isinstance(exc, ValueError):  # a chunk that is not JSON
        return "bad_stream"
    return "provider_error"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _now() -> datetime:
    return datetime.now(UTC)

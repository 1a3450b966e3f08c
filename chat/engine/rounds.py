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
The tool calls are rebuilt by assembler.py, a round's tokens counted by
usage.py, and a provider's fault given its code by provider_errors.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from billing.tokens import Sample
from chat.engine import provider_errors, sse
from chat.engine.assembler import ToolCallAssembler, ToolRequest
from chat.engine.coalescer import Coalescer
from chat.engine.provider_errors import StreamError, describe
from chat.engine.usage import (
    Ratios,
    Usage,
    calibration_sample,
    estimate_usage,
    message_chars,
    prompt_tokens,
    spec_chars,
)
from chat.text import storable
from chat.vocabulary import Code, Status, ToolStatus

PARAGRAPH_BREAK = "\n\n"


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
class Round:
    number: int
    prompt_chars: int  # what the provider tokenizes: message texts, tool definitions
    prompt_messages: int = 0
    ratios: Ratios = field(default_factory=Ratios)  # the estimate's, for what the provider does not report
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
        return estimate_usage(
            self.reported_usage,
            finished=bool(self.finish_reason),
            prompt_chars=self.prompt_chars,
            prompt_messages=self.prompt_messages,
            output_chars=self.output_chars,
            ratios=self.ratios,
        )

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
        if not self.finish_reason:
            return None
        return calibration_sample(
            self.reported_usage,
            prompt_chars=self.prompt_chars,
            prompt_messages=self.prompt_messages,
            output_chars=self.output_chars,
            shown_chars=self.shown_chars,
        )


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


OpenStream = Callable[..., Awaitable[Any]]


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
        window: float = 0.0,
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
        # Deltas gathered for `window` seconds go as one (coalescer.py),
        # unless the stream's reads are paced to the window already.
        self._coalescer = Coalescer(self._deliver, window) if window > 0 else None
        self._paced = False

    async def run(self, messages: list[dict[str, Any]]) -> Outcome:
        try:
            return await self._run(messages)
        finally:
            if self._coalescer is not None:
                self._coalescer.close()  # after a Stop: what was not sent was not seen

    async def _run(self, messages: list[dict[str, Any]]) -> Outcome:
        messages = list(messages)
        for number in range(1, self.max_rounds + 1):
            last = number == self.max_rounds
            rnd = Round(
                number=number,
                prompt_chars=self.spec_chars + sum(map(message_chars, messages)),
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
            return [], _failure(provider_errors.incomplete())
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
            fault = provider_errors.fault(exc)
            rnd.refused = not fault.billable
            return _failure(fault)
        # A stream read at most once per window (provider.Stream.paced)
        # brings a window's text per read: it goes out at once, without the
        # coalescer's task and timer.
        self._paced = getattr(stream, "paced", False) is True
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
                    return None if rnd.finish_reason else _failure(provider_errors.fault(exc))
                # The chunks that arrived together go on as one delta: the
                # visitor sees the same text, sooner, in fewer frames.
                text = "".join([self._take_chunk(rnd, chunk, assembler) for chunk in batch])
                if text:
                    await self._forward(rnd, text)

    def _take_chunk(self, rnd: Round, chunk: Any, assembler: ToolCallAssembler) -> str:
        """Reads usage, finish_reason, text and tool-call fragments from a chunk."""
        # Groq has sent usage under "x_groq" rather than at the top level.
        usage = sse.field(chunk, "usage") or sse.field(sse.field(chunk, "x_groq"), "usage")
        if usage is not None:
            rnd.reported_usage = usage  # cumulative where repeated: keep the last
        text = ""
        for choice in sse.field(chunk, "choices") or []:
            if sse.field(choice, "index") not in (0, None):
                continue  # only one answer was asked for
            finish_reason = sse.field(choice, "finish_reason")
            if finish_reason:
                rnd.finish_reason = str(finish_reason)
            delta = sse.field(choice, "delta")
            content = sse.field(delta, "content")
            if isinstance(content, str):
                text += content
            for name in ("reasoning_content", "reasoning"):
                reasoning = sse.field(delta, name)
                if isinstance(reasoning, str):
                    rnd.reasoning_chars += len(reasoning)
            fragments = sse.field(delta, "tool_calls") or []
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
        await self._drain()

    async def _send(self, text: str) -> None:
        if self._coalescer is None or self._paced:
            await self._deliver(text)
        else:
            self._coalescer.put(text)

    async def _drain(self) -> None:
        """Sends the text gathered for the visitor now (before a tool frame,
        and at the end)."""
        if self._coalescer is not None:
            await self._coalescer.drain()

    async def _deliver(self, text: str) -> None:
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
        await self._drain()
        await self.sink.tool(call.name, ToolStatus.STARTED)
        try:
            call.result = await self._invoke(call)
        except asyncio.CancelledError:
            call.error = "cancelled"
            raise
        except Exception as exc:
            # The model gets the error as the tool's result and can recover.
            call.error = describe(exc)
        # A result that reports an error (an action whose API failed) failed
        # too, though the model reads the whole of it.
        failed = call.error or (isinstance(call.result, dict) and call.result.get("error"))
        await self.sink.tool(call.name, ToolStatus.FAILED if failed else ToolStatus.FINISHED)
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


def _failure(fault: StreamError) -> Outcome:
    return Outcome(Status.FAILED, fault.code, fault.detail)


def _now() -> datetime:
    return datetime.now(UTC)

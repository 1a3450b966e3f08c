"""A model call's tokens: read from the usage a provider reports, in any of
the providers' shapes, and estimated from characters for what it does not
report (a round cut short, a provider that sends no usage, the next
prompt before it is asked for).

A round (rounds.Round) asks here for its usage and its calibration sample;
the budgets ask for a prompt's estimate. Django-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from billing.tokens import CHARS_PER_TOKEN, Sample
from chat.engine import sse

# A round cut short is estimated from its characters (billing/tokens.py).
# Providers also bill each message's framing (role, separators) and the tool
# definitions, which they render into the prompt.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_PROMPT = 3  # the reply's priming ("<|start|>assistant")


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


def estimate_usage(
    reported_usage: Any, *, finished: bool, prompt_chars: int, prompt_messages: int, output_chars: int, ratios: Ratios
) -> Usage:
    """A model call's usage: the provider's figures; an estimate for any
    part it did not report, or for all of it when the call did not finish."""
    reported = _read(reported_usage)
    input_tokens, output_tokens = reported.input_tokens, reported.output_tokens
    estimated_input = math.ceil(prompt_chars / ratios.input) + _framing(prompt_messages)
    estimated_output = math.ceil(output_chars / ratios.output)
    if not finished:
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


def calibration_sample(
    reported_usage: Any, *, prompt_chars: int, prompt_messages: int, output_chars: int, shown_chars: int
) -> Sample | None:
    """A finished model call's calibration sample, if the provider reported
    its usage. `shown_chars`: its output besides reasoning."""
    reported = _read(reported_usage)
    if reported.input_tokens is None or reported.output_tokens is None:
        return None
    output_tokens = reported.output_tokens
    if reported.reasoning:
        # Learnt from the text and tool calls alone: the reasoning counted
        # may never have been streamed (OpenAI's o-series), or only as a
        # summary far shorter than what was billed.
        output_chars, output_tokens = shown_chars, output_tokens - reported.reasoning
    return Sample(
        prompt_chars=prompt_chars,
        prompt_tokens=reported.input_tokens - _framing(prompt_messages),
        output_chars=output_chars,
        output_tokens=output_tokens,
    )


class _Specified(Protocol):
    def spec(self) -> dict[str, Any]: ...


def spec_chars(tools: Sequence[_Specified]) -> int:
    """The characters of the tool definitions, which are part of every prompt."""
    return len(json.dumps([tool.spec() for tool in tools], separators=(",", ":"))) if tools else 0


def prompt_tokens(messages: Sequence[Mapping[str, Any]], tool_chars: int, ratios: Ratios) -> int:
    """What a provider will count for a prompt, estimated as a round that
    was cut short is: its characters at the model's ratio, and the framing."""
    return math.ceil((tool_chars + sum(map(message_chars, messages))) / ratios.input) + _framing(len(messages))


def message_chars(message: Mapping[str, Any]) -> int:
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


def _framing(messages: int) -> int:
    return TOKENS_PER_MESSAGE * messages + TOKENS_PER_PROMPT if messages else 0


# --- the providers' usage objects -----------------------------------------------------------


@dataclass(frozen=True)
class _Reported:
    input_tokens: int | None
    output_tokens: int | None
    cached: int
    reasoning: int


def _read(usage: Any) -> _Reported:
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


def _token_count(usage: Any, name: str) -> int | None:
    value = sse.field(usage, name)
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
        value = _token_count(sse.field(usage, parent) if parent else usage, name)
        if value:
            return value
    return 0


def _reasoning_tokens(usage: Any) -> int:
    """Output tokens the model spent reasoning (included in completion_tokens)."""
    for parent in ("completion_tokens_details", "output_tokens_details", None):
        value = _token_count(sse.field(usage, parent) if parent else usage, "reasoning_tokens")
        if value:
            return value
    return 0

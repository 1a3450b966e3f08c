"""The frames a turn sends to the visitor's tabs (docs/turns.md), each built
in one place. They cross from the turn to the hub, the consumer and the
stored history: their shapes are typed here. Django-free."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, NotRequired, TypedDict

from chat.sources import results_of
from chat.vocabulary import HANDOFF_TOOL


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int
    estimated: bool


class Source(TypedDict):
    title: str
    url: str


class HandoffState(TypedDict):
    """A request for a person as the visitor's page sees it: whether Support
    has an address to reply to, never the address."""

    handoff_id: int
    status: str
    email: bool
    agent: str | None  # who answers, once claimed (chat/support/replies.py)


class TurnStarted(TypedDict):
    type: Literal["turn.started"]
    turn_id: int


class Delta(TypedDict):
    type: Literal["delta"]
    turn_id: int
    text: str


class ToolFrame(TypedDict):
    type: Literal["tool"]
    turn_id: int
    name: str
    status: str


class TurnError(TypedDict):
    type: Literal["error"]
    turn_id: int
    code: str
    message: str


class TurnEnded(TypedDict):
    type: Literal["turn.ended"]
    turn_id: int
    status: str
    generations: int
    usage: Usage
    # Beyond the contract: the articles the answer used, for the visitor.
    sources: list[Source]
    # Beyond the contract: why an interrupted turn stopped.
    reason: NotRequired[str]
    # Beyond the contract: the request for a person that the turn made.
    handoff: NotRequired[HandoffState]


def usage(input_tokens: int, output_tokens: int, estimated: bool) -> Usage:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "estimated": estimated}


def turn_ended(
    turn_id: int,
    status: str,
    generations: int,
    used: Usage,
    sources: list[Source],
    reason: str = "",
    handoff: HandoffState | None = None,
) -> TurnEnded:
    """The last frame of every turn, from the process that ran it or, when
    that process died, from what was stored."""
    frame: TurnEnded = {
        "type": "turn.ended",
        "turn_id": turn_id,
        "status": status,
        "generations": generations,
        "usage": used,
        "sources": sources,
    }
    if reason:
        frame["reason"] = reason
    if handoff:
        frame["handoff"] = handoff
    return frame


def handoff_requested(calls: Iterable[Any]) -> HandoffState | None:
    """The request for a person that request_human made among a turn's tool
    calls (the round loop's, or stored ones, whose results are JSON text)."""
    for result in reversed(results_of(calls, HANDOFF_TOOL)):
        if isinstance(result, dict) and all(key in result for key in ("handoff_id", "status", "email")):
            return {
                "handoff_id": result["handoff_id"],
                "status": result["status"],
                "email": result["email"],
                "agent": result.get("agent"),
            }
    return None


def turn_started(turn_id: int) -> TurnStarted:
    return {"type": "turn.started", "turn_id": turn_id}


def delta(turn_id: int, text: str) -> Delta:
    return {"type": "delta", "turn_id": turn_id, "text": text}


def tool(turn_id: int, name: str, status: str) -> ToolFrame:
    return {"type": "tool", "turn_id": turn_id, "name": name, "status": status}


def turn_error(turn_id: int, code: str, message: str) -> TurnError:
    """A failed turn's error, just before its turn.ended; each tab says the
    message again in its own visitor's language (chat/engine/consumers.py)."""
    return {"type": "error", "turn_id": turn_id, "code": code, "message": message}

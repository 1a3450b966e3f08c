"""Every frame the server sends to a visitor's tabs (the contract's "Server to
client", docs/turns.md), each built here and nowhere else, whichever room
sends it: the turn, the hub, the consumer's answers, Support's replies. Their
shapes are typed here. Django-free: the callers hand in plain values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NotRequired, TypedDict

from chat.sources import results_of, search_results, used_articles
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


# --- a turn's frames ----------------------------------------------------------------------------


class TurnStarted(TypedDict):
    type: Literal["turn.started"]
    turn_id: int


class Delta(TypedDict):
    type: Literal["delta"]
    turn_id: int
    text: str
    seq: NotRequired[int]  # numbered by the hub as it publishes it


class ToolFrame(TypedDict):
    type: Literal["tool"]
    turn_id: int
    name: str
    status: str
    seq: NotRequired[int]  # numbered by the hub as it publishes it
    title: NotRequired[str]  # an action's, for the visitor to read while it runs


class ActionConfirm(TypedDict):
    """An action that would change something waits for the visitor's yes."""

    type: Literal["action.confirm"]
    turn_id: int
    call_id: str
    action: str
    title: str
    arguments: dict[str, Any]


class TurnResume(TypedDict):
    type: Literal["turn.resume"]
    turn_id: int
    seq: int
    text: str


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


class Error(TypedDict):
    """A frame the server could not take; with a `turn_id`, why that turn
    failed, just before its turn.ended."""

    type: Literal["error"]
    code: str
    message: str
    turn_id: NotRequired[int]


# --- answers to the visitor's own frames --------------------------------------------------------


class History(TypedDict):
    type: Literal["history"]
    turns: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    more: bool
    handoff: Mapping[str, Any] | None
    before: NotRequired[int]


class FeedbackSaved(TypedDict):
    type: Literal["feedback.saved"]
    turn_id: int


class HandoffSaved(TypedDict):
    type: Literal["handoff.saved"]
    handoff_id: int
    status: str
    email: bool
    agent: str | None


# --- a person from Support in the chat (chat/support/replies.py) -------------------------------


class HandoffUpdated(TypedDict):
    type: Literal["handoff.updated"]
    handoff: HandoffState


class AgentMessage(TypedDict):
    type: Literal["agent.message"]
    id: int
    text: str
    author: str
    at: str  # ISO 8601


class VisitorMessage(TypedDict):
    """What the visitor wrote to the person who has their conversation, in
    every tab of theirs."""

    type: Literal["visitor.message"]
    id: int
    text: str
    at: str  # ISO 8601


class Identified(TypedDict):
    """The tab's `identify` proved who the visitor is (never the token)."""

    type: Literal["identified"]
    id: str
    name: str


# What a turn sends to its tabs, through the hub.
class ActionAnswered(TypedDict):
    """The visitor answered an action.confirm (in some tab): every tab closes its card."""

    type: Literal["action.answered"]
    turn_id: int
    call_id: str
    approve: bool


TurnFrame = TurnStarted | Delta | ToolFrame | ActionConfirm | ActionAnswered | TurnResume | TurnEnded | Error
# Every frame a tab can be sent.
Frame = TurnFrame | History | FeedbackSaved | HandoffSaved | HandoffUpdated | AgentMessage | VisitorMessage | Identified


def usage(input_tokens: int, output_tokens: int, estimated: bool) -> Usage:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "estimated": estimated}


def turn_started(turn_id: int) -> TurnStarted:
    return {"type": "turn.started", "turn_id": turn_id}


def delta(turn_id: int, text: str) -> Delta:
    return {"type": "delta", "turn_id": turn_id, "text": text}


def tool(turn_id: int, name: str, status: str, title: str = "") -> ToolFrame:
    frame: ToolFrame = {"type": "tool", "turn_id": turn_id, "name": name, "status": status}
    if title:
        frame["title"] = title
    return frame


def action_confirm(turn_id: int, call_id: str, action: str, title: str, arguments: dict[str, Any]) -> ActionConfirm:
    return {
        "type": "action.confirm",
        "turn_id": turn_id,
        "call_id": call_id,
        "action": action,
        "title": title,
        "arguments": arguments,
    }


def action_answered(turn_id: int, call_id: str, approve: bool) -> ActionAnswered:
    return {"type": "action.answered", "turn_id": turn_id, "call_id": call_id, "approve": approve}


def turn_resume(turn_id: int, seq: int, text: str) -> TurnResume:
    """The answer so far, up to and including frame `seq`, for a tab that
    comes in while the turn runs."""
    return {"type": "turn.resume", "turn_id": turn_id, "seq": seq, "text": text}


def turn_ended(
    turn_id: int,
    status: str,
    generations: int,
    used: Usage,
    text: str,
    tool_calls: Iterable[Any],
    reason: str = "",
) -> TurnEnded:
    """The last frame of every turn, composed from the same inputs whether
    they come from the process that ran it (the round loop's text and tool
    calls) or, when that process died, from what was stored (the turn's
    text and its stored tool calls, whose results are JSON text)."""
    calls = list(tool_calls)
    frame: TurnEnded = {
        "type": "turn.ended",
        "turn_id": turn_id,
        "status": status,
        "generations": generations,
        "usage": used,
        "sources": [{"title": s["title"], "url": s["url"]} for s in used_articles(text, search_results(calls))],
    }
    if reason:
        frame["reason"] = reason
    handoff = _handoff_requested(calls)
    if handoff:
        frame["handoff"] = handoff
    return frame


def _handoff_requested(calls: list[Any]) -> HandoffState | None:
    """The request for a person that request_human made among a turn's tool calls."""
    for result in reversed(results_of(calls, HANDOFF_TOOL)):
        if isinstance(result, dict) and all(key in result for key in ("handoff_id", "status", "email")):
            return handoff_state(result)
    return None


def error(code: str, message: str, turn_id: int | None = None) -> Error:
    """An `error` frame; a failed turn's says the message in the site's
    language, and each tab again in its own visitor's (chat/engine/consumers.py)."""
    frame: Error = {"type": "error", "code": code, "message": message}
    if turn_id is not None:
        frame["turn_id"] = turn_id
    return frame


def history(page: Mapping[str, Any], before: int | None) -> History:
    """A page of the conversation (chat/engine/history.py); `before` is echoed,
    so the page can tell an older page from a fresh look."""
    frame: History = {
        "type": "history",
        "turns": page["turns"],
        "messages": page["messages"],
        "more": page["more"],
        "handoff": page["handoff"],
    }
    if before:
        frame["before"] = before
    return frame


def feedback_saved(turn_id: int) -> FeedbackSaved:
    return {"type": "feedback.saved", "turn_id": turn_id}


def handoff_state(state: Mapping[str, Any]) -> HandoffState:
    """A request's state as chat/support/handoffs.py gives it, typed."""
    return {
        "handoff_id": state["handoff_id"],
        "status": state["status"],
        "email": state["email"],
        "agent": state.get("agent"),
    }


def handoff_saved(state: Mapping[str, Any]) -> HandoffSaved:
    """The visitor's request for a person, taken."""
    return {"type": "handoff.saved", **handoff_state(state)}


def handoff_updated(state: Mapping[str, Any]) -> HandoffUpdated:
    """Support claimed, closed or reopened the visitor's request."""
    return {"type": "handoff.updated", "handoff": handoff_state(state)}


def agent_message(message_id: int, text: str, author: str, at: str) -> AgentMessage:
    return {"type": "agent.message", "id": message_id, "text": text, "author": author, "at": at}


def visitor_message(message_id: int, text: str, at: str) -> VisitorMessage:
    return {"type": "visitor.message", "id": message_id, "text": text, "at": at}


def identified(person_id: str, name: str) -> Identified:
    return {"type": "identified", "id": person_id, "name": name}

"""The tools the model can call: search_help_center, request_human, and
the customer's enabled actions (chat/actions/) that the visitor may use.

Each acts for the turn that calls it: the turn hands its context down
(`TurnContext`: which turn, the language of the tab that asked), and the
round loop calls the tools bound to it (`bind`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from billing.services import bill_embedding
from chat.actions import runner
from chat.actions.catalog import Offer
from chat.engine.rounds import Tool
from chat.engine.usage import spec_chars
from chat.support import handoffs
from chat.vocabulary import HANDOFF_TOOL, SEARCH_TOOL
from helpcenter import search

# What a search that found nothing good tells the model, besides the scores.
NO_GOOD_MATCH = (
    "No published help-center article clearly answers this: the articles here are only the closest, with low "
    "confidence. Answer from one only if it truly answers the visitor's question. Otherwise tell the visitor that "
    "the help center does not cover it, and offer to put them in touch with a person (request_human)."
)


@dataclass(frozen=True)
class TurnContext:
    """What a tool knows of the turn that calls it."""

    turn_id: int  # for the tools that act on the visitor's conversation, and what a search is billed with
    # The language of the tab that asked (its browser's): a search prefers
    # the articles' versions in it (helpcenter/search.py).
    language: str = ""
    # For the actions: who they act for, how to ask them, what was called.
    actions: runner.Caller | None = None
    # Staff previewing a draft of the assistant: nothing reaches Support's queue.
    preview: bool = False


@dataclass
class TurnTool(Tool):
    """A tool that acts for the turn that calls it: `act` takes the turn's
    context (None outside a turn, as `run` calls it), then the model's arguments."""

    act: Callable[..., Awaitable[Any]]

    def for_turn(self, turn: TurnContext) -> Tool:
        return Tool(self.name, self.description, self.parameters, functools.partial(self.act, turn))


def bind(tools: Sequence[Tool], turn: TurnContext) -> list[Tool]:
    """The tools as the turn's round loop calls them: those that act for a turn, bound to this one."""
    return [tool.for_turn(turn) if isinstance(tool, TurnTool) else tool for tool in tools]


CONFIRMED = "Before it runs, the visitor is shown what it will do and asked to confirm; they may decline."


def action_tool(offer: Offer, caller: runner.Caller) -> Tool:
    """An action as the model calls it: its arguments are the model's own
    (never `turn`, or anything of ours), so it is bound here, not a TurnTool."""

    async def run(**arguments: Any) -> dict[str, Any]:
        return (await runner.call(offer, caller, arguments)).for_model

    return Tool(offer.name, action_description(offer), offer.operation.tool_parameters(), run)


def action_description(offer: Offer) -> str:
    """What the model reads of an action: staff's title and description."""
    parts = [offer.title.rstrip(".") + "."] if offer.title else []
    if offer.description and offer.description != offer.title:
        parts.append(offer.description)
    if offer.operation.confirm:
        parts.append(CONFIRMED)
    return " ".join(parts)[:1024]


def action_chars(offers: Sequence[Offer]) -> int:
    """The characters the actions' definitions add to every prompt."""
    caller = runner.Caller(None, None)
    return spec_chars([action_tool(offer, caller) for offer in offers]) if offers else 0


def for_turn(ours: Sequence[Tool], turn: TurnContext, offers: Sequence[Offer]) -> list[Tool]:
    """Every tool of a turn: ours bound to it, and its actions."""
    tools = bind(ours, turn)
    if turn.actions is not None:
        tools += [action_tool(offer, turn.actions) for offer in offers]
    return tools


def _turn_tool(name: str, description: str, parameters: dict[str, Any], act: Callable[..., Awaitable[Any]]) -> TurnTool:
    return TurnTool(name, description, parameters, functools.partial(act, None), act)


PREVIEW_HANDOFF = (
    "This is the support team's preview of the assistant, not a visitor: no request was made. Answer as you would "
    "after a request: tell them a person will reply here, in this chat."
)


def with_advice(result: dict[str, Any]) -> dict[str, Any]:
    """A help-center search's result as the model reads it: when nothing
    answers, what to tell the visitor, and that a person can help."""
    return {**result, "note": NO_GOOD_MATCH} if result.get("no_good_match") else result


async def _search_help_center(turn: TurnContext | None, query: str, language: str = "") -> dict[str, Any]:
    if not isinstance(language, str):
        raise ValueError("language must be a string")
    result, spent = await search.search_spending(query, language or (turn.language if turn else ""))
    if spent:
        # Embedding the query and reranking cost money: billed with the turn
        # that asked, even if a Stop lands on this write (shielded).
        bill = database_sync_to_async(_bill)(spent, turn.turn_id if turn else None)
        await asyncio.shield(asyncio.ensure_future(bill))
    return with_advice(result)


def _bill(spent: list[search.Spent], turn_id: int | None) -> None:
    for each in spent:
        bill_embedding(each.purpose, each.model, each.tokens, turn_id=turn_id)


async def _request_human(turn: TurnContext | None, reason: str = "") -> dict[str, Any]:
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    if turn is None:
        raise LookupError("request_human hands a turn's conversation over: it runs in a turn")
    if turn.preview:
        return {"requested": False, "preview": True, "note": PREVIEW_HANDOFF}
    handoff = await handoffs.request_for_turn(turn.turn_id, reason)
    return {
        "requested": True,
        **handoff,
        "note": (
            "The support team has the request and the conversation. Tell the visitor that a person will reply "
            "here, in this chat, and that with an email address (the form under your answer) they also get the "
            "reply by email should they have left."
        ),
    }


SEARCH_HELP_CENTER = _turn_tool(
    name=SEARCH_TOOL,
    description=(
        "Search the published help-center articles. Returns the best articles (id, title, url, snippet, score, "
        "confidence: high or low), best first; no_good_match when none clearly answers. "
        "Use it for any question about the product."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What to look for, in English or in the visitor's language.",
            },
            "language": {
                "type": "string",
                "description": "The visitor's language (en, pt-br...): articles in it are preferred when they exist.",
            },
        },
        "required": ["query"],
    },
    act=_search_help_center,
)

REQUEST_HUMAN = _turn_tool(
    name=HANDOFF_TOOL,
    description=(
        "Ask a person from the support team to take over this conversation. Use it when the visitor asks for a "
        "person, or when the help center has no answer and the visitor wants more help. Support is notified and "
        "sees the whole conversation."
    ),
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why the visitor needs a person, in one sentence."}},
        "required": ["reason"],
    },
    act=_request_human,
)

TOOLS = [SEARCH_HELP_CENTER, REQUEST_HUMAN]

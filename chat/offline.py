"""The built-in offline model: a small, deterministic help-center assistant
that speaks the Chat Completions streaming wire format.

It is served through an in-process httpx2 transport, so the app talks to it
with the same `openai` client code, SSE parsing and stream closing as to a
real provider. Greetings and "what can you do?" get a direct answer in one
round; help questions get a sentence of narration and a
`search_help_center` call (two in parallel for a two-part question), then an
answer built from the articles the search returned, citing them.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2

GREETING = re.compile(
    r"^\s*(hi|hello|hey|hiya|howdy|yo|good (morning|afternoon|evening)|thanks?|thank you|ok|okay)\b"
    r"[\s!.,?]*\w{0,10}[\s!.?]*$",
    re.IGNORECASE,
)
CAPABILITIES = re.compile(
    r"what (can|do) you do|who are you|what are you|how can you help|what can i ask", re.IGNORECASE
)
SEARCH_TOOL = "search_help_center"

GREETING_ANSWER = (
    "Hi! I'm Kookee's help-center assistant. Ask me anything about feedback boards, "
    "the roadmap, the changelog, the widget, billing or your account, and I'll find the answer."
)
CAPABILITIES_ANSWER = (
    "I answer questions about Kookee from its help center. For example:\n\n"
    "- installing the feedback widget on your site\n"
    "- setting up boards, the roadmap and the changelog\n"
    "- plans, invoices and billing\n"
    "- SSO, API keys, data export and privacy\n\n"
    "Ask away, and I'll search the help center and cite the articles I use."
)
NO_TOOLS_ANSWER = (
    "I can only answer from the help center, and I couldn't search it this time. "
    "Could you ask again, perhaps in other words?"
)


class OfflineTransport(httpx2.AsyncBaseTransport):
    """Answers POST .../chat/completions with a paced SSE stream."""

    def __init__(self, tokens_per_second: float = 40.0, first_token_delay: float = 0.3) -> None:
        self.tokens_per_second = tokens_per_second
        self.first_token_delay = first_token_delay

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx2.Response(404, json={"error": {"message": "not found"}})
        body = json.loads(await request.aread())
        if not body.get("stream"):
            return httpx2.Response(400, json={"error": {"message": "only streaming is served"}})
        reply = respond(body.get("messages") or [], bool(body.get("tools")), body.get("tool_choice"))
        stream = _SSEStream(
            _events(body, reply),
            delay=1 / self.tokens_per_second if self.tokens_per_second > 0 else 0,
            first_delay=self.first_token_delay,
        )
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


class Reply:
    """What the model says in one round: text, then maybe tool calls."""

    def __init__(self, text: str, queries: list[str] | None = None) -> None:
        self.text = text
        self.queries = queries or []


def respond(messages: list[dict[str, Any]], tools_offered: bool, tool_choice: Any) -> Reply:
    """Decides one round's reply from the conversation so far."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(_answer_from_results(messages))
    question = str(last.get("content") or "").strip()
    if GREETING.match(question):
        return Reply(GREETING_ANSWER)
    if CAPABILITIES.search(question):
        return Reply(CAPABILITIES_ANSWER)
    if not tools_offered or tool_choice == "none":
        return Reply(NO_TOOLS_ANSWER)
    queries = _split_question(question)
    narration = "Let me search the help center for that."
    if len(queries) > 1:
        narration = "That's two questions; let me look both up in the help center."
    return Reply(narration, queries)


def _split_question(question: str) -> list[str]:
    parts = [p.strip() for p in re.split(r"\?+", question) if len(p.split()) >= 3]
    return parts[:2] if len(parts) >= 2 else [question]


def _answer_from_results(messages: list[dict[str, Any]]) -> str:
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, _parse(message.get("content")))
    found = [r["articles"][0] for r in results if r.get("articles")]
    if not found:
        return (
            "I couldn't find a help-center article about that. Could you rephrase it, "
            "or tell me a bit more about what you're trying to do?"
        )
    # Cite inline, as the system prompt asks: the page lists the articles an
    # answer links to as its sources.
    paragraphs = [f"**[{a['title']}]({a['url']})**: {a['snippet']}" for a in found]
    return "\n\n".join(["Here's what the help center says:", *paragraphs])


def _parse(content: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _events(body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """The chunks of one streamed round, shaped like OpenAI's."""
    base = {
        "id": f"chatcmpl-offline-{abs(hash(json.dumps(body, sort_keys=True))) % 10**12}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "kookee-offline"),
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    pieces = re.findall(r"\s*\S+", reply.text)
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    output_tokens = len(pieces)
    for index, query in enumerate(reply.queries):
        arguments = json.dumps({"query": query})
        fragments = [arguments[i : i + 12] for i in range(0, len(arguments), 12)]
        call_id = f"call_offline_{index}"
        first = {"index": index, "id": call_id, "type": "function"}
        events.append(chunk({"tool_calls": [{**first, "function": {"name": SEARCH_TOOL, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": f}}]}) for f in fragments]
        output_tokens += len(fragments) + 1
    events.append(chunk({}, "tool_calls" if reply.queries else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        # As providers count: the messages and the tool definitions.
        prompt = json.dumps(body.get("messages")) + json.dumps(body.get("tools") or [])
        prompt_tokens = math.ceil(len(prompt) / 4)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": prompt_tokens + output_tokens,
        }
        events.append({**base, "choices": [], "usage": usage})
    return events


class _SSEStream(httpx2.AsyncByteStream):
    def __init__(self, events: list[dict[str, Any]], delay: float, first_delay: float) -> None:
        self.events = events
        self.delay = delay
        self.first_delay = first_delay
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(self.first_delay)
        for number, event in enumerate(self.events):
            if self.closed:
                return  # the client hung up: stop generating
            if number > 1:
                await asyncio.sleep(self.delay)
            yield f"data: {json.dumps(event)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def aclose(self) -> None:
        self.closed = True

"""The offline model's wire: an in-process httpx2 transport that answers
POST .../chat/completions as a provider does, with the round the phrasebook
(chat/engine/offline.py) composes, as Chat Completions chunks in a paced
server-sent event stream.

The app talks to it with the same `openai` client code, SSE parsing and
stream closing as to a real provider; bench/provider.py serves the same
chunks over HTTP.
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

from chat.engine.offline import Reply, respond
from chat.vocabulary import HANDOFF_TOOL, SEARCH_TOOL
from helpcenter import search


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
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        messages = body.get("messages") or []
        # The whole passages the search found: the answer is composed from them.
        found = await search.passages() if messages and messages[-1].get("role") == "tool" else {}
        reply = respond(messages, offered, body.get("tool_choice"), found)
        stream = PacedSSEStream(
            chunks(body, reply),
            delay=1 / self.tokens_per_second if self.tokens_per_second > 0 else 0,
            first_delay=self.first_token_delay,
        )
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


def chunks(body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
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
    calls = [(SEARCH_TOOL, {"query": query}) for query in reply.queries]
    if reply.handoff is not None:
        calls.append((HANDOFF_TOOL, {"reason": reply.handoff}))
    for index, (name, arguments) in enumerate(calls):
        encoded = json.dumps(arguments)
        fragments = [encoded[i : i + 12] for i in range(0, len(encoded), 12)]
        first = {"index": index, "id": f"call_offline_{index}", "type": "function"}
        events.append(chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": f}}]}) for f in fragments]
        output_tokens += len(fragments) + 1
    events.append(chunk({}, "tool_calls" if calls else "stop"))
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


class PacedSSEStream(httpx2.AsyncByteStream):
    """The chunks as server-sent events, one every `delay` seconds after
    `first_delay`, then [DONE]; it stops generating when the client closes it."""

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

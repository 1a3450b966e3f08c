"""A local OpenAI-compatible provider for the benches, in its own process.

It serves POST /v1/chat/completions as a real provider would: SSE over
HTTP/1.1 with keep-alive, one chunk per token at a set pace after a set time
to first token. What it says is the built-in offline model's (chat/engine/offline.py):
a help question gets a sentence and a `search_help_center` call, then an
answer from the articles the search returned. Options change the pace, pad
answers to a given length, or write each chunk's send time into its text
(`--stamp`), so a client can tell how long each chunk took to reach it.

GET /stats returns what it saw: for every request, the visitor's question,
when the request arrived, when the first token went out, and when the
client hung up before the end (a Stop). Times are `time.time()`.

    .venv/bin/python bench/provider.py --port 9100 --ttft-ms 300 --tokens-per-second 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import django
import orjson

# The offline model reads the help center's search (helpcenter/search.py),
# which needs the project's settings: the process sets Django up first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")
django.setup()
try:
    from chat.engine import offline
except ImportError:  # an earlier commit, before chat had rooms (bench/before.sh)
    from chat import offline
try:
    from chat.engine.offline_transport import chunks as offline_chunks
except ImportError:  # an earlier commit, before the chunks left chat/engine/offline.py
    offline_chunks = offline._events


class Options:
    ttft = 0.3
    interval = 1 / 40
    words = 0  # pad every answer to at least this many words
    stamp = False


class Provider(asyncio.Protocol):
    """One client connection: requests in turn, each answered with a paced stream."""

    requests: list[dict[str, Any]] = []

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.buffer = b""
        self.stream: Stream | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.stream is None:
            head, separator, rest = self.buffer.partition(b"\r\n\r\n")
            if not separator:
                return
            lines = head.split(b"\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
            length = int(headers.get(b"content-length", b"0"))
            if len(rest) < length:
                return
            body, self.buffer = rest[:length], rest[length:]
            self.handle(lines[0].split(b" ", 2), body)

    def handle(self, request_line: list[bytes], body: bytes) -> None:
        method, path = request_line[0], request_line[1]
        if method == b"GET" and path == b"/stats":
            self.respond(200, orjson.dumps({"requests": Provider.requests}))
        elif method == b"POST" and path == b"/reset":
            Provider.requests = []
            self.respond(200, b"{}")
        elif method == b"POST" and path.endswith(b"/chat/completions"):
            request = orjson.loads(body)
            record = {"question": _question(request.get("messages") or []), "arrived": time.time()}
            Provider.requests.append(record)
            if request.get("stream"):
                self.stream = Stream(self, request, record)
            else:
                self.complete(request, record)
        else:
            self.respond(404, b'{"error": {"message": "not found"}}')

    def complete(self, request: dict[str, Any], record: dict[str, Any]) -> None:
        """A non-streamed answer: the whole message, once all of it is generated."""
        events = _reply_events(request)
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        calls: dict[int, dict[str, Any]] = {}
        usage, finish_reason, tokens = None, "stop", 0
        for event in events:
            usage = event.get("usage") or usage
            for choice in event["choices"]:
                delta = choice["delta"]
                finish_reason = choice["finish_reason"] or finish_reason
                if delta.get("content"):
                    message["content"] += delta["content"]
                    tokens += 1
                for fragment in delta.get("tool_calls") or []:
                    tokens += 1
                    call = calls.setdefault(fragment["index"], {"type": "function", "function": {"arguments": ""}})
                    call.setdefault("id", fragment.get("id"))
                    call["function"].setdefault("name", fragment.get("function", {}).get("name"))
                    call["function"]["arguments"] += fragment.get("function", {}).get("arguments", "")
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        }
        delay = Options.ttft + max(0, tokens - 1) * Options.interval

        def send() -> None:
            record["ended"] = time.time()
            if not self.transport.is_closing():
                self.respond(200, orjson.dumps(body))

        asyncio.get_running_loop().call_later(delay, send)

    def respond(self, status: int, body: bytes) -> None:
        head = f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        self.transport.write(head.encode() + body)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.hung_up()


class Stream:
    """One answer, written a chunk per timer tick: no task per stream."""

    def __init__(self, connection: Provider, request: dict[str, Any], record: dict[str, Any]) -> None:
        self.connection = connection
        self.record = record
        self.events = _reply_events(request)
        self.next = 0
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        connection.transport.write(head)
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(Options.ttft, self.tick)

    def tick(self) -> None:
        transport = self.connection.transport
        if self.next == 0:
            self.record["first_token"] = time.time()
        # The opening role chunk and the first token go out together.
        for _ in range(2 if self.next == 0 else 1):
            if self.next < len(self.events):
                transport.write(_chunked(b"data: " + self.encode(self.events[self.next]) + b"\n\n"))
                self.next += 1
        if self.next < len(self.events):
            self.timer = asyncio.get_running_loop().call_later(Options.interval, self.tick)
            return
        transport.write(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.record["ended"] = time.time()
        self.connection.stream = None
        if self.connection.buffer:
            self.connection.data_received(b"")

    def encode(self, event: dict[str, Any]) -> bytes:
        if Options.stamp:
            for choice in event.get("choices") or []:
                if choice["delta"].get("content"):
                    choice["delta"]["content"] = f" t{time.time():.6f}"
        return orjson.dumps(event)

    def hung_up(self) -> None:
        self.timer.cancel()
        if "ended" not in self.record:
            self.record["closed_early"] = time.time()


def _reply_events(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The offline model's chunks for this request (usage included)."""
    messages = request.get("messages") or []
    tools = [t.get("function", {}).get("name") for t in request.get("tools") or []]
    reply = offline.respond(messages, tools, request.get("tool_choice"))
    if Options.words and not reply.queries:
        reply.text = _padded(reply.text, Options.words)
    return offline_chunks({**request, "stream_options": {"include_usage": True}}, reply)


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _question(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content"))[:200]
    return ""


def _padded(text: str, words: int) -> str:
    filler = " ".join(f"word{n}" for n in range(max(0, words - len(text.split()))))
    return f"{text} {filler}".strip()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Provider, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--ttft-ms", type=float, default=300)
    parser.add_argument("--tokens-per-second", type=float, default=40)
    parser.add_argument("--words", type=int, default=0, help="pad every answer to this many words")
    parser.add_argument("--stamp", action="store_true", help="each token's text is its send time")
    args = parser.parse_args()
    Options.ttft = args.ttft_ms / 1000
    Options.interval = 1 / args.tokens_per_second
    Options.words = args.words
    Options.stamp = args.stamp
    print(json.dumps({"listening": args.port}), flush=True)
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()

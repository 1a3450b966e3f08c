"""A scripted OpenAI-compatible provider, faked at the wire.

A real HTTP/1.1 server on a loopback port serves each incoming
chat-completions request the next queued script: SSE bytes, pauses and
waits, exactly as written. It records every request body and when the client
hung up, so tests can prove that Stop closes the provider request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CHUNK_BASE = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "test-model"}


# --- building blocks of scripts -------------------------------------------------------------


def chunk(*, delta: dict | None = None, finish_reason: str | None = None, **extra: Any) -> dict:
    """An OpenAI-shaped chunk with one choice."""
    choice = {"index": 0, "delta": delta if delta is not None else {}, "finish_reason": finish_reason}
    return {**CHUNK_BASE, "choices": [choice], **extra}


def text(content: str, **extra: Any) -> dict:
    return chunk(delta={"content": content}, **extra)


def finish(reason: str = "stop", **extra: Any) -> dict:
    return chunk(finish_reason=reason, **extra)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """OpenAI's final usage chunk: empty choices."""
    return {**CHUNK_BASE, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)}


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def tool_fragment(
    index: int | None = 0, call_id: str | None = None, name: str | None = None, arguments: str | None = ""
) -> dict:
    fragment: dict[str, Any] = {}
    if index is not None:
        fragment["index"] = index
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    fragment["function"] = function
    return chunk(delta={"tool_calls": [fragment]})


def answer(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> list:
    """A plain answer in OpenAI's shape: role, text pieces, finish, usage, [DONE]."""
    steps: list = [chunk(delta={"role": "assistant", "content": ""})]
    steps += [text(piece) for piece in _pieces(content)]
    return [*steps, finish("stop"), usage(prompt_tokens, completion_tokens), DONE]


def tool_round(
    calls: list[tuple[str, str, dict]],
    narration: str = "",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> list:
    """A round that (optionally narrates and) calls tools, OpenAI-style fragments."""
    steps: list = [chunk(delta={"role": "assistant", "content": None})]
    steps += [text(piece) for piece in _pieces(narration)]
    for index, (call_id, name, arguments) in enumerate(calls):
        encoded = json.dumps(arguments)
        steps.append(tool_fragment(index, call_id, name, ""))
        steps += [tool_fragment(index, arguments=encoded[i : i + 7]) for i in range(0, len(encoded), 7)]
    return [*steps, finish("tool_calls"), usage(prompt_tokens, completion_tokens), DONE]


def _pieces(content: str) -> list[str]:
    return [content[i : i + 4] for i in range(0, len(content), 4)]


DONE = b"data: [DONE]\n\n"


@dataclass
class Pause:
    seconds: float


@dataclass
class WaitFor:
    """Holds the stream until the test sets the event (or the client hangs up)."""

    event: asyncio.Event


@dataclass
class HTTPError:
    status: int
    body: dict
    headers: dict = field(default_factory=dict)


# --- the server -----------------------------------------------------------------------------


@dataclass
class Request:
    body: dict
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False  # the whole script was sent
    hung_up_at: float | None = None

    @property
    def hung_up_early(self) -> bool:
        return self.hung_up.is_set() and not self.finished


class ScriptedProvider:
    def __init__(self) -> None:
        self.scripts: list[list] = []
        self.requests: list[Request] = []
        self.request_arrived = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task] = set()

    def queue(self, *scripts: list | Callable[[dict], list]) -> None:
        self.scripts.extend(scripts)

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def wait_for_request(self, count: int, timeout: float = 10) -> Request:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.request_arrived.clear()
                await self.request_arrived.wait()
        return self.requests[count - 1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        try:
            body = await _read_request(reader)
            request = Request(body=body)
            self.requests.append(request)
            self.request_arrived.set()
            watcher = asyncio.create_task(self._watch_hangup(reader, request))
            script = self.scripts.pop(0) if self.scripts else [HTTPError(500, {"error": {"message": "no script"}})]
            if callable(script):
                script = script(body)  # a script written for this request (its counts, say)
            await self._play(script, writer, request)
            await watcher
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the test is over
        finally:
            writer.close()
            self._handlers.discard(asyncio.current_task())

    async def _watch_hangup(self, reader: asyncio.StreamReader, request: Request) -> None:
        try:
            while await reader.read(1024):
                pass
        except ConnectionError:
            pass
        request.hung_up_at = asyncio.get_running_loop().time()
        request.hung_up.set()

    async def _play(self, script: list, writer: asyncio.StreamWriter, request: Request) -> None:
        if script and isinstance(script[0], HTTPError):
            error = script[0]
            payload = json.dumps(error.body).encode()
            extra = "".join(f"{name}: {value}\r\n" for name, value in error.headers.items())
            writer.write(
                f"HTTP/1.1 {error.status} Error\r\ncontent-type: application/json\r\n{extra}"
                f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            request.finished = True
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        for step in script:
            if request.hung_up.is_set():
                return
            if isinstance(step, Pause):
                await _first(asyncio.sleep(step.seconds), request.hung_up.wait())
                continue
            if isinstance(step, WaitFor):
                await _first(step.event.wait(), request.hung_up.wait())
                continue
            data = step if isinstance(step, bytes) else f"data: {json.dumps(step)}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        if request.hung_up.is_set():
            return
        request.finished = True
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _first(*awaitables: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _read_request(reader: asyncio.StreamReader) -> dict:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(await reader.readexactly(length)) if length else {}

"""The one module that talks to the model provider, through the official
`openai` client: any OpenAI-compatible Chat Completions endpoint, or the
built-in offline model when neither a key nor a base URL is configured.

The request goes through the client (its connection pool, headers, status
errors), but the answer's server-sent events are read here, as plain dicts:
the client's typed request check and per-chunk pydantic models cost several
milliseconds a round and most of the CPU spent per token, and the round loop
reads dicts anyway. Every chunk that arrived in one network read is handed
on as one batch, so a visitor gets one frame for text that came together.

Provider faults become `StreamError`s with a stable code, given by
provider_errors.py. A request refused before its stream starts (429, 5xx,
connection failure) is retried with backoff: nothing of it reached the
visitor, so nothing can be repeated. Once a stream has started it is never
retried.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import ssl
import weakref
from typing import Any

import httpx2
import openai
from django.conf import settings

from chat.engine import fastjson, provider_errors, sse, transport
from chat.engine.deadline import Deadline
from chat.engine.offline_transport import OfflineTransport
from chat.engine.provider_errors import StreamError
from chat.ops import metrics

logger = logging.getLogger("kookee.provider")

OFFLINE_BASE_URL = "http://offline.kookee.invalid/v1"
MAX_RETRY_AFTER_SECONDS = 10.0
DRAIN_SECONDS = 1.0  # at most this long to read what follows [DONE]
JSON: openai.RequestOptions = {"headers": {"Content-Type": "application/json"}}
CONNECTION_LIMITS = httpx2.Limits(max_connections=2000, max_keepalive_connections=2000, keepalive_expiry=30)
# The shape of the `type` and `code` of a provider's JSON error body: their
# own vocabulary, fit for the log. Its `message` is free text and can quote
# the prompt, the visitor's words.
ERROR_CODE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")

# Clients per event loop: a connection pool belongs to the loop that opened
# it (daphne has one; each async test has its own). Several pools, as each
# request and each response's end walk every connection of their pool
# (httpcore2): with a connection per streaming turn, one pool of 400 took 5%
# of the process's CPU at 200 visitors (py-spy); split eight ways, each walk
# is an eighth as long.
POOLS = 8
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[tuple[Any, ...], list[openai.AsyncOpenAI]]]
_clients = weakref.WeakKeyDictionary()


def is_offline() -> bool:
    return not (settings.OPENAI_API_KEY or settings.OPENAI_BASE_URL)


def provider_name() -> str:
    """gen_ai.provider.name: the offline model's name, else openai (any compatible endpoint)."""
    return settings.KOOKEE_OFFLINE_MODEL if is_offline() else "openai"


metrics.name_provider(provider_name)


def model_name() -> str:
    return settings.KOOKEE_OFFLINE_MODEL if is_offline() else settings.OPENAI_MODEL


async def open_stream(
    *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: str
) -> Stream:
    """Starts one streamed model call. The caller must close the stream."""
    body: dict[str, Any] = {
        "model": model_name(),
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body |= {"tools": tools, "tool_choice": tool_choice}
    body[_limit_parameter()] = settings.KOOKEE_MAX_OUTPUT_TOKENS
    encoded = fastjson.dumps(body).encode()  # once, for every attempt
    # Before the deadline starts: building the clients (a process's first
    # call, or after a change of settings) is our time, not the provider's.
    client = _client()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT
    for attempt in range(settings.KOOKEE_PROVIDER_RETRIES + 1):
        try:
            async with asyncio.timeout_at(deadline):
                # The client's documented way to a raw, unread response; a
                # status >= 400 still raises its APIStatusError.
                response = await client.post(
                    "/chat/completions", cast_to=httpx2.Response, content=encoded, options=JSON, stream=True
                )
            return Stream(response, deadline, settings.KOOKEE_DELTA_WINDOW_MS / 1000)
        except TimeoutError:
            raise provider_errors.first_token_timeout() from None
        except openai.APIError as exc:
            # Not chained to exc: a traceback would print its message, the
            # provider's body. The error's detail keeps it, for the turn.
            error = provider_errors.refusal(exc)
            if not provider_errors.retryable(exc) or attempt == settings.KOOKEE_PROVIDER_RETRIES:
                raise error from None
            delay = _backoff(exc, attempt)
            if loop.time() + delay >= deadline:
                raise error from None
            logger.warning("provider refused (%s), retry %s in %.2fs", _loggable(exc, error), attempt + 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _limit_parameter() -> str:
    # OpenAI's newer models only take max_completion_tokens; many compatible
    # servers only know max_tokens. "auto" guesses from the base URL.
    parameter: str = settings.KOOKEE_MAX_TOKENS_PARAMETER
    if parameter != "auto":
        return parameter
    return "max_tokens" if settings.OPENAI_BASE_URL else "max_completion_tokens"


class Stream:
    """A streamed answer, read with the first-token and stall timeouts. Each
    step yields the chunks (decoded JSON) that arrived together, at least
    one; provider faults become StreamErrors. `async with` closes it."""

    def __init__(self, response: httpx2.Response, first_chunk_deadline: float, pace: float = 0.0) -> None:
        self._response = response
        # Our transport's connection (transport.py), when the answer comes
        # through one: once the answer has begun, reads are paced.
        self._network = transport.connection(response) if pace > 0 else None
        self._pace = pace
        # Not encoded (as streams are): the body as it comes, straight from
        # the connection when it is one of ours (transport.Body), without
        # the layers httpx2 passes each chunk through.
        encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
        self._body = None if encoded else transport.body(response)
        self._bytes = response.aiter_bytes() if encoded else response.aiter_raw()
        self._events = sse.EventParser()
        self._deadline: float | None = first_chunk_deadline
        self._timeout = Deadline()  # the first-token deadline, then the stall timeout
        self._done = False
        self._finished = False  # [DONE] came
        # A fault that came in the same read as good chunks: raised after them.
        self._fault: StreamError | None = None

    @property
    def paced(self) -> bool:
        """Whether, once the answer has begun, the connection is read at most
        once per window: each step then brings a window's text."""
        return self._network is not None

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, exc_type: Any, *exc_info: Any) -> None:
        try:
            if self._finished and exc_type is None:
                # The rest of a finished answer (its end of body) is read, so
                # that the connection goes back to the pool for the next round
                # instead of being closed; never after a Stop.
                async with asyncio.timeout(DRAIN_SECONDS):
                    while await self._next_bytes():
                        pass
        except (TimeoutError, httpx2.HTTPError):
            pass
        finally:
            self._timeout.close()
            await self._response.aclose()

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> list[Any]:
        if self._fault is not None:
            raise self._fault
        while not self._done:
            chunks = self._decode(await self._read())
            if chunks:
                if self._deadline is not None and any(sse.says_something(c) for c in chunks):
                    self._deadline = None  # from here on, the stall timeout applies
                if self._network is not None and self._deadline is None and not self._finished:
                    # The visitor gets the text at most once per window
                    # (coalescer.py): reading more often would only wake
                    # this task per chunk to gather it. The first text
                    # was not held back; what follows waits for its window.
                    self._network.not_before = asyncio.get_running_loop().time() + self._pace
                return chunks
        raise StopAsyncIteration

    async def _read(self) -> bytes:
        first = self._deadline is not None
        timeout = self._timeout
        timeout.when = self._deadline or asyncio.get_running_loop().time() + settings.KOOKEE_PROVIDER_STALL_TIMEOUT
        with provider_errors.reading(first), timeout:
            data = await self._next_bytes()
        if not data:
            self._done = True
        return data

    async def _next_bytes(self) -> bytes:
        """The body's next bytes; b"" at its end."""
        if self._body is not None:
            return await self._body.read()
        return await anext(self._bytes, b"")

    def _decode(self, data: bytes) -> list[Any]:
        """The chunks in these bytes. A fault among them is raised once the
        chunks before it are handed on: what arrived whole is not lost."""
        chunks: list[Any] = []
        try:
            try:
                events = self._events.feed(data)
            except UnicodeDecodeError as exc:
                raise provider_errors.not_utf8(exc) from None
            for event in events:
                if event.startswith("[DONE]"):
                    # Anything after it is ignored; the response is closed on exit.
                    self._done = self._finished = True
                    break
                chunks.append(sse.chunk(event))
        except StreamError as fault:
            if not chunks:
                raise
            self._fault = fault
        return chunks


def _backoff(exc: openai.APIError, attempt: int) -> float:
    response = getattr(exc, "response", None)
    retry_after = response.headers.get("retry-after") if response is not None else None
    try:
        if retry_after is not None:
            return min(max(float(retry_after), 0.0), MAX_RETRY_AFTER_SECONDS)
    except ValueError:
        pass  # an HTTP date: fall back on our own backoff
    backoff: float = settings.KOOKEE_PROVIDER_BACKOFF_SECONDS
    return backoff * 2.0**attempt


def _loggable(exc: openai.APIError, error: StreamError) -> str:
    """What the log may say of a refusal: our code, the status, the body's
    own codes; of the detail, which can quote the visitor, only a fingerprint."""
    parts = [error.code, type(exc).__name__]
    status = getattr(exc, "status_code", None)
    if status is not None:
        parts.append(f"HTTP {status}")
    for field in ("type", "code"):
        value = getattr(exc, field, None)
        if isinstance(value, str) and ERROR_CODE.fullmatch(value):
            parts.append(f"{field}={value}")
    parts.append(f"detail {_fingerprint(error.detail)}")
    return ", ".join(parts)


def _fingerprint(text: str) -> str:
    """Tells texts apart in the log without saying them: their length and a
    short hash, keyed (a plain hash of a short text confirms a guess of it)."""
    digest = hmac.new(settings.SECRET_KEY.encode(), text.encode(), hashlib.sha256).hexdigest()
    return f"{len(text)} chars #{digest[:12]}"


def _client() -> openai.AsyncOpenAI:
    """The client for this task's requests: a turn's rounds share one, so
    that the next round finds the connection the last one left."""
    loop = asyncio.get_running_loop()
    config = _config()
    cached = _clients.get(loop)
    if cached is None or cached[0] != config:
        cached = _clients[loop] = (config, _make_clients())
    clients = cached[1]
    return clients[pool_of(asyncio.current_task(), len(clients))]


def pool_of(task: object, pools: int) -> int:
    """The pool a task's requests use. Not `hash(task) % pools`: tasks'
    addresses are spaced alike, and that put 400 turns in 2 pools of 8.
    Multiplied by the golden ratio's constant, every bit of the address
    reaches the bits kept."""
    return (id(task) * 0x9E3779B97F4A7C15 >> 64) % pools


def _config() -> tuple[Any, ...]:
    return (
        settings.OPENAI_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.KOOKEE_PROVIDER_CONNECT_TIMEOUT,
        settings.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT,
        settings.KOOKEE_PROVIDER_STALL_TIMEOUT,
        settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND,
        settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS,
    )


def _make_clients() -> list[openai.AsyncOpenAI]:
    if is_offline():
        return [_make_client(None)]
    # One TLS context for every pool: each loads the CA bundle, about 30 ms
    # of the event loop's time (eight took 220 ms, all visitors waiting).
    tls = httpx2.create_ssl_context()
    return [_make_client(tls) for _ in range(POOLS)]


def _make_client(tls: ssl.SSLContext | None) -> openai.AsyncOpenAI:
    # Reads are bounded by the first-token and stall timeouts above; httpx's
    # own read timeout is only a backstop.
    timeout = httpx2.Timeout(
        connect=settings.KOOKEE_PROVIDER_CONNECT_TIMEOUT,
        read=max(settings.KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT, settings.KOOKEE_PROVIDER_STALL_TIMEOUT) + 5,
        write=settings.KOOKEE_PROVIDER_CONNECT_TIMEOUT,
        pool=settings.KOOKEE_PROVIDER_CONNECT_TIMEOUT,
    )
    if is_offline():
        offline = OfflineTransport(
            tokens_per_second=settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND,
            first_token_delay=settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS / 1000,
        )
        return openai.AsyncOpenAI(
            api_key="offline",
            base_url=OFFLINE_BASE_URL,
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=offline, timeout=timeout),
        )
    # One connection per concurrent stream, kept for the next round: a new
    # TLS connection per model call costs more than the call's tokens.
    http_client = httpx2.AsyncClient(
        verify=True if tls is None else tls, timeout=timeout, limits=CONNECTION_LIMITS, follow_redirects=True
    )
    transport.install(http_client)
    return openai.AsyncOpenAI(
        # Local servers (Ollama, vLLM, llama.cpp) take any key.
        api_key=settings.OPENAI_API_KEY or "not-needed",
        base_url=settings.OPENAI_BASE_URL or None,
        timeout=timeout,
        max_retries=0,  # retried above, only before the stream starts
        http_client=http_client,
    )

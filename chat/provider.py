"""The one module that talks to the model provider, through the official
`openai` client: any OpenAI-compatible Chat Completions endpoint, or the
built-in offline model when neither a key nor a base URL is configured."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import httpx2
import openai
from django.conf import settings

from chat.offline import OfflineTransport

OFFLINE_BASE_URL = "http://offline.kookee.invalid/v1"

# One client per event loop: its connection pool belongs to the loop that
# opened it (daphne has one; each async test has its own).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[tuple, openai.AsyncOpenAI]]
_clients = weakref.WeakKeyDictionary()


def is_offline() -> bool:
    return not (settings.OPENAI_API_KEY or settings.OPENAI_BASE_URL)


def model_name() -> str:
    return settings.KOOKEE_OFFLINE_MODEL if is_offline() else settings.OPENAI_MODEL


async def open_stream(
    *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: str
) -> openai.AsyncStream:
    """Starts one streamed model call. The caller must close the stream."""
    extra: dict[str, Any] = {}
    if tools:
        extra = {"tools": tools, "tool_choice": tool_choice}
    # OpenAI's newer models only take max_completion_tokens; many compatible
    # servers only know max_tokens.
    limit_name = "max_tokens" if settings.OPENAI_BASE_URL else "max_completion_tokens"
    extra[limit_name] = settings.KOOKEE_MAX_OUTPUT_TOKENS
    return await _client().chat.completions.create(
        model=model_name(),
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )


def _client() -> openai.AsyncOpenAI:
    loop = asyncio.get_running_loop()
    config = _config()
    cached = _clients.get(loop)
    if cached is not None and cached[0] == config:
        return cached[1]
    client = _make_client()
    _clients[loop] = (config, client)
    return client


def _config() -> tuple:
    return (
        settings.OPENAI_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.KOOKEE_PROVIDER_TIMEOUT,
        settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND,
        settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS,
    )


def _make_client() -> openai.AsyncOpenAI:
    timeout = httpx2.Timeout(settings.KOOKEE_PROVIDER_TIMEOUT)
    if is_offline():
        transport = OfflineTransport(
            tokens_per_second=settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND,
            first_token_delay=settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS / 1000,
        )
        return openai.AsyncOpenAI(
            api_key="offline",
            base_url=OFFLINE_BASE_URL,
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport, timeout=timeout),
        )
    return openai.AsyncOpenAI(
        # Local servers (Ollama, vLLM, llama.cpp) take any key.
        api_key=settings.OPENAI_API_KEY or "not-needed",
        base_url=settings.OPENAI_BASE_URL or None,
        timeout=timeout,
        # A retry after text reached the visitor would repeat it; the stream
        # request itself is not retried here.
        max_retries=0,
    )

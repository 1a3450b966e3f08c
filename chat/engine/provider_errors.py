"""Provider faults, and the code each ends a turn with (chat/vocabulary.py).

Every fault of a model call is given its code here and nowhere else: the
openai client's exceptions, httpx2's, our own timeouts, and what is wrong
with the stream itself. As httpx maps httpcore's exceptions in one place
(`map_httpcore_exceptions`), the modules that meet a fault ask this one for
the `StreamError` to raise: the client (provider.py), the stream's decoding
(sse.py) and the round loop (rounds.py), which ends the turn with its code.

transport.py is not among them: a network backend raises httpcore2's own
exceptions, its contract, which httpcore2, httpx2 and the openai client map
in turn; they reach this module as httpx2's or openai's.

Django-free, as the round loop and the decoding that import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx2
import openai

from chat.vocabulary import Code

RETRYABLE_STATUSES = {408, 409, 429, 500, 502, 503, 504, 529}  # and any other 5xx


class StreamError(Exception):
    """A provider fault with a stable code. `billable` is false when the
    request was refused before the provider generated anything."""

    def __init__(self, code: str, detail: str, billable: bool = True) -> None:
        # Only the code in its message: a logged traceback must not print the
        # detail, the provider's words, which can quote the visitor's.
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.billable = billable


def describe(exc: BaseException) -> str:
    """An exception in a line, for a stored error or a tool result: its type
    and message, cut short."""
    return f"{type(exc).__name__}: {exc}"[:200]


# --- before the stream starts ------------------------------------------------------------


def first_token_timeout() -> StreamError:
    # Billed: the provider may have read the prompt before our deadline.
    return StreamError(Code.PROVIDER_TIMEOUT, "no answer before the first-token timeout")


def refusal(exc: openai.APIError) -> StreamError:
    """The error for a request that failed before its stream started: the
    provider generated nothing, so nothing is billed for it."""
    detail = describe(exc)
    if isinstance(exc, openai.APITimeoutError):
        return StreamError(Code.PROVIDER_TIMEOUT, detail, billable=False)
    if isinstance(exc, openai.APIConnectionError):
        return StreamError(Code.PROVIDER_UNREACHABLE, detail, billable=False)
    status = getattr(exc, "status_code", None)
    if status == 429:
        return StreamError(Code.PROVIDER_RATE_LIMITED, detail, billable=False)
    if _retryable_status(status):
        return StreamError(Code.PROVIDER_UNAVAILABLE, detail, billable=False)
    return StreamError(Code.PROVIDER_REJECTED, detail, billable=False)


def retryable(exc: openai.APIError) -> bool:
    """Whether a refusal may be tried again: the ones `refusal` calls
    unreachable, rate limited or unavailable."""
    if isinstance(exc, openai.APIConnectionError):
        return True
    return _retryable_status(getattr(exc, "status_code", None))


def _retryable_status(status: object) -> bool:
    return status in RETRYABLE_STATUSES or (isinstance(status, int) and status >= 500)


# --- once it has started -----------------------------------------------------------------


class _Reading:
    """Raises the fault for what a read of a started stream raised; lets
    anything else (the stream's end, a cancellation) through."""

    __slots__ = ("first",)

    def __init__(self, first: bool) -> None:
        self.first = first

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        # Not chained (`from None`): a traceback would print the provider's words.
        if isinstance(exc, TimeoutError):
            if self.first:
                raise first_token_timeout() from None
            raise StreamError(Code.PROVIDER_STALLED, "the stream stalled between two chunks") from None
        if isinstance(exc, (httpx2.HTTPError, openai.APIError)):
            raise StreamError(Code.PROVIDER_ERROR, describe(exc)) from None


def reading(first: bool) -> _Reading:
    """`with reading(first):` around one read of a started stream. A
    timeout is the first-token timeout while nothing was said yet, then a
    stall."""
    return _Reading(first)


def not_utf8(exc: UnicodeDecodeError) -> StreamError:
    return StreamError(Code.BAD_STREAM, f"the stream is not UTF-8: {exc}")


def not_json(exc: Exception) -> StreamError:
    return StreamError(Code.BAD_STREAM, f"a chunk is not JSON: {exc}")


def error_event(error: Any) -> StreamError:
    """An error object in the stream, as OpenAI sends mid-stream."""
    message = error.get("message") if isinstance(error, Mapping) else None
    return StreamError(Code.PROVIDER_ERROR, str(message or "an error occurred during streaming")[:200])


def incomplete() -> StreamError:
    return StreamError(Code.INCOMPLETE_STREAM, "the stream ended without finish_reason")


def fault(exc: Exception) -> StreamError:
    """What opening or reading a stream raised, as the fault the round
    fails with: a StreamError as it is; anything else by its kind."""
    if isinstance(exc, StreamError):
        return exc
    if isinstance(exc, ValueError):  # a chunk that is not JSON
        return StreamError(Code.BAD_STREAM, describe(exc))
    return StreamError(Code.PROVIDER_ERROR, describe(exc))

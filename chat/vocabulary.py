"""The product's words, each defined once: how a turn ended, why a stopped
turn stopped, and the codes of the errors a visitor's page can get.

Django-free, so that the round loop reads them as the models, metrics,
admin and consumer do. The values are the contract (docs/turns.md); the
labels people read are the models' and chat/errors.py's, translated.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A turn's status: `streaming` while it runs, then how it ended."""

    STREAMING = "streaming"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    TRUNCATED = "truncated"
    FAILED = "failed"


ENDINGS = frozenset({Status.COMPLETED, Status.INTERRUPTED, Status.TRUNCATED, Status.FAILED})


class StopReason(StrEnum):
    """Why an interrupted turn stopped."""

    STOPPED = "stopped"  # the visitor's Stop, from any tab
    LEFT = "left"  # every tab closed, and the grace ran out
    SHUTDOWN = "shutdown"  # the server process shut down
    PROCESS_LOST = "process_lost"  # the process died; the sweeper closed it


class ToolStatus(StrEnum):
    """A `tool` frame's status."""

    STARTED = "started"
    FINISHED = "finished"
    FAILED = "failed"


class Code(StrEnum):
    """Every error code an `error` frame can carry."""

    # A frame the consumer could not read: each comes with its own message.
    BAD_JSON = "bad_json"
    BAD_FRAME = "bad_frame"
    UNKNOWN_TYPE = "unknown_type"
    BAD_TEXT = "bad_text"
    TOO_LONG = "too_long"
    # A frame the server could not take.
    BUSY = "busy"
    FLOOD = "flood"
    UNAVAILABLE = "unavailable"
    NOT_FOUND = "not_found"
    BAD_FEEDBACK = "bad_feedback"
    BAD_HANDOFF = "bad_handoff"
    BAD_IDENTITY = "bad_identity"
    # Limits (chat/visitors/limits.py).
    RATE_LIMITED = "rate_limited"
    NETWORK_RATE_LIMITED = "network_rate_limited"
    HANDOFF_RATE_LIMITED = "handoff_rate_limited"
    CONVERSATION_FULL = "conversation_full"
    VISITOR_BUDGET_EXHAUSTED = "visitor_budget_exhausted"
    NETWORK_BUDGET_EXHAUSTED = "network_budget_exhausted"
    BUDGET_EXHAUSTED = "budget_exhausted"
    # Why a turn failed: the provider's faults (docs/operations.md, "Provider
    # faults")...
    PROVIDER_UNREACHABLE = "provider_unreachable"
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_STALLED = "provider_stalled"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_REJECTED = "provider_rejected"
    PROVIDER_ERROR = "provider_error"
    BAD_STREAM = "bad_stream"
    INCOMPLETE_STREAM = "incomplete_stream"
    # ... and the others.
    ROUND_LIMIT = "round_limit"
    SERVER_ERROR = "server_error"


# The codes of frames the consumer could not read, which it explains itself.
FRAME_CODES = frozenset({Code.BAD_JSON, Code.BAD_FRAME, Code.UNKNOWN_TYPE, Code.BAD_TEXT, Code.TOO_LONG})

PROVIDER_FAULTS = frozenset(
    {
        Code.PROVIDER_UNREACHABLE,
        Code.PROVIDER_TIMEOUT,
        Code.PROVIDER_STALLED,
        Code.PROVIDER_RATE_LIMITED,
        Code.PROVIDER_UNAVAILABLE,
        Code.PROVIDER_REJECTED,
        Code.PROVIDER_ERROR,
        Code.BAD_STREAM,
        Code.INCOMPLETE_STREAM,
    }
)

# The tools we offer the model, by name (their definitions: chat/engine/tools.py).
SEARCH_TOOL = "search_help_center"
HANDOFF_TOOL = "request_human"
TOOL_NAMES = frozenset({SEARCH_TOOL, HANDOFF_TOOL})

"""OpenTelemetry traces, when OTEL_EXPORTER_OTLP_ENDPOINT is set: one trace
per turn, with a span per model call and per tool call inside it, named and
attributed after the OpenTelemetry GenAI semantic conventions
(`invoke_agent`, `chat {model}`, `execute_tool {name}`), sent over OTLP/HTTP.

Without the variable the SDK is never imported and every call here costs an
attribute check. The exporter reads the standard OTEL_* variables itself
(headers, timeouts, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ...); spans are
batched and sent from the SDK's own thread, never from the event loop.

Model-call spans are written when the turn ends, from the rounds' own
timestamps: the round loop stays free of Django and of tracing. Tool spans
follow the round loop's tool events live.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from chat.vocabulary import ToolStatus

logger = logging.getLogger("kookee.tracing")
F = TypeVar("F", bound=Callable[..., None])

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_provider: Any = None
_tracer: Any = None


def configure() -> None:
    """Starts tracing for this process if an OTLP endpoint is configured.
    Called once at start-up (kookee/asgi.py); calling it again does nothing."""
    global _provider, _tracer
    if _tracer is not None or not any(os.environ.get(name) for name in _ENDPOINTS):
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win when set.
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "kookee-chat"}
    _provider = TracerProvider(resource=Resource.create(attributes))
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = _provider.get_tracer("kookee.chat")


def enabled() -> bool:
    return _tracer is not None


def flush(timeout_millis: int = 5000) -> None:
    """Sends what is batched now (tests; the SDK flushes at exit itself)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def shutdown() -> None:
    """Flushes and stops tracing (tests)."""
    global _provider, _tracer
    if _provider is not None:
        _provider.shutdown()
    _provider = _tracer = None


def start_turn(turn_id: int) -> TurnTrace | None:
    """The trace of a turn starting now; None when tracing is off."""
    return TurnTrace(_tracer, turn_id) if _tracer is not None else None


def _never_raises(method: F) -> F:
    """Tracing must never cost a turn its ending or its bill."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            logger.exception("tracing failed in %s", method.__name__)

    return wrapper  # type: ignore[return-value]


class TurnTrace:
    """One turn's spans: the turn (`invoke_agent`), its tools as they run,
    its model calls at its end."""

    def __init__(self, tracer: Any, turn_id: int) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self.span = tracer.start_span(
            "invoke_agent kookee",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "kookee",
                "kookee.turn.id": turn_id,
            },
        )
        self._context = trace.set_span_in_context(self.span)
        self._tools: list[Any] = []  # open tool spans, oldest first

    @_never_raises
    def tool(self, name: str, status: str) -> None:
        if status == ToolStatus.STARTED:
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
            self._tools.append(self._tracer.start_span(f"execute_tool {name}", self._context, attributes=attributes))
            return
        span = next((s for s in self._tools if s.attributes.get("gen_ai.tool.name") == name), None)
        if span is None:
            return
        self._tools.remove(span)
        if status == ToolStatus.FAILED:
            _fail(span, "tool_error")
        span.end()

    @_never_raises
    def end(
        self,
        *,
        status: str,
        error: str,
        stop_reason: str,
        rounds: Sequence[Any],  # the turn's rounds (chat/engine/rounds.py)
        model: str,
        provider_name: str,
    ) -> None:
        from opentelemetry.trace import SpanKind

        for rnd in rounds:
            usage = rnd.usage
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider_name,
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.response.finish_reasons": [rnd.finish_reason] if rnd.finish_reason else [],
                "kookee.round": rnd.number,
                "kookee.usage.estimated": usage.estimated,
            }
            span = self._tracer.start_span(
                f"chat {model}", self._context, SpanKind.CLIENT, attributes, start_time=_nanoseconds(rnd.started_at)
            )
            if rnd.first_delta_at is not None:
                span.add_event("gen_ai.first_chunk", timestamp=_nanoseconds(rnd.first_delta_at))
            if error and rnd is rounds[-1]:
                _fail(span, error)
            span.end(end_time=_nanoseconds(rnd.ended_at) if rnd.ended_at else None)
        for span in self._tools:  # cut short by a Stop or a fault
            _fail(span, "cancelled")
            span.end()
        self._tools.clear()
        self.span.set_attribute("kookee.turn.status", status)
        self.span.set_attribute("kookee.turn.generations", len(rounds))
        if stop_reason:
            self.span.set_attribute("kookee.turn.stop_reason", stop_reason)
        if error:
            _fail(self.span, error)
        self.span.end()


def _fail(span: Any, error_type: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))


def _nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)

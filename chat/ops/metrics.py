"""This process's metrics, in Prometheus form, for /metrics (chat/ops/monitoring.py).

The turn code calls the small recording functions below; the gauges are read
when Prometheus scrapes. Every process keeps its own figures in its own
registry (not prometheus_client's global one), and Prometheus scrapes each
process directly: see docs/operations.md, "Health and metrics".

The model-call metrics follow the OpenTelemetry GenAI semantic conventions
(gen_ai.client.token.usage, gen_ai.client.operation.duration and
gen_ai.client.operation.time_to_first_chunk, with their advised buckets),
named as OpenTelemetry's Prometheus exporters name them.

Label values come from fixed sets (statuses, error codes) or the settings
(model names): anything else is counted as "other", so a label can never
grow without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from chat.vocabulary import ENDINGS, PROVIDER_FAULTS
from helpcenter import search

# No `_created` series beside each counter: they double the output and
# nothing here reads them. (prometheus_client leaves this one unannotated.)
disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "other"
# The semantic conventions' own fallback for error.type.
OTHER_ERROR_TYPE = "_OTHER"

OPERATION = "chat"
# Advised by the semantic conventions (ExplicitBucketBoundaries).
TOKEN_BUCKETS = tuple(4**i for i in range(14))  # 1, 4, 16, ... 67108864
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
# From a Stop to the provider request closed: milliseconds when all is well.
STOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

GEN_AI_LABELS = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")


# Figures read at scrape time from the parts of the process that own them,
# which register a reader (gauge): the sockets (chat/engine/lifecycle.py) and
# the running turns (chat/engine/checkpointer.py). Unregistered, they read 0.
GAUGES = {
    "kookee_open_sockets": "WebSocket connections open in this process.",
    "kookee_running_turns": "Turns running in this process.",
}
_readers: dict[str, Callable[[], int]] = {}


def gauge(name: str, read: Callable[[], int]) -> None:
    """Registers the reader of one of GAUGES."""
    if name not in GAUGES:
        raise ValueError(f"unknown gauge {name!r}")
    _readers[name] = read


# gen_ai.provider.name, as the provider module says it (chat/engine/provider.py).
def _openai() -> str:
    return "openai"


_provider_name: Callable[[], str] = _openai


def name_provider(read: Callable[[], str]) -> None:
    """Registers how to read the provider's name (it follows the settings)."""
    global _provider_name
    _provider_name = read


class _Live(Collector):
    """The gauges, read at scrape time."""

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, text) for name, text in GAUGES.items()]

    def collect(self) -> Iterable[Metric]:
        found: list[Metric] = [
            GaugeMetricFamily(name, text, value=_readers[name]() if name in _readers else 0)
            for name, text in GAUGES.items()
        ]
        # Kept by the help center itself, which knows nothing of this module.
        fallbacks = CounterMetricFamily(
            "kookee_search_fallbacks",
            "Help-center searches by words only, their query not embedded, by reason.",
            labels=["reason"],
        )
        for reason, count in search.fallbacks.items():
            fallbacks.add_metric([reason], count)
        return [*found, fallbacks]


class _Metrics:
    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry()
        self.turns = Counter("kookee_turns", "Turns ended, by status.", ["status"], registry=registry)
        self.generations = Counter("kookee_generations", "Model calls made, by model.", ["model"], registry=registry)
        self.provider_errors = Counter(
            "kookee_provider_errors", "Turns failed by the provider, by error code.", ["code"], registry=registry
        )
        self.token_usage = Histogram(
            "gen_ai_client_token_usage",
            "Number of input and output tokens used.",
            [*GEN_AI_LABELS, "gen_ai_token_type"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration.",
            [*GEN_AI_LABELS, "error_type"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.time_to_first_chunk = Histogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "Time to receive the first chunk, from the request to the first chunk of the response stream.",
            GEN_AI_LABELS,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.first_delta = Histogram(
            "kookee_time_to_first_delta_seconds",
            "From the visitor's message to the first text sent to them.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.saturated = Counter(
            "kookee_saturated_refusals",
            "Sockets refused because the process was saturated (close code 4503).",
            registry=registry,
        )
        self.stop_latency = Histogram(
            "kookee_stop_latency_seconds",
            "From a Stop to the provider request closed.",
            buckets=STOP_BUCKETS,
            registry=registry,
        )
        # Labelled by action: their names come from the imported document,
        # a bounded set (chat/actions/openapi.py caps it).
        self.action_calls = Counter(
            "kookee_action_calls",
            "Calls of the customer's API (actions), by outcome.",
            ["action", "outcome"],
            registry=registry,
        )
        self.action_duration = Histogram(
            "kookee_action_call_duration_seconds",
            "From an action's request to its answer read (confirmation not included).",
            ["action"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        registry.register(_Live())
        ProcessCollector(registry=registry)


_metrics = _Metrics()


def reset() -> None:
    """Starts every figure afresh (tests)."""
    global _metrics
    _metrics = _Metrics()


def exposition(accept: str | None) -> tuple[bytes, str]:
    """The scrape: the body and its content type, in the format the scraper
    asked for (Prometheus text or OpenMetrics)."""
    encode, content_type = choose_encoder(accept or "")
    return encode(_metrics.registry), content_type


# --- recording (called by the turn code) -----------------------------------------------


def turn_ended(status: str) -> None:
    _metrics.turns.labels(status if status in ENDINGS else OTHER).inc()


def model_call(
    model: str,
    input_tokens: int,
    output_tokens: int,
    duration_seconds: float,
    time_to_first_chunk_seconds: float | None,
    error_type: str | None = None,
) -> None:
    """One model call (a round of a turn). `error_type` is the provider
    fault it ended with, if any."""
    labels = (OPERATION, _provider_name(), _model(model))
    _metrics.generations.labels(labels[2]).inc()
    _metrics.token_usage.labels(*labels, "input").observe(max(0, input_tokens))
    _metrics.token_usage.labels(*labels, "output").observe(max(0, output_tokens))
    _metrics.duration.labels(*labels, _error_type(error_type)).observe(max(0.0, duration_seconds))
    if time_to_first_chunk_seconds is not None:
        _metrics.time_to_first_chunk.labels(*labels).observe(max(0.0, time_to_first_chunk_seconds))


def first_delta(seconds: float) -> None:
    _metrics.first_delta.observe(max(0.0, seconds))


def stop_latency(seconds: float) -> None:
    _metrics.stop_latency.observe(max(0.0, seconds))


def action_call(action: str, outcome: str, seconds: float | None) -> None:
    _metrics.action_calls.labels(action, outcome).inc()
    if seconds is not None:
        _metrics.action_duration.labels(action).observe(max(0.0, seconds))


def refused_saturated() -> None:
    _metrics.saturated.inc()


def provider_error(code: str) -> None:
    _metrics.provider_errors.labels(code if code in PROVIDER_FAULTS else OTHER).inc()


def _model(model: str) -> str:
    return model if model in (settings.OPENAI_MODEL, settings.KOOKEE_OFFLINE_MODEL) else OTHER


def _error_type(error_type: str | None) -> str:
    # Empty means no error: Prometheus treats an empty label as absent.
    if not error_type:
        return ""
    return error_type if error_type in PROVIDER_FAULTS else OTHER_ERROR_TYPE

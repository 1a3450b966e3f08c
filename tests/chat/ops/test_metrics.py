"""The operator's endpoints (chat/ops/monitoring.py) and the metrics they serve
(chat/ops/metrics.py): /metrics is the operator's alone, its figures are the ones
recorded, and /healthz tells the load balancer what answers."""

import asyncio
import time

import pytest
from channels.layers import InMemoryChannelLayer
from django.test import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from chat.ops import metrics
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer
from tests.test_logging import console_output
from tests.test_security import show_settings

TOKEN = "kookee-metrics-test-token-" + "0123456789abcdef" * 2


@pytest.fixture(autouse=True)
def fresh_metrics():
    metrics.reset()


@pytest.fixture
def with_token(settings):
    settings.KOOKEE_METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.fixture
def with_allowlist(settings):
    from ipaddress import ip_network

    settings.KOOKEE_METRICS_ALLOW = [ip_network("10.0.0.0/8"), ip_network("2001:db8::/32")]


async def scrape(peer: str = "127.0.0.1", **headers: str):
    """GET /metrics from a socket whose peer is `peer`."""
    return await AsyncClient().request(
        method="GET",
        path="/metrics",
        query_string="",
        headers=[(name.lower().encode(), value.encode()) for name, value in headers.items()],
        client=[peer, 40000],
    )


def samples(response) -> dict[tuple[str, frozenset], float]:
    """Every sample of the exposition: (name, labels) -> value."""
    assert response.status_code == 200, response.status_code
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def labels(**values: str) -> frozenset:
    return frozenset(values.items())


# --- who may read the metrics ---------------------------------------------------------------


async def test_metrics_are_closed_by_default():
    assert (await scrape()).status_code == 404
    assert (await scrape(Authorization=f"Bearer {TOKEN}")).status_code == 404
    assert (await scrape("10.1.2.3")).status_code == 404


async def test_a_scrape_needs_the_bearer_token(with_token):
    assert (await scrape()).status_code == 403
    assert (await scrape(Authorization="Bearer ")).status_code == 403
    assert (await scrape(Authorization=f"Basic {TOKEN}")).status_code == 403
    assert (await scrape(Authorization=f"Bearer {TOKEN[:-1]}x")).status_code == 403
    assert (await scrape(Authorization=f"Bearer {TOKEN}x")).status_code == 403

    response = await scrape(Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert (await scrape(Authorization=f"bearer {TOKEN}")).status_code == 200


async def test_a_refused_scrape_is_one_line_without_a_traceback(with_token):
    with console_output() as output:
        response = await scrape(Authorization="Bearer guess")

    assert response.status_code == 403
    lines = output.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Forbidden (wrong bearer token): /metrics" in lines[0]
    assert "guess" not in lines[0]


async def test_the_allowlist_matches_the_socket_peer(with_allowlist):
    assert (await scrape("10.1.2.3")).status_code == 200
    assert (await scrape("::ffff:10.1.2.3")).status_code == 200
    assert (await scrape("2001:db8::7")).status_code == 200
    assert (await scrape("203.0.113.9")).status_code == 403
    assert (await scrape("127.0.0.1")).status_code == 403


async def test_the_allowlist_ignores_x_forwarded_for(with_allowlist, settings):
    from ipaddress import ip_network

    # Even from a proxy trusted for visitors' addresses.
    settings.KOOKEE_TRUSTED_PROXIES = [ip_network("203.0.113.0/24")]

    assert (await scrape("203.0.113.9", **{"X-Forwarded-For": "10.1.2.3"})).status_code == 403
    assert (await scrape("10.1.2.3", **{"X-Forwarded-For": "203.0.113.9"})).status_code == 200


async def test_with_a_token_and_an_allowlist_a_scrape_needs_both(with_token, with_allowlist):
    assert (await scrape("10.1.2.3", Authorization=f"Bearer {TOKEN}")).status_code == 200
    assert (await scrape("10.1.2.3")).status_code == 403
    assert (await scrape("203.0.113.9", Authorization=f"Bearer {TOKEN}")).status_code == 403


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KOOKEE_METRICS_TOKEN", "short", "KOOKEE_METRICS_TOKEN is too short"),
        ("KOOKEE_METRICS_ALLOW", "10.0.0.0/8,not-a-network", "KOOKEE_METRICS_ALLOW"),
    ],
)
def test_a_bad_metrics_setting_stops_the_start(variable, value, message):
    result = show_settings(DJANGO_DEBUG="true", **{variable: value})

    assert result.returncode != 0
    assert message in result.stderr


# --- what the metrics say -------------------------------------------------------------------


async def test_each_recording_shows_in_the_exposition(with_token, settings):
    settings.OPENAI_MODEL = "gpt-4o-mini"
    metrics.turn_ended("completed")
    metrics.turn_ended("completed")
    metrics.turn_ended("failed")
    metrics.turn_ended("something new")
    metrics.model_call("gpt-4o-mini", 1200, 300, 2.5, 0.4)
    metrics.model_call("gpt-4o-mini", 50, 0, 30.0, None, error_type="provider_stalled")
    metrics.first_delta(0.7)
    metrics.stop_latency(0.004)
    metrics.provider_error("provider_timeout")
    metrics.provider_error("provider_timeout")
    metrics.provider_error("a code nobody listed")

    found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))

    assert found["kookee_turns_total", labels(status="completed")] == 2
    assert found["kookee_turns_total", labels(status="failed")] == 1
    assert found["kookee_turns_total", labels(status="other")] == 1
    assert found["kookee_generations_total", labels(model="gpt-4o-mini")] == 2
    assert found["kookee_provider_errors_total", labels(code="provider_timeout")] == 2
    assert found["kookee_provider_errors_total", labels(code="other")] == 1

    # The built-in offline model answers: no key, no base URL.
    call = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "kookee-offline"}
    call["gen_ai_request_model"] = "gpt-4o-mini"
    tokens = "gen_ai_client_token_usage"
    assert found[f"{tokens}_sum", labels(**call, gen_ai_token_type="input")] == 1250
    assert found[f"{tokens}_count", labels(**call, gen_ai_token_type="input")] == 2
    assert found[f"{tokens}_sum", labels(**call, gen_ai_token_type="output")] == 300
    assert found[f"{tokens}_bucket", labels(**call, gen_ai_token_type="input", le="64.0")] == 1
    assert found[f"{tokens}_bucket", labels(**call, gen_ai_token_type="input", le="1024.0")] == 1
    assert found[f"{tokens}_bucket", labels(**call, gen_ai_token_type="input", le="4096.0")] == 2

    duration = "gen_ai_client_operation_duration_seconds"
    assert found[f"{duration}_count", labels(**call, error_type="")] == 1
    assert found[f"{duration}_sum", labels(**call, error_type="")] == 2.5
    assert found[f"{duration}_count", labels(**call, error_type="provider_stalled")] == 1
    assert found[f"{duration}_bucket", labels(**call, error_type="provider_stalled", le="40.96")] == 1
    assert found[f"{duration}_bucket", labels(**call, error_type="provider_stalled", le="20.48")] == 0

    # Only the call that streamed a chunk has a time to its first chunk.
    first_chunk = "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert found[f"{first_chunk}_count", labels(**call)] == 1
    assert found[f"{first_chunk}_sum", labels(**call)] == 0.4

    assert found["kookee_time_to_first_delta_seconds_count", labels()] == 1
    assert found["kookee_time_to_first_delta_seconds_sum", labels()] == 0.7
    assert found["kookee_time_to_first_delta_seconds_bucket", labels(le="0.64")] == 0
    assert found["kookee_time_to_first_delta_seconds_bucket", labels(le="1.28")] == 1
    assert found["kookee_stop_latency_seconds_count", labels()] == 1
    assert found["kookee_stop_latency_seconds_bucket", labels(le="0.005")] == 1
    assert found["kookee_stop_latency_seconds_bucket", labels(le="0.0025")] == 0

    assert found["kookee_open_sockets", labels()] == 0
    assert found["kookee_running_turns", labels()] == 0
    assert ("process_resident_memory_bytes", labels()) in found


async def test_searches_by_words_only_are_counted_by_reason(with_token, monkeypatch):
    from helpcenter import search

    monkeypatch.setitem(search.fallbacks, "timeout", 3)
    monkeypatch.setitem(search.fallbacks, "error", 1)
    found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))
    assert found["kookee_search_fallbacks_total", labels(reason="timeout")] == 3
    assert found["kookee_search_fallbacks_total", labels(reason="error")] == 1
    assert found["kookee_search_fallbacks_total", labels(reason="dimensions")] == 0


async def test_labels_stay_within_fixed_sets(with_token, use_provider):
    metrics.model_call("gpt-4o-mini", 1, 1, 0.1, 0.05, error_type="provider_timeout")
    metrics.model_call("a-model-from-nowhere", 1, 1, 0.1, 0.05, error_type="ConnectionResetError")

    found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))

    call = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai"}
    assert found["kookee_generations_total", labels(model="gpt-4o-mini")] == 1
    assert found["kookee_generations_total", labels(model="other")] == 1
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert found[duration, labels(**call, gen_ai_request_model="gpt-4o-mini", error_type="provider_timeout")] == 1
    assert found[duration, labels(**call, gen_ai_request_model="other", error_type="_OTHER")] == 1


async def test_nothing_recorded_means_no_labelled_series_yet(with_token):
    found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))

    assert not [name for name, _ in found if name.startswith(("kookee_turns", "gen_ai_"))]
    assert found["kookee_time_to_first_delta_seconds_count", labels()] == 0


@pytest.mark.django_db(transaction=True)
async def test_open_sockets_and_running_turns_are_read_at_scrape_time(with_token, use_provider):
    hold = asyncio.Event()
    use_provider.queue([WaitFor(hold), *answer("Done.")])
    tab = await ChatClient.connect()
    try:
        turn_id = await tab.ask("Where is my order?")
        found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))
        assert found["kookee_open_sockets", labels()] == 1
        assert found["kookee_running_turns", labels()] == 1

        hold.set()
        await tab.finish(turn_id)
        found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))
        assert found["kookee_open_sockets", labels()] == 1
        assert found["kookee_running_turns", labels()] == 0
    finally:
        await tab.close()

    found = samples(await scrape(Authorization=f"Bearer {TOKEN}"))
    assert found["kookee_open_sockets", labels()] == 0


# --- /healthz ---------------------------------------------------------------------------------


class DownLayer(InMemoryChannelLayer):
    """A channel layer whose server is gone (Redis refusing connections)."""

    async def send(self, channel, message):
        raise ConnectionRefusedError("the channel layer is down")


class HangingLayer(InMemoryChannelLayer):
    """A channel layer that never answers."""

    async def send(self, channel, message):
        await asyncio.Event().wait()


@pytest.mark.django_db
async def test_healthz_is_ok_when_the_database_and_the_channel_layer_answer():
    response = await AsyncClient().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "channel_layer": "ok"}
    assert "no-store" in response["Cache-Control"]
    assert not response.cookies
    assert "Set-Cookie" not in response


@pytest.mark.django_db(transaction=True)
async def test_healthz_leaves_the_visitor_session_alone():
    page = AsyncClient()
    await page.get("/")
    session = page.cookies["sessionid"].value

    response = await page.get("/healthz")

    assert response.status_code == 200
    assert not response.cookies
    # The session was not read (Vary: Cookie); the language may be (LocaleMiddleware).
    assert "Cookie" not in response.get("Vary", "")
    assert page.cookies["sessionid"].value == session


# No database mark: pytest-django refuses the connection, as a database that
# is down would.
async def test_healthz_is_503_when_the_database_fails():
    with console_output() as output:
        response = await AsyncClient().get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "error", "channel_layer": "ok"}
    lines = output.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Health check failed: database (RuntimeError)" in lines[0]
    assert "Traceback" not in output.getvalue()


@pytest.mark.django_db
async def test_healthz_is_503_when_the_channel_layer_fails(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.DownLayer"}}

    response = await AsyncClient().get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "ok", "channel_layer": "error"}


@pytest.mark.django_db
async def test_healthz_answers_within_its_timeout_when_a_check_hangs(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.HangingLayer"}}
    settings.KOOKEE_HEALTH_TIMEOUT_SECONDS = 0.2

    started = time.monotonic()
    response = await AsyncClient().get("/healthz")

    assert time.monotonic() - started < 1.5
    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "ok", "channel_layer": "error"}


@pytest.mark.django_db
async def test_healthz_and_metrics_are_not_redirected_to_https(settings, with_token):
    # Production redirects HTTP to HTTPS; the load balancer and Prometheus
    # reach each process over plain HTTP.
    settings.SECURE_SSL_REDIRECT = True
    client = AsyncClient()

    assert (await client.get("/")).status_code == 301
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200

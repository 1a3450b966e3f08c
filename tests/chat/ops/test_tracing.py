"""OpenTelemetry traces (chat/ops/tracing.py): the real SDK and OTLP/HTTP exporter
sending to a collector stand-in on loopback that decodes what it receives."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from chat.ops import tracing
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer, text, tool_round

pytestmark = pytest.mark.django_db(transaction=True)


class Collector:
    """Receives OTLP/HTTP trace exports (protobuf) on a free port."""

    def __init__(self) -> None:
        self.spans: list = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans += [(resource.resource, span) for span in scope.spans]
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def named(self, prefix: str) -> list:
        return [span for _, span in self.spans if span.name.startswith(prefix)]


def attributes(span) -> dict:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        values[attribute.key] = (
            [v.string_value for v in value.array_value.values] if kind == "array_value" else getattr(value, kind)
        )
    return values


@pytest.fixture
def collector(monkeypatch):
    collector = Collector()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    tracing.configure()
    yield collector
    tracing.shutdown()
    collector.server.shutdown()
    collector.server.server_close()


async def test_a_turn_is_a_trace_of_its_model_calls_and_tool_calls(collector, use_provider):
    use_provider.queue(
        tool_round([("c1", "search_help_center", {"query": "install widget"})], "Let me look.", 300, 12),
        answer("Paste the tag.", 400, 20),
    )
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("how do I install the widget?")
        await chat.finish(turn_id)
    finally:
        await chat.close()
    tracing.flush()

    [turn] = collector.named("invoke_agent")
    calls = sorted(collector.named("chat "), key=lambda span: span.start_time_unix_nano)
    [tool] = collector.named("execute_tool")
    resource = {a.key: a.value.string_value for a in collector.spans[0][0].attributes}
    assert resource["service.name"] == "kookee-chat"
    assert attributes(turn) | {"kookee.turn.id": turn_id} == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "kookee",
        "kookee.turn.id": turn_id,
        "kookee.turn.status": "completed",
        "kookee.turn.generations": 2,
    }
    assert [span.name for span in calls] == ["chat gpt-4o-mini", "chat gpt-4o-mini"]
    assert [attributes(span)["gen_ai.usage.input_tokens"] for span in calls] == [300, 400]
    assert [attributes(span)["gen_ai.usage.output_tokens"] for span in calls] == [12, 20]
    assert [attributes(span)["gen_ai.response.finish_reasons"] for span in calls] == [["tool_calls"], ["stop"]]
    assert {attributes(span)["gen_ai.provider.name"] for span in calls} == {"openai"}
    assert attributes(tool) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_help_center"}
    # One trace; the calls and the tool inside the turn, the tool between the two calls.
    assert {span.trace_id for span in (turn, tool, *calls)} == {turn.trace_id}
    assert {span.parent_span_id for span in (tool, *calls)} == {turn.span_id}
    assert calls[0].end_time_unix_nano <= tool.start_time_unix_nano <= tool.end_time_unix_nano
    assert tool.end_time_unix_nano <= calls[1].start_time_unix_nano
    assert turn.start_time_unix_nano <= calls[0].start_time_unix_nano
    assert calls[1].end_time_unix_nano <= turn.end_time_unix_nano
    assert [event.name for event in calls[1].events] == ["gen_ai.first_chunk"]
    assert all(span.status.code != span.status.STATUS_CODE_ERROR for span in (turn, tool, *calls))


async def test_a_stopped_turn_says_why_and_its_cut_call_is_estimated(collector, use_provider):
    import asyncio

    use_provider.queue([text("Half an answer"), WaitFor(asyncio.Event())])
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("long question")
        await chat.receive_until("delta")
        await chat.send({"type": "stop"})
        await chat.finish(turn_id)
    finally:
        await chat.close()
    tracing.flush()

    [turn] = collector.named("invoke_agent")
    [call] = collector.named("chat ")
    assert attributes(turn)["kookee.turn.status"] == "interrupted"
    assert attributes(turn)["kookee.turn.stop_reason"] == "stopped"
    assert attributes(call)["kookee.usage.estimated"] is True
    assert attributes(call)["gen_ai.response.finish_reasons"] == []


async def test_a_failed_turn_marks_its_last_call_and_the_turn_as_errors(collector, use_provider):
    use_provider.queue([text("Partial"), {"error": {"message": "overloaded"}}])
    chat = await ChatClient.connect()
    try:
        turn_id = await chat.ask("hi")
        ended = await chat.finish(turn_id)
    finally:
        await chat.close()
    tracing.flush()

    assert ended["status"] == "failed"
    [turn] = collector.named("invoke_agent")
    [call] = collector.named("chat ")
    for span in (turn, call):
        assert span.status.code == span.status.STATUS_CODE_ERROR
        assert attributes(span)["error.type"] == "provider_error"


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [(None, ["False", "False"]), ("http://127.0.0.1:9", ["True", "True"])],
    ids=["no endpoint: the SDK is never loaded", "an endpoint: the app starts tracing"],
)
def test_the_application_traces_only_with_an_endpoint(endpoint, expected):
    code = (
        "import os, sys, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings'; django.setup();"
        "import kookee.asgi; from chat.ops import tracing;"
        "print(tracing.enabled(), 'opentelemetry.sdk' in sys.modules); tracing.shutdown()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=True)
    assert done.stdout.split() == expected

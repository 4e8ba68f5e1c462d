"""Trace spans: their shape with an in-memory exporter (a run's span, a child per call and per install, content
only when asked), and a real ``serve --http`` sending OTLP/HTTP to a collector this test starts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install -e '.[dev,otel]')")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.observability.tracing import Tracing, from_environment

from ..conftest import fixture_entry, http_client, http_server, make_config, write_config

pytestmark = pytest.mark.anyio

CODE = "fixture.add(a=1, b=2)\nfixture.echo(text='secret-ish')\ncall_tool('fixture', 'nope', {})\n"


def traced(content: bool) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, content=content), exporter


def test_tracing_is_off_without_an_endpoint() -> None:
    assert not from_environment({}, content=True).on
    assert from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, content=False).on


@pytest.mark.parametrize("content", [False, True])
async def test_a_run_is_a_span_with_a_child_per_tool_call_and_content_only_when_asked(content: bool) -> None:
    tracing, exporter = traced(content)
    async with CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, cpython_pool_size=0)) as cm:
        cm.tracing = tracing
        with anyio.fail_after(60):
            result = await cm.execute(CODE, "python", runner="local", cache="off")
    assert result.error is not None and result.error.type == "ToolError"  # the last call names no tool
    spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.name == "execute_code")
    assert run.context is not None
    run_id = run.context.span_id
    children = [s for s in spans if s.parent is not None and s.parent.span_id == run_id]
    assert [s.name for s in children] == ["tool fixture.add", "tool fixture.echo", "tool fixture.nope"]
    attributes = dict(run.attributes or {})
    assert attributes["codemode.runner"] == "local"
    assert attributes["codemode.tool_calls"] == 2
    assert attributes["codemode.cached"] is False
    assert attributes["codemode.savings.round_trips"] == 2
    assert attributes["error.type"] == "ToolError"
    decisions = [dict(s.attributes or {})["codemode.decision"] for s in children]
    assert decisions == ["allowed", "allowed", "refused"]
    for child in children:
        assert run.start_time is not None and child.start_time is not None and child.end_time is not None
        assert run.start_time <= child.start_time <= child.end_time
    if content:
        assert attributes["codemode.code"] == CODE
        assert dict(children[1].attributes or {})["codemode.arguments"] == '{"text": "secret-ish"}'
    else:
        everything = repr([dict(s.attributes or {}) for s in spans]) + repr([s.status.description for s in spans])
        assert "secret-ish" not in everything and "codemode.code" not in everything


class Collector(BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest] = []
    arrived = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        Collector.received.append(request)
        Collector.arrived.set()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_served_run_reaches_a_real_otlp_collector(
    collector: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    with http_server(config, tmp_path / "server.log", python_runner="local") as running:
        async with http_client(running.url) as client:
            await client.call_tool("execute_code", {"language": "python", "code": CODE, "cache": "off"})
        with anyio.fail_after(20):
            while True:  # the batch goes out within OTEL_BSP_SCHEDULE_DELAY; wait for the one with our run
                names = {
                    span.name
                    for request in Collector.received
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                    for span in scope.spans
                }
                if "execute_code" in names and "tool fixture.add" in names:
                    break
                Collector.arrived.clear()
                await anyio.to_thread.run_sync(Collector.arrived.wait, 1.0)
    services = {
        attr.value.string_value
        for request in Collector.received
        for resource in request.resource_spans
        for attr in resource.resource.attributes
        if attr.key == "service.name"
    }
    assert services == {"mcp-code-mode"}

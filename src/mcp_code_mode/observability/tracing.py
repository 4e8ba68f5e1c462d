"""OpenTelemetry traces: a span per ``execute_code``, a child span per tool call and per install.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (then spans go to that collector over OTLP/HTTP, batched)
or a ``TracerProvider`` is given (tests, library users): with it off nothing of OpenTelemetry's SDK is
imported and every span is a no-op. Attributes name the runner, language, cache, decision and sizes; the code
and the tool arguments (masked, as the audit log keeps them) are added only with ``CODE_MODE_TRACE_CONTENT``.
The extra ``mcp-code-mode[otel]`` installs the SDK and the exporter.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol

logger = logging.getLogger(__name__)

Attributes = Mapping[str, str | int | float | bool]


class SpanLike(Protocol):
    def set_attributes(self, attributes: Attributes) -> None: ...


class _NoSpan:
    def set_attributes(self, attributes: Attributes) -> None:
        pass


class CallSpan(Protocol):
    """What a tool call's span is made of (``bridge.dispatcher.ToolCallRecord``)."""

    server: str
    tool: str
    ok: bool
    ms: float
    decision: str
    called: bool
    at_ns: int
    error: str | None


class Tracing:
    """Spans of the engine's runs; ``Tracing()`` is off (every method a no-op)."""

    def __init__(self, provider: Any = None, *, content: bool = False) -> None:
        self._provider = provider
        self._tracer: Any = provider.get_tracer("mcp_code_mode") if provider is not None else None
        self.content = content
        """Whether spans carry the code and the tool arguments (``CODE_MODE_TRACE_CONTENT``)."""

    @property
    def on(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def span(self, name: str, attributes: Attributes | None = None) -> Generator[SpanLike]:
        """A span around the block, the child of the current one (a run's span is the parent of its installs)."""
        if self._tracer is None:
            yield _NoSpan()
            return
        with self._tracer.start_as_current_span(name, attributes=dict(attributes or {})) as span:
            yield span

    def calls(self, records: Sequence[CallSpan], arguments: Mapping[int, str] | None = None) -> None:
        """A child span of the current span per tool call, at the times it was made (after the run: nothing is
        traced on a call's path). ``arguments``: each record's masked arguments as JSON, by ``id(record)``."""
        if self._tracer is None:
            return
        from opentelemetry.trace import Status, StatusCode

        for record in records:
            attributes: dict[str, str | int | float | bool] = {
                "mcp.server": record.server,
                "mcp.tool": record.tool,
                "codemode.decision": record.decision,
                "codemode.called": record.called,
                "codemode.ok": record.ok,
            }
            if arguments is not None and id(record) in arguments:
                attributes["codemode.arguments"] = arguments[id(record)]
            span = self._tracer.start_span(
                f"tool {record.server}.{record.tool}", start_time=record.at_ns, attributes=attributes
            )
            if not record.ok:
                why = record.error if self.content and record.error else record.decision  # an error may quote data
                span.set_status(Status(StatusCode.ERROR, why[:200]))
            span.end(end_time=record.at_ns + round(record.ms * 1_000_000))

    def shutdown(self) -> None:
        """Send what is batched (at the engine's exit)."""
        if self._provider is not None and hasattr(self._provider, "shutdown"):
            self._provider.shutdown()


def from_environment(environ: Mapping[str, str], *, content: bool) -> Tracing:
    """``Tracing`` with an OTLP/HTTP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its traces variant) is set,
    else off. The SDK missing is a warning, not an error: the server serves without traces."""
    if not (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return Tracing()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: no traces "
            "(install mcp-code-mode[otel])"
        )
        return Tracing()
    service = environ.get("OTEL_SERVICE_NAME") or "mcp-code-mode"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint and headers from OTEL_*
    return Tracing(provider, content=content)


__all__ = ["CallSpan", "SpanLike", "Tracing", "from_environment"]

"""What the engine tells ``observability`` of its runs: each ``execute`` counted and traced (``counted``), and
the gauges ``GET /metrics`` reads at scrape time (``register_gauges``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from ..bridge import RunResult
from ..errors import CodeModeError
from ..observability.runs import error_label
from ..tenants import current_tenant

if TYPE_CHECKING:
    from ._codemode import CodeMode

P = ParamSpec("P")


def counted(
    execute: Callable[Concatenate[CodeMode, P], Coroutine[Any, Any, RunResult]],
) -> Callable[Concatenate[CodeMode, P], Coroutine[Any, Any, RunResult]]:
    """``execute``, each answer (a run, a replay, a failed run) and each refusal counted in ``metrics``, and the
    whole of it a span (``tracing``, a no-op when off)."""

    @functools.wraps(execute)
    async def wrapper(self: CodeMode, *args: P.args, **kwargs: P.kwargs) -> RunResult:
        started = time.perf_counter()
        with self.tracing.span("execute_code") as span:
            if self.tracing.content and args and isinstance(args[0], str):
                span.set_attributes({"codemode.code": args[0]})
            try:
                result = await execute(self, *args, **kwargs)
            except CodeModeError as exc:
                self.metrics.refused(exc)
                span.set_attributes({"error.type": type(exc).__name__})
                raise
            self.metrics.run_ended(
                runner=result.runner or "none",
                success=result.success,
                cached=result.cached,
                seconds=time.perf_counter() - started,
                error_type=result.error.type if result.error is not None else None,
                round_trips=result.savings.round_trips,
                tokens=result.savings.tokens,
                tenant=current_tenant().name,
            )
            if self.tracing.on:
                span.set_attributes(span_facts(result))
        return result

    return wrapper


def span_facts(result: RunResult) -> dict[str, str | int | float | bool]:
    """A run's span attributes: what the host knows of it (names, flags and sizes, never content)."""
    facts: dict[str, str | int | float | bool] = {
        "codemode.runner": result.runner,
        "codemode.language": result.language,
        "codemode.success": result.success,
        "codemode.cached": result.cached,
        "codemode.tool_calls": result.tool_calls,
        "codemode.output_chars": len(result.output),
        "codemode.files": len(result.files),
        "codemode.install_ms": result.install_time,
        "codemode.execution_ms": result.execution_time,
        "codemode.savings.round_trips": result.savings.round_trips,
        "codemode.savings.tokens": result.savings.tokens,
    }
    if result.error is not None:
        facts["error.type"] = error_label(result.error.type)
    return facts


def _figures(values: dict[str, object]) -> list[tuple[str, float]]:
    return [(k, float(v)) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)]


def register_gauges(engine: CodeMode) -> None:
    """What ``GET /metrics`` reads at scrape time: started runners' pools (their ``describe()``), the admission
    load, open sessions, the downstream servers by state."""

    def pools() -> list[tuple[tuple[str, ...], float]]:
        return [
            ((name, key), value)
            for name, runner in engine.runners.items()
            if engine.hosts.started(name)
            for key, value in _figures(runner.describe())
        ]

    def servers() -> list[tuple[tuple[str, ...], float]]:
        states: dict[str, int] = {}
        for entry in engine.pool.servers.values():
            states[entry.state] = states.get(entry.state, 0) + 1
        return [((state,), float(n)) for state, n in states.items()]

    gauge = engine.metrics.gauge
    gauge(
        "codemode_runner_pool",
        "Each started runner's pool figures (describe(): warmWorkers, poolSize, ...).",
        ("runner", "figure"),
        pools,
    )
    gauge(
        "codemode_admission",
        "Run slots, queue and memory budget now (running, queued, memoryInUseMB, ...).",
        ("figure",),
        lambda: [((key,), value) for key, value in _figures(engine.admission.load())],
    )
    gauge(
        "codemode_sessions_open",
        "Sessions (execute_code(session=...)) open now.",
        (),
        lambda: [((), float(engine.sessions.open_count))],
    )
    gauge("codemode_servers", "Downstream servers by state.", ("state",), servers)


__all__ = ["counted", "register_gauges", "span_facts"]

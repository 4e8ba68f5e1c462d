"""What the engine counts of its runs, for ``GET /metrics`` and ``get_cache_stats``.

``RunMetrics.run_ended`` is called once per ``execute`` (a run, a replay, or a request refused before it ran),
on the event loop: it adds to counters under the registry's lock and does nothing else. Gauges are read at
scrape time from the callbacks the engine registers (``gauge``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .metrics import Counter, Gauge, Histogram, Labels, Registry

HOST_ERROR_TYPES = frozenset(
    {
        "ToolError",
        "TimeoutError",
        "MemoryError",
        "RunnerError",
        "WorkerDied",
        "ProtocolError",
        "PackageError",
        "PackageInstallError",
        *(n for n in dir(builtins) if n.endswith(("Error", "Exception", "Exit", "Interrupt"))),
    }
)
"""Error types counted by name: the host's and Python's built-in ones. Any other type a sandbox reports (a
script may define a class of any name) is counted as ``ScriptError``: label values stay a bounded set."""


def error_label(type_: str) -> str:
    return type_ if type_ in HOST_ERROR_TYPES else "ScriptError"


class RunMetrics:
    """The registry of one engine, and the savings summed since start (in memory: they restart at zero)."""

    def __init__(self) -> None:
        self.registry = Registry()
        add = self.registry.add
        self.runs = add(
            Counter(
                "codemode_runs_total",
                "execute_code calls answered, by runner, success and whether replayed from the cache.",
                ("runner", "success", "cached"),
            )
        )
        self.duration = add(
            Histogram(
                "codemode_run_duration_seconds",
                "Seconds from the request to the result (installs and queueing included).",
                ("runner",),
            )
        )
        self.tool_calls = add(
            Counter(
                "codemode_tool_calls_total",
                "Tool calls of runs, by server (a name the servers file does not define is 'unknown'), the host's "
                "decision (allowed, denied, ...) and whether it succeeded.",
                ("server", "decision", "ok"),
            )
        )
        self.errors = add(
            Counter(
                "codemode_run_errors_total",
                "Failed runs by error type (the host's and built-in types; others are ScriptError), and requests "
                "refused before they ran (stage=refused).",
                ("type", "stage"),
            )
        )
        self.cache = add(
            Counter("codemode_cache_lookups_total", "Runs answered from the cache (hit) or run.", ("result",))
        )
        self.round_trips = add(
            Counter("codemode_savings_round_trips_total", "Tool calls that reached a server inside runs.")
        )
        self.tokens = add(
            Counter(
                "codemode_savings_tokens_total",
                "o200k tokens of tool results that stayed in the sandbox (see savings in the README).",
            )
        )
        self._saved: dict[str, list[int]] = {}
        """Tenant → [round trips, tokens] saved since start (``get_cache_stats`` shows a tenant its own)."""

    def gauge(
        self, name: str, help: str, labels: Sequence[str], read: Callable[[], Iterable[tuple[Labels, float]]]
    ) -> None:
        self.registry.add(Gauge(name, help, read, tuple(labels)))

    def run_ended(
        self,
        *,
        runner: str,
        success: bool,
        cached: bool,
        seconds: float,
        error_type: str | None,
        round_trips: int = 0,
        tokens: int = 0,
        tenant: str = "default",
    ) -> None:
        """One answered ``execute`` (its tool calls are counted by ``calls_ended``), run for ``tenant``."""
        with self.registry.lock:
            self.runs.inc(runner, _flag(success), _flag(cached))
            self.duration.observe(seconds, runner)
            self.cache.inc("hit" if cached else "miss")
            if error_type is not None:
                self.errors.inc(error_label(error_type), "run")
            if round_trips or tokens:
                saved = self._saved.setdefault(tenant, [0, 0])
                saved[0] += round_trips
                saved[1] += tokens
            if round_trips:
                self.round_trips.inc(amount=round_trips)
            if tokens:
                self.tokens.inc(amount=tokens)

    def calls_ended(self, calls: Iterable[tuple[str, str, bool]]) -> None:
        """A run's tool calls as ``(server, decision, ok)``, the server a configured name or ``unknown``."""
        with self.registry.lock:
            for server, decision, ok in calls:
                self.tool_calls.inc(server, decision, _flag(ok))

    def refused(self, error: BaseException) -> None:
        """A request the engine refused before it ran (``CodeModeError``: its class is the host's)."""
        with self.registry.lock:
            self.errors.inc(type(error).__name__, "refused")

    def savings(self, tenant: str = "default") -> dict[str, Any]:
        """For ``get_cache_stats``: ``tenant``'s savings summed since the server started (``/metrics`` has every
        tenant's together)."""
        with self.registry.lock:
            round_trips, tokens = self._saved.get(tenant, (0, 0))
        return {"roundTrips": round_trips, "tokens": tokens, "since": "start"}

    def render(self) -> str:
        return self.registry.render()


def _flag(value: bool) -> str:
    return "true" if value else "false"


__all__ = ["HOST_ERROR_TYPES", "RunMetrics", "error_label"]

"""The metrics registry's text exposition (format 0.0.4) and its bounded labels."""

from __future__ import annotations

from mcp_code_mode.observability.metrics import Counter, Gauge, Histogram, Registry
from mcp_code_mode.observability.runs import RunMetrics, error_label


def test_counters_histograms_and_gauges_render_in_the_prometheus_text_format() -> None:
    registry = Registry()
    runs = registry.add(Counter("x_runs_total", "Runs.", ("runner",)))
    seconds = registry.add(Histogram("x_seconds", "Seconds.", ("runner",), buckets=(0.1, 1.0)))
    registry.add(Gauge("x_open", "Open.", lambda: [((), 3.0)]))
    runs.inc("local")
    runs.inc("local", amount=2)
    runs.inc('we"ird\\\n')
    seconds.observe(0.05, "local")
    seconds.observe(0.5, "local")
    text = registry.render()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert "# TYPE x_runs_total counter" in lines
    assert 'x_runs_total{runner="local"} 3' in lines
    assert 'x_runs_total{runner="we\\"ird\\\\\\n"} 1' in lines  # quote, backslash and newline escaped
    assert "# TYPE x_seconds histogram" in lines
    assert 'x_seconds_bucket{runner="local",le="0.1"} 1' in lines
    assert 'x_seconds_bucket{runner="local",le="1"} 2' in lines
    assert 'x_seconds_bucket{runner="local",le="+Inf"} 2' in lines
    assert 'x_seconds_sum{runner="local"} 0.55' in lines
    assert 'x_seconds_count{runner="local"} 2' in lines
    assert "x_open 3" in lines


def test_an_error_type_a_script_made_up_is_counted_as_script_error() -> None:
    assert error_label("ZeroDivisionError") == "ZeroDivisionError"
    assert error_label("TimeoutError") == "TimeoutError"
    assert error_label("ToolError") == "ToolError"
    assert error_label('Evil{label="x"}') == "ScriptError"
    metrics = RunMetrics()
    for i in range(50):
        metrics.run_ended(runner="local", success=False, cached=False, seconds=0.01, error_type=f"Made{i}")
    assert metrics.render().count("codemode_run_errors_total{") == 1
    assert 'codemode_run_errors_total{stage="run",type="ScriptError"} 50' not in metrics.render()
    assert 'codemode_run_errors_total{type="ScriptError",stage="run"} 50' in metrics.render()


def test_savings_add_up_since_start() -> None:
    metrics = RunMetrics()
    metrics.run_ended(
        runner="local", success=True, cached=False, seconds=0.1, error_type=None, round_trips=3, tokens=40
    )
    metrics.run_ended(runner="local", success=True, cached=True, seconds=0.0, error_type=None)
    metrics.run_ended(
        runner="local", success=True, cached=False, seconds=0.1, error_type=None, round_trips=2, tokens=5, tenant="b"
    )
    assert metrics.savings() == {"roundTrips": 3, "tokens": 40, "since": "start"}
    assert metrics.savings("b") == {"roundTrips": 2, "tokens": 5, "since": "start"}  # each tenant its own
    assert metrics.savings("c") == {"roundTrips": 0, "tokens": 0, "since": "start"}
    text = metrics.render()
    assert "codemode_savings_round_trips_total 5" in text  # the operator's view: every tenant's
    assert "codemode_savings_tokens_total 45" in text
    assert 'codemode_cache_lookups_total{result="hit"} 1' in text

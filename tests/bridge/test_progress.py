"""A run's ``progress`` messages in the host loop: checked like every field, passed on at the host's pace, capped."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from mcp_code_mode.bridge import MAX_PROGRESS_MESSAGE, Progress, serve_run
from mcp_code_mode.bridge.fake import FakeWorker
from mcp_code_mode.bridge.host import PROGRESS_INTERVAL, ProgressRelay

pytestmark = pytest.mark.anyio

DONE = {"op": "done", "success": True, "returnValue": None, "error": None, "files": [], "dropped": 0}


class NoCalls:
    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        return {"error": {"message": "no tools here"}}


async def serve(lines: list[bytes | dict[str, Any]], seen: list[Progress] | None = None) -> Any:
    async def on_progress(progress: Progress) -> None:
        assert seen is not None
        seen.append(progress)

    worker = FakeWorker(lines)
    return await serve_run(
        worker, NoCalls(), timeout=10, max_output=1000, on_progress=on_progress if seen is not None else None
    )


async def test_a_flood_of_reports_sent_straight_to_the_host_is_passed_on_a_few_times_and_its_last_one_is_kept() -> None:
    flood: list[bytes | dict[str, Any]] = [
        {"op": "progress", "done": i, "total": 5_000, "message": f"item {i}"} for i in range(1, 5_001)
    ]
    seen: list[Progress] = []
    started = time.perf_counter()
    hosted = await serve([*flood, DONE], seen)
    elapsed = time.perf_counter() - started
    assert hosted.ended == "done" and hosted.outcome.success
    assert 1 <= len(seen) <= elapsed / PROGRESS_INTERVAL + 2, (len(seen), elapsed)
    assert seen[0] == Progress(1, 5_000, "item 1")  # the first goes out at once
    assert seen[-1] == Progress(5_000, 5_000, "item 5000")  # the last before done is not lost


async def test_without_a_sink_reports_are_read_and_ignored() -> None:
    hosted = await serve([{"op": "progress", "done": 1}, DONE])
    assert hosted.ended == "done" and hosted.outcome.success


async def test_a_report_with_only_done_has_no_total_and_no_message() -> None:
    seen: list[Progress] = []
    await serve([{"op": "progress", "done": 0.5}, DONE], seen)
    assert seen == [Progress(0.5, None, None)]


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"op": "progress", "done": NaN}\n', "'done' is not a finite number"),
        (b'{"op": "progress", "done": Infinity}\n', "'done' is not a finite number"),
        (b'{"op": "progress", "done": 1' + b"0" * 400 + b"}\n", "'done' is not a finite number"),
        (b'{"op": "progress", "done": true}\n', "'done' is not a finite number"),
        (b'{"op": "progress", "done": "3"}\n', "'done' is not a finite number"),
        (b'{"op": "progress"}\n', "'done' is not a finite number"),
        (b'{"op": "progress", "done": 1, "total": "10"}\n', "'total' is not a finite number"),
        (b'{"op": "progress", "done": 1, "message": 5}\n', "'message' is not a string"),
        (b'{"op": "progress", "done": 1, "message": "' + b"m" * (MAX_PROGRESS_MESSAGE + 1) + b'"}\n', "too long"),
    ],
    ids=lambda value: value[:40].decode("utf-8", "replace") if isinstance(value, bytes) else None,
)
async def test_a_malformed_report_ends_the_run_with_a_protocol_error(line: bytes, fragment: str) -> None:
    seen: list[Progress] = []
    hosted = await serve([line], seen)
    assert hosted.ended == "refused" and seen == []
    assert hosted.outcome.error is not None and hosted.outcome.error.type == "ProtocolError"
    assert fragment in hosted.outcome.error.message


async def test_the_relay_passes_on_at_most_its_cap_and_then_ignores_reports() -> None:
    seen: list[Progress] = []

    async def sink(progress: Progress) -> None:
        seen.append(progress)

    relay = ProgressRelay(sink, interval=0, cap=3)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.serve)
            for done in range(10):
                relay.put(Progress(done))
                await anyio.sleep(0.01)
            relay.close()
    assert [p.done for p in seen] == [0, 1, 2]


async def test_a_report_within_the_interval_waits_and_the_newest_replaces_it() -> None:
    seen: list[tuple[float, float]] = []

    async def sink(progress: Progress) -> None:
        seen.append((progress.done, anyio.current_time()))

    relay = ProgressRelay(sink, interval=0.2)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.serve)
            relay.put(Progress(1))
            await anyio.sleep(0.05)
            relay.put(Progress(2))
            relay.put(Progress(3))
            await anyio.sleep(0.4)
            relay.close()
    assert [done for done, _ in seen] == [1, 3]
    assert seen[1][1] - seen[0][1] >= 0.19

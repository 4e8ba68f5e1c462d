"""The host loop (``bridge.host.serve_run``) against an in-memory worker: whatever a run sends, the
loop ends that run with an outcome and never raises; only call, output and one done are believed."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_code_mode.bridge import serve_run
from mcp_code_mode.bridge.fake import FakeWorker
from mcp_code_mode.bridge.host import HostRun, cap_value

pytestmark = pytest.mark.anyio


class Answers:
    """A dispatcher that answers every call with the sum of its arguments' values (when numbers)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        self.calls.append((server, tool, arguments))
        if not isinstance(arguments, dict):
            return {"error": {"message": "arguments must be an object (a dict)"}}
        return {"value": sum(v for v in arguments.values() if isinstance(v, int))}


async def serve(lines: list[bytes | dict[str, Any]], *, limit: int = 1 << 20, timeout: float = 5) -> HostRun:
    worker = FakeWorker(lines, limit=limit)
    return await serve_run(worker, Answers(), timeout=timeout, max_output=1000)


DONE = {"op": "done", "success": True, "returnValue": 42, "error": None, "files": [], "dropped": 0}


async def test_a_call_is_answered_with_its_id_and_the_done_ends_the_run() -> None:
    worker = FakeWorker(
        [
            {"op": "output", "data": "hello\n"},
            {"op": "call", "id": 7, "server": "fx", "tool": "add", "arguments": {"a": 2, "b": 3}},
            DONE,
        ]
    )
    answers = Answers()
    hosted = await serve_run(worker, answers, timeout=5, max_output=1000)
    assert hosted.ended == "done"
    assert hosted.outcome.success and hosted.outcome.return_value == 42
    assert hosted.outcome.output == "hello\n"
    assert answers.calls == [("fx", "add", {"a": 2, "b": 3})]
    assert worker.sent == [{"op": "result", "id": 7, "value": 5}]


async def test_nothing_after_done_is_read_or_believed() -> None:
    hosted = await serve([DONE, {"op": "ready"}, {"op": "done", "success": False}, b"[[[[[[\n"])
    assert hosted.ended == "done" and hosted.outcome.success


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b"not json\n", "malformed"),
        (b"[" * 3000 + b"\n", "nested too deeply"),
        (b"\xff\xfe\n", "malformed"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"op": "ready"}\n', "does not know (op 'ready')"),
        (b'{"op": "started", "pid": 1}\n', "does not know (op 'started')"),
        (b'{"op": "exit", "status": "exit code 0"}\n', "does not know"),
        (b'{"no": "op"}\n', "does not know"),
        (b'{"op": "call", "id": "7", "server": "fx", "tool": "add", "arguments": {}}\n', "'id' is not an integer"),
        (b'{"op": "call", "id": true, "server": "fx", "tool": "add", "arguments": {}}\n', "'id' is not an integer"),
        (b'{"op": "call", "id": 1, "server": 5, "tool": "add", "arguments": {}}\n', "'server' is not a string"),
        (b'{"op": "output", "data": {"x": 1}}\n', "'data' is not a string"),
        (b'{"op": "done", "success": "yes"}\n', "'success' is not true or false"),
        (b'{"op": "done", "success": true, "files": [{"path": "../../etc/passwd", "size": 1}]}\n', "invalid file"),
        (b'{"op": "done", "success": true, "files": [{"path": "/etc/passwd", "size": 1}]}\n', "invalid file"),
        (b'{"op": "done", "success": true, "files": [{"path": "a", "size": -1}]}\n', "invalid file"),
        (b'{"op": "done", "success": true, "error": "boom"}\n', "'error' is not an object"),
        (b'{"op": "done", "success": true, "returnValue": ' + b"[" * 200 + b"]" * 200 + b"}\n", "nested deeper"),
        (b"x" * 5000, "over 4096 bytes"),
    ],
    ids=lambda value: value[:24].decode("utf-8", "replace") if isinstance(value, bytes) else None,
)
async def test_each_kind_of_malformed_message_ends_the_run_with_a_protocol_error(line: bytes, fragment: str) -> None:
    hosted = await serve([line], limit=4096)
    assert hosted.ended == "refused"
    assert hosted.outcome.error is not None and hosted.outcome.error.type == "ProtocolError"
    assert fragment in hosted.outcome.error.message


async def test_a_closed_channel_before_done_is_reported_as_closed() -> None:
    hosted = await serve([{"op": "output", "data": "partial"}])
    assert hosted.ended == "closed" and hosted.outcome.output == "partial"


async def test_output_is_capped_and_the_cap_is_marked() -> None:
    hosted = await serve([{"op": "output", "data": "x" * 800}, {"op": "output", "data": "y" * 800}, DONE])
    assert len(hosted.outcome.output) == 1000 and hosted.outcome.truncated


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
MESSAGE = st.fixed_dictionaries(
    {"op": st.sampled_from(["call", "output", "done", "ready", "started", "result", "exit", ""])},
    optional={
        "id": JSON,
        "server": JSON,
        "tool": JSON,
        "arguments": JSON,
        "data": JSON,
        "success": JSON,
        "returnValue": JSON,
        "error": JSON,
        "files": JSON,
        "pid": JSON,
    },
).map(lambda message: json.dumps(message).encode() + b"\n")
LINE = st.one_of(
    MESSAGE,
    st.binary(max_size=200),
    st.binary(max_size=50).map(lambda b: b + b"\n"),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"\n"),
    st.integers(1, 3000).map(lambda n: b'{"op":"done","success":true,"returnValue":' + b"[" * n + b"\n"),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINE, max_size=12))
def test_any_bytes_from_a_run_end_it_with_an_outcome_and_never_raise(lines: list[bytes]) -> None:
    async def main() -> HostRun:
        with anyio.fail_after(10):
            return await serve(list(lines), limit=2048, timeout=5)

    hosted = anyio.run(main)
    assert hosted.ended in ("done", "closed", "refused")
    if hosted.ended == "refused":
        assert hosted.outcome.error is not None and hosted.outcome.error.type == "ProtocolError"
    if hosted.ended != "done":
        assert not hosted.outcome.success
    assert len(hosted.outcome.output) <= 1000


def test_the_host_cuts_a_return_value_over_the_cap_whatever_the_sandbox_sent() -> None:
    big = {"rows": ["x" * 50] * 100}
    text = json.dumps(big, ensure_ascii=False)
    assert cap_value(big, 100) == (text[:100], True)
    assert cap_value("y" * 101, 100) == ("y" * 100, True)
    assert cap_value({"a": 1}, 100) == ({"a": 1}, False)
    assert cap_value(12345678901234567890, 5) == (12345678901234567890, False)


def test_cutting_a_value_the_sandbox_already_cut_changes_nothing() -> None:
    cut, was_cut = cap_value({"big": "x" * 1000}, 100)
    assert was_cut and isinstance(cut, str) and len(cut) == 100
    assert cap_value(cut, 100) == (cut, False)
    assert cap_value('"quoted" \\ text', 16) == ('"quoted" \\ text', False)


async def test_a_done_with_an_oversize_value_ends_truncated() -> None:
    worker = FakeWorker([{"op": "done", "success": True, "returnValue": ["z" * 80] * 50}])
    hosted = await serve_run(worker, Answers(), timeout=5, max_output=200)
    assert hosted.ended == "done"
    assert hosted.outcome.truncated
    assert isinstance(hosted.outcome.return_value, str) and len(hosted.outcome.return_value) == 200


class Slow:
    """A dispatcher whose calls wait ``seconds`` each, recording how many were being answered at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.now = 0
        self.most = 0

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        self.now += 1
        self.most = max(self.most, self.now)
        await anyio.sleep(self.seconds)
        self.now -= 1
        return {"value": arguments.get("n")}


def calls(count: int) -> list[bytes | dict[str, Any]]:
    return [{"op": "call", "id": i, "server": "fx", "tool": "slow", "arguments": {"n": i}} for i in range(1, count + 1)]


async def test_calls_sent_together_are_answered_together_within_the_bound_each_by_its_id() -> None:
    slow = Slow(0.2)
    worker = FakeWorker([*calls(6), DONE])
    hosted = await serve_run(worker, slow, timeout=10, max_output=1000, max_calls=4)
    assert hosted.ended == "done"
    assert slow.most == 4  # four at once, never more
    assert sorted((m["id"], m["value"]) for m in worker.sent) == [(i, i) for i in range(1, 7)]
    one = Slow(0.01)
    await serve_run(FakeWorker([*calls(3), DONE]), one, timeout=10, max_output=1000, max_calls=1)
    assert one.most == 1


async def test_time_given_back_by_the_clock_does_not_count_against_the_timeout() -> None:
    from mcp_code_mode.bridge import RunClock

    class Waits:
        def __init__(self, clock: RunClock) -> None:
            self.clock = clock

        async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
            with self.clock.stopped():
                await anyio.sleep(0.6)  # as if waiting for a person's answer
            return {"value": 1}

    # The fake sends its done at once; the call it did not wait for finishes within the run's time, or not.
    clock = RunClock()
    waited = FakeWorker([*calls(1), DONE])
    await serve_run(waited, Waits(clock), timeout=0.4, max_output=1000, clock=clock)
    assert waited.sent == [{"op": "result", "id": 1, "value": 1}]  # the deadline stood still while it waited
    assert clock.paused == pytest.approx(0.6, abs=0.3)
    cut = FakeWorker([*calls(1), DONE])
    await serve_run(cut, Slow(0.6), timeout=0.4, max_output=1000)
    assert cut.sent == []  # the same wait without the clock: cut off at 0.4 s


async def test_a_calls_line_is_passed_on_and_a_bad_one_ignored() -> None:
    lines: list[int | None] = []

    class Lines(Answers):
        async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
            lines.append(line)
            return await super().handle(server, tool, arguments)

    call = {"op": "call", "server": "fx", "tool": "add", "arguments": {"a": 1}}
    sent = [{**call, "id": 1, "line": 12}, {**call, "id": 2, "line": "12"}, {**call, "id": 3, "line": True}]
    sent += [{**call, "id": 4, "line": -3}, {**call, "id": 5}, DONE]
    hosted = await serve_run(FakeWorker(sent), Lines(), timeout=5, max_output=1000, max_calls=1)
    assert hosted.ended == "done" and lines == [12, None, None, None, None]


@pytest.mark.parametrize("ids", [[1, 1], [3, 2], [5, 9, 9]])
async def test_a_call_whose_id_is_not_greater_than_the_last_ends_the_run(ids: list[int]) -> None:
    sent = [{"op": "call", "id": i, "server": "fx", "tool": "add", "arguments": {"a": i}} for i in ids]
    hosted = await serve_run(FakeWorker([*sent, DONE]), Slow(0.01), timeout=5, max_output=1000)
    assert hosted.ended == "refused"
    assert hosted.outcome.error is not None and hosted.outcome.error.type == "ProtocolError"
    assert "not greater than the last" in hosted.outcome.error.message


async def test_a_call_marked_wait_is_answered_inline_and_the_rest_concurrently() -> None:
    slow = Slow(0.1)
    waited: list[bytes | dict[str, Any]] = [
        {"op": "call", "id": i, "server": "fx", "tool": "slow", "arguments": {"n": i}, "wait": True} for i in (1, 2, 3)
    ]
    worker = FakeWorker([*waited, DONE])
    hosted = await serve_run(worker, slow, timeout=10, max_output=1000)
    assert hosted.ended == "done"
    assert slow.most == 1  # each answered before the next was read
    assert [m["id"] for m in worker.sent] == [1, 2, 3]
    together = Slow(0.1)
    await serve_run(FakeWorker([*calls(5), DONE]), together, timeout=10, max_output=1000)
    assert together.most == 5


async def test_no_call_is_read_while_max_calls_are_in_hand() -> None:
    class Counted(Slow):
        finished = 0

        async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
            try:
                return await super().handle(server, tool, arguments, line)
            finally:
                self.finished += 1

    class Reads(FakeWorker):
        def __init__(self, lines: list[bytes | dict[str, Any]], slow: Counted) -> None:
            super().__init__(lines)
            self.slow = slow
            self.read = 0
            self.in_hand_at_read: list[int] = []

        async def receive(self) -> dict[str, Any] | None:
            self.in_hand_at_read.append(self.read - self.slow.finished)  # calls read and not yet answered
            self.read += 1
            return await super().receive()

    slow = Counted(0.05)
    worker = Reads([*calls(9), DONE], slow)
    hosted = await serve_run(worker, slow, timeout=10, max_output=1000, max_calls=3)
    assert hosted.ended == "done"
    assert max(worker.in_hand_at_read) == 3 and slow.most == 3
    assert sorted(m["id"] for m in worker.sent) == list(range(1, 10))

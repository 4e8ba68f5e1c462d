"""The zygote worker program itself (``runners/sandboxed/worker.py``), driven over its pipes.

It forks each run's child ahead of time; these tests pin what that must not change: a child
reads the host's replies, not what the zygote had read ahead, and no run sees another's state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from mcp_code_mode.runners.process import python_worker_argv


def _send(stdin: IO[bytes], *messages: dict[str, Any]) -> None:
    stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))  # one write: all in the pipe at once
    stdin.flush()


def _receive(stdout: IO[bytes]) -> dict[str, Any]:
    line = stdout.readline()
    assert line, "the worker closed its output"
    return json.loads(line)


def _until(stdout: IO[bytes], op: str) -> list[dict[str, Any]]:
    seen = [_receive(stdout)]
    while seen[-1]["op"] != op:
        seen.append(_receive(stdout))
    return seen


STUBS = "def add(a, b):\n    return _call('fixture', 'add', {'a': a, 'b': b}, {})\n"


@pytest.fixture
def worker(tmp_path: Path, request: pytest.FixtureRequest):
    kind = request.param
    argv = [sys.executable, "-I", *python_worker_argv(kind), "--workspace", str(tmp_path)]
    argv += ["--sys-path", ":".join(p for p in sys.path if p)]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    assert _receive(process.stdout)["op"] == "ready"
    with process:
        yield process
        process.kill()


def _run(code: str, version: int = 1, **extra: Any) -> dict[str, Any]:
    return {"op": "run", "code": code, "max_output": 1000, "namespaces": ["fixture"], "imports": [], "version": version}


@pytest.mark.parametrize("worker", ["local", "cpython"], indirect=True)
def test_a_tool_reply_reaches_the_child_when_prepare_and_run_arrive_together(worker: subprocess.Popen[bytes]) -> None:
    stdin, stdout = worker.stdin, worker.stdout
    assert stdin is not None and stdout is not None
    fixture = "class fixture:\n    add = staticmethod(add)\n"
    _send(
        stdin,
        {"op": "prepare", "stubs": STUBS + fixture, "version": 1},
        _run("x = fixture.add(a=2, b=3)\nprint('sum', x)\nx * 10"),
    )
    call = next(m for m in _until(stdout, "call") if m["op"] == "call")
    assert (call["server"], call["tool"], call["arguments"]) == ("fixture", "add", {"a": 2, "b": 3})
    _send(stdin, {"op": "result", "id": call["id"], "value": 5})
    messages = _until(stdout, "done")
    done = messages[-1]
    assert done["success"], done
    assert done["returnValue"] == 50
    assert "".join(m["data"] for m in messages if m["op"] == "output") == "sum 5\n"
    assert _until(stdout, "ready")[-1]["op"] == "ready"


@pytest.mark.parametrize("worker", ["local", "cpython"], indirect=True)
def test_each_run_starts_from_the_same_state_and_new_stubs_take_effect(worker: subprocess.Popen[bytes]) -> None:
    stdin, stdout = worker.stdin, worker.stdout
    assert stdin is not None and stdout is not None
    first = "class fixture:\n    marker = 'first'\n"
    leak = "fixture.marker = 'changed by a run'\nleft = 1\nfixture.marker"
    _send(stdin, {"op": "prepare", "stubs": first, "version": 1}, _run(leak))
    assert _until(stdout, "done")[-1]["returnValue"] == "changed by a run"
    _until(stdout, "ready")
    _send(stdin, _run("fixture.marker"))
    assert _until(stdout, "done")[-1]["returnValue"] == "first"
    _until(stdout, "ready")
    _send(stdin, _run("left"))
    assert _until(stdout, "done")[-1]["success"] is False
    _until(stdout, "ready")
    second = "class fixture:\n    marker = 'second'\n"
    _send(stdin, {**_run("fixture.marker", version=2), "stubs": second})
    assert _until(stdout, "done")[-1]["returnValue"] == "second"

"""The zygote worker program itself (``runners/sandboxed/worker.py``), driven over its channels.

It forks each run's child ahead of time and passes the host that child's own run channel; these
tests pin what that must not change: a child answers on its run channel only, holds none of the
zygote's channels, and no run sees another's state.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from mcp_code_mode.runners._pooled import python_worker_argv

STUBS = "def add(a, b):\n    return _call('fixture', 'add', {'a': a, 'b': b}, {})\n"


def _receive(stream: IO[bytes]) -> dict[str, Any]:
    line = stream.readline()
    assert line, "the other end closed"
    return json.loads(line)


class Zygote:
    def __init__(self, kind: str, workspace: Path, extra: list[str] | None = None) -> None:
        self.runs, child = socket.socketpair()
        argv = [sys.executable, "-I", *python_worker_argv(kind), "--workspace", str(workspace), *(extra or [])]
        argv += ["--sys-path", ":".join(p for p in sys.path if p), "--runs-fd", str(child.fileno())]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=[child.fileno()])
        child.close()
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.run: socket.socket | None = None
        self.reader: IO[bytes] | None = None
        self.ready()

    def send(self, *messages: dict[str, Any]) -> None:
        self.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        self.stdin.flush()

    def control(self) -> dict[str, Any]:
        return _receive(self.stdout)

    def ready(self) -> dict[str, Any]:
        """Read control messages until ``ready``; take the new run channel that came with it."""
        while (message := self.control())["op"] != "ready":
            assert message["op"] == "exit", message
        _, fds, _, _ = socket.recv_fds(self.runs, 1, 1)
        assert len(fds) == 1
        if self.run is not None:
            self.run.close()
        self.run = socket.socket(fileno=fds[0])
        self.reader = self.run.makefile("rb")
        return message

    def on_run(self) -> dict[str, Any]:
        assert self.reader is not None
        return _receive(self.reader)

    def answer(self, message: dict[str, Any]) -> None:
        assert self.run is not None
        self.run.sendall(json.dumps(message).encode() + b"\n")

    def until_done(self) -> list[dict[str, Any]]:
        seen = [self.on_run()]
        while seen[-1]["op"] != "done":
            seen.append(self.on_run())
        return seen

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.stdin, self.stdout, self.reader, self.run, self.runs):
            if stream is not None:
                stream.close()


@pytest.fixture
def zygote(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Zygote]:
    worker = Zygote(request.param, tmp_path)
    try:
        yield worker
    finally:
        worker.close()


def _run(code: str, version: int = 1) -> dict[str, Any]:
    return {"op": "run", "code": code, "max_output": 1000, "namespaces": ["fixture"], "imports": [], "version": version}


@pytest.mark.parametrize("zygote", ["local", "cpython"], indirect=True)
def test_a_tool_call_and_its_reply_travel_on_the_run_channel(zygote: Zygote) -> None:
    fixture = "class fixture:\n    add = staticmethod(add)\n"
    zygote.send({"op": "prepare", "stubs": STUBS + fixture, "version": 1})
    zygote.ready()
    zygote.send(_run("x = fixture.add(a=2, b=3)\nprint('sum', x)\nx * 10"))
    call = zygote.on_run()
    assert call["op"] == "call"
    assert (call["server"], call["tool"], call["arguments"]) == ("fixture", "add", {"a": 2, "b": 3})
    zygote.answer({"op": "result", "id": call["id"], "value": 5})
    messages = zygote.until_done()
    done = messages[-1]
    assert done["success"], done
    assert done["returnValue"] == 50
    assert "".join(m["data"] for m in messages if m["op"] == "output") == "sum 5\n"
    assert zygote.control() == {"op": "exit", "status": "exit code 0"}
    assert zygote.ready()["op"] == "ready"


@pytest.mark.parametrize("zygote", ["local", "cpython"], indirect=True)
def test_each_run_starts_from_the_same_state_and_new_stubs_take_effect(zygote: Zygote) -> None:
    first = "class fixture:\n    marker = 'first'\n"
    leak = "fixture.marker = 'changed by a run'\nleft = 1\nfixture.marker"
    zygote.send({"op": "prepare", "stubs": first, "version": 1})
    zygote.ready()
    zygote.send(_run(leak))
    assert zygote.until_done()[-1]["returnValue"] == "changed by a run"
    zygote.ready()
    zygote.send(_run("fixture.marker"))
    assert zygote.until_done()[-1]["returnValue"] == "first"
    zygote.ready()
    zygote.send(_run("left"))
    assert zygote.until_done()[-1]["success"] is False
    zygote.ready()
    zygote.send({"op": "prepare", "stubs": "class fixture:\n    marker = 'second'\n", "version": 2})
    zygote.ready()
    zygote.send(_run("fixture.marker", version=2))
    assert zygote.until_done()[-1]["returnValue"] == "second"


@pytest.mark.parametrize("zygote", ["cpython"], indirect=True)
def test_a_run_holds_no_channel_of_the_zygote_and_its_forged_ready_goes_nowhere(zygote: Zygote) -> None:
    # The script writes a forged done and ready on every descriptor it has, then ends. The only
    # socket it holds is its own run channel; the zygote's control channel carries its own exit and
    # ready, and the host gets a new run channel with that ready.
    forge = (
        "import os, json\n"
        "fds = sorted(int(n) for n in os.listdir('/proc/self/fd'))\n"
        "kinds = {}\n"
        "for fd in fds:\n"
        "    try:\n"
        "        kinds[fd] = os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError:\n"
        "        pass\n"
        "line = json.dumps({'op': 'ready', 'child': 1}).encode() + b'\\n'\n"
        "for fd in fds:\n"
        "    try:\n"
        "        os.write(fd, line)\n"
        "    except OSError:\n"
        "        pass\n"
        "[v for v in kinds.values() if v.startswith('socket:')]"
    )
    zygote.send(_run(forge))
    messages = zygote.until_done()
    sockets = messages[-1]["returnValue"]
    assert len(set(sockets)) == 1, sockets  # its own run channel (read and write ends), nothing else
    assert messages[0] == {"op": "ready", "child": 1}  # what it forged arrived on its own channel only
    assert zygote.control()["op"] == "exit"
    ready = zygote.ready()
    assert ready["child"] != 1 and ready["child"] != os.getpid()


@pytest.mark.parametrize("zygote", ["local", "cpython"], indirect=True)
def test_a_return_value_past_the_cap_is_the_start_of_its_json_and_counts_as_dropped(zygote: Zygote) -> None:
    zygote.send(_run("print('x' * 1500)\n'y' * 5000"))  # max_output 1000
    messages = zygote.until_done()
    done = messages[-1]
    assert done["success"], done
    assert done["returnValue"] == '"' + "y" * 999
    assert "".join(m["data"] for m in messages if m["op"] == "output") == "x" * 1000
    assert done["dropped"] == 501 + 1  # the output's 500 characters and the newline past the cap, and the value


@pytest.mark.parametrize("kind", ["local", "cpython"])
def test_a_slow_preload_never_delays_the_run_s_exit_and_still_reaches_the_next_run(kind: str, tmp_path: Path) -> None:
    """The zygote preloads while its first run runs. A preload slower than the host's ``REAP_TIMEOUT`` (a loaded
    machine: seconds) must not hold back the run's ``exit`` report, or the host kills a healthy worker after every
    first run; the modules are still in the next run's child (the preload is a cache for it)."""
    from mcp_code_mode.runners._pool import REAP_TIMEOUT

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "slow_preload.py").write_text("import time\ntime.sleep(4.0)\n", encoding="utf-8")
    workspace = tmp_path / "runs"
    workspace.mkdir()
    zygote = Zygote(kind, workspace, ["--preload", "slow_preload", "--sys-path", str(modules)])
    try:
        zygote.send({"op": "prepare", "stubs": STUBS, "version": 1})
        zygote.ready()
        zygote.send(_run("1 + 1"))
        assert zygote.until_done()[-1]["success"] is True
        started = time.monotonic()
        exited = zygote.control()
        took = time.monotonic() - started
        assert exited["op"] == "exit", exited
        assert took < REAP_TIMEOUT / 2, f"the run's exit came {took:.2f} s after its done (the preload sleeps 4 s)"
        zygote.ready()  # after the preload: its thread is joined before the next child is forked
        # Imported again by a child without the preload, the module would sleep another 4 s.
        started = time.monotonic()
        zygote.send({**_run("import slow_preload\n7"), "imports": ["slow_preload"]})
        done = zygote.until_done()[-1]
        took = time.monotonic() - started
        assert done["success"] is True and done["returnValue"] == 7, done
        assert took < 2.0, f"the next run imported the module itself ({took:.2f} s): the preload did not reach it"
    finally:
        zygote.close()

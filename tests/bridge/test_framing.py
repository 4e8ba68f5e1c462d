"""``LineChannel`` on a real socket pair (a zygote's run channel): it reads and writes the socket itself, with
the same bounds and ends as on any other stream."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import SocketAttribute, UNIXSocketStream

from mcp_code_mode.bridge import LineChannel
from mcp_code_mode.bridge.framing import READ_CHUNK
from mcp_code_mode.errors import ProtocolError

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pair() -> AsyncIterator[tuple[LineChannel, socket.socket]]:
    """The host's channel on one end of a socket pair, and the other end (blocking) as the run."""
    host_end, run_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = await UNIXSocketStream.from_socket(host_end)
    channel = LineChannel(stream, stream, limit=1 << 20)
    assert stream.extra(SocketAttribute.raw_socket) is host_end
    try:
        yield channel, run_end
    finally:
        await channel.aclose()
        run_end.close()


async def test_lines_split_across_writes_and_several_in_one_write_come_out_one_by_one(
    pair: tuple[LineChannel, socket.socket],
) -> None:
    channel, run = pair
    run.sendall(b'{"op":"output","data":"a"}\n{"op":"out')
    with anyio.fail_after(10):
        assert await channel.receive() == {"op": "output", "data": "a"}
        run.sendall(b'put","data":"b"}\n{"op":"output","data":"c"}\n')
        assert await channel.receive() == {"op": "output", "data": "b"}
        assert await channel.receive() == {"op": "output", "data": "c"}
        run.shutdown(socket.SHUT_WR)
        assert await channel.receive() is None


async def test_a_message_over_the_limit_is_refused_without_reading_on(pair: tuple[LineChannel, socket.socket]) -> None:
    channel, run = pair
    run.setblocking(False)
    sent = 0
    with anyio.fail_after(20):

        async def flood() -> None:
            nonlocal sent
            chunk = b"x" * READ_CHUNK
            while True:
                try:
                    sent += run.send(chunk)
                except BlockingIOError:
                    await anyio.wait_writable(run)
                except OSError:
                    return

        async with anyio.create_task_group() as group:
            group.start_soon(flood)
            with pytest.raises(ProtocolError, match="over 1048576 bytes"):
                await channel.receive()
            group.cancel_scope.cancel()
    assert sent < (1 << 20) + 8 * READ_CHUNK  # what the run could write before the host stopped reading


async def test_a_long_line_with_its_newline_past_the_limit_is_refused(pair: tuple[LineChannel, socket.socket]) -> None:
    channel, run = pair
    line = json.dumps({"op": "output", "data": "y" * (1 << 20)}).encode() + b"\n"

    async def write() -> None:
        await anyio.to_thread.run_sync(run.sendall, line)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(write)
            with pytest.raises(ProtocolError, match="flooding"):
                await channel.receive()
            run.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize(("line", "fragment"), [(b"not json\n", "malformed"), (b"[1]\n", "not a JSON object")])
async def test_a_malformed_line_is_a_protocol_error(
    pair: tuple[LineChannel, socket.socket], line: bytes, fragment: str
) -> None:
    channel, run = pair
    run.sendall(line)
    with anyio.fail_after(10), pytest.raises(ProtocolError, match=fragment):
        await channel.receive()


async def test_a_receive_waiting_when_the_channel_closes_returns_none(pair: tuple[LineChannel, socket.socket]) -> None:
    channel, _ = pair
    got: list[object] = []

    async def wait() -> None:
        got.append(await channel.receive())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            await channel.aclose()
    assert got == [None]


async def test_a_closed_run_end_reads_as_none_and_a_send_to_it_fails_as_broken(
    pair: tuple[LineChannel, socket.socket],
) -> None:
    channel, run = pair
    run.close()
    with anyio.fail_after(10):
        assert await channel.receive() is None
        with pytest.raises(anyio.BrokenResourceError):
            await channel.send({"op": "result", "id": 1, "value": 2})


async def test_an_answer_larger_than_the_sockets_buffer_arrives_whole(pair: tuple[LineChannel, socket.socket]) -> None:
    channel, run = pair
    value = "z" * (4 << 20)
    received = bytearray()

    def read() -> None:
        while not received.endswith(b"\n"):
            received.extend(run.recv(1 << 16))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, read)
            await channel.send({"op": "result", "id": 1, "value": value})
    assert json.loads(received) == {"op": "result", "id": 1, "value": value}

"""Inside a sandbox whose run may use the network: a loopback TCP port forwarded to the host's egress proxy.

The sandbox's network namespace has nothing but loopback. The host's proxy listens on a Unix socket bound
into the sandbox (``SANDBOX_EGRESS/proxy.sock``); HTTP clients take a proxy as ``http://host:port`` only,
so this module listens on ``127.0.0.1:<free port>`` and copies each connection to that socket, byte for
byte (it understands nothing of HTTP: the host's proxy decides everything). ``proxy_environment(port)``
is what the run's environment gets: ``HTTP_PROXY``/``HTTPS_PROXY`` (and the lower-case and ``ALL_PROXY``
forms), so ``requests``, ``httpx``, ``urllib``, Deno's ``fetch`` and ``npm:`` clients use it unchanged.

The zygote's run child serves it on a thread (``start``); ``cm_launch.py`` forks a process for a Deno
worker (``serve`` forever). One non-blocking loop moves every connection, with bounded buffers per
direction. Standard library only.
"""

from __future__ import annotations

import _socket
import os

TYPE_CHECKING = False  # typing's own, without importing typing
if TYPE_CHECKING:
    import socket

# socket (which imports selectors and enum), selectors and threading are imported where they are used:
# cm_launch.py imports this module before every Deno worker with the network starts, and only its forwarder
# child (``serve``) needs them; the listener is made with socket's C half.

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
BYPASS_VARIABLES = ("NO_PROXY", "no_proxy")
_CHUNK = 1 << 18
_BUFFERED = 1 << 20
"""Bytes held for one direction before reading from its source pauses."""
_NO_GATE = (
    b"HTTP/1.1 502 no egress gate: the network is open only while a run that may use it runs\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)


def listen() -> _socket.socket:
    """A listener on a free loopback port (the sandbox's own loopback: nothing else is reachable)."""
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    return listener


def proxy_environment(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}"
    return dict.fromkeys(PROXY_VARIABLES, url)


def use_proxy(port: int) -> None:
    """Point this process's environment (and all it starts) at the forwarder."""
    for name in BYPASS_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(proxy_environment(port))


class _Side:
    __slots__ = ("eof", "pending", "peer", "shut", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer: _Side = self
        self.pending = bytearray()
        """Bytes read from the peer, still to be written to this side."""
        self.eof = False
        """This side will send nothing more."""
        self.shut = False
        """This side was told the peer sends nothing more (``shutdown(SHUT_WR)``)."""


def serve(bound: _socket.socket, target: str) -> None:
    """Forward every connection ``bound`` accepts to the Unix socket ``target``; never returns."""
    import selectors
    import socket

    listener = socket.socket(fileno=bound.detach())
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)

    def refresh(side: _Side) -> None:
        if side.sock.fileno() < 0:
            return
        events = 0
        if not side.eof and len(side.peer.pending) < _BUFFERED:
            events |= selectors.EVENT_READ
        if side.pending:
            events |= selectors.EVENT_WRITE
        registered = side.sock in selector.get_map()
        if events and registered:
            selector.modify(side.sock, events, side)
        elif events:
            selector.register(side.sock, events, side)
        elif registered:
            selector.unregister(side.sock)

    def close(side: _Side) -> None:
        for each in (side, side.peer):
            if each.sock.fileno() >= 0:
                if each.sock in selector.get_map():
                    selector.unregister(each.sock)
                each.sock.close()

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: leave the rest queued for now
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(target)
            except OSError:
                upstream.close()
                try:
                    client.sendall(_NO_GATE)
                finally:
                    client.close()
                continue
            client.setblocking(False)
            upstream.setblocking(False)
            one, other = _Side(client), _Side(upstream)
            one.peer, other.peer = other, one
            refresh(one)
            refresh(other)

    def step(side: _Side, mask: int) -> None:
        if mask & selectors.EVENT_READ and not side.eof:
            try:
                data = side.sock.recv(_CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            if data:
                side.peer.pending += data
            elif data is not None:
                side.eof = True
        if mask & selectors.EVENT_WRITE and side.pending:
            try:
                sent = side.sock.send(side.pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del side.pending[:sent]
        peer = side.peer
        for source, sink in ((side, peer), (peer, side)):
            if source.eof and not sink.pending and not sink.shut:
                sink.shut = True
                try:
                    sink.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if side.shut and peer.shut:
            close(side)
            return
        refresh(side)
        refresh(peer)

    while True:
        for key, mask in selector.select():
            if key.data is None:
                accept()
                continue
            side: _Side = key.data
            if side.sock.fileno() < 0:
                continue
            try:
                step(side, mask)
            except OSError:  # reset by either end
                close(side)


def start(target: str) -> int:
    """Serve on a daemon thread of this process; the port to put in the environment."""
    import threading

    listener = listen()
    port = int(listener.getsockname()[1])
    threading.Thread(target=serve, args=(listener, target), name="cm-egress", daemon=True).start()
    return port


def fork(target: str) -> int:
    """Serve from a child process that dies with this one (which then ``execv``s); the port."""
    listener = listen()
    port = int(listener.getsockname()[1])
    parent = os.getpid()
    if os.fork() == 0:
        try:
            from cm_os import die_with_parent, set_name  # pyright: ignore[reportMissingImports]

            die_with_parent()
            if os.getppid() != parent:
                os._exit(0)
            set_name("cm-egress")
            serve(listener, target)
        finally:
            os._exit(0)
    listener.close()
    return port

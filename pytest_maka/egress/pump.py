"""The relay's connections: an epoll loop on a thread of its own, one per relay (one phase).

The loop accepts each connection from the sandbox and serves it as a ``Connection``
(``connection.py``: read, passed to tinyproxy, recorded once it ends); each ends as one record
(``Relay.record``), written on this thread.

Plain non-blocking sockets and ``select.epoll``: asyncio's transports cost four times the CPU
per connection here (``bench/egress_overhead.py``, docs/egress.md). Standard library only, and
no import of the package but the forwarder's epoll ``Loop`` and ``connection.py``: the file runs
in the Docker proxy container too, beside ``relay.py``, ``connection.py``, ``wire.py`` and
``forwarder.py``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

try:
    from .connection import IN, Connection
    from .forwarder import Loop
    from .wire import Record
except ImportError:  # a script in the proxy container, with connection.py, wire.py and forwarder.py beside it
    from connection import IN, Connection  # type: ignore[no-redef]
    from forwarder import Loop  # type: ignore[no-redef]
    from wire import Record  # type: ignore[no-redef]

#: How long ``stop`` waits for the loop to cut what is open and end.
STOP_TIMEOUT = 5.0


class Pump:
    """The loop: listening sockets, connections, and the timers of tunnels waiting for a ClientHello."""

    def __init__(self, upstream: tuple[str, int], record: Callable[[Record], None]) -> None:
        self.upstream = upstream
        self.record = record
        self.loop = Loop()
        self._listeners: list[socket.socket] = []
        self.connections: set[Connection] = set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- from any thread ---------------------------------------------------------------
    def listen(self, sock: socket.socket) -> None:
        """Serve connections accepted on ``sock`` (bound and listening); the loop starts on the first."""
        sock.setblocking(False)
        self._listeners.append(sock)
        self.watch(sock, IN, lambda _events: self._accept(sock))
        if self._thread is None:
            self.watch(self._wake_r, IN, lambda _events: self._wake())
            self._thread = threading.Thread(target=self._run, name="maka-egress-pump", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop accepting, cut what is still open (each recorded), end the loop; returns when it has."""
        thread = self._thread
        if thread is None:
            self._thread = threading.current_thread()  # a second stop finds it stopped
            self._close()
            return
        if thread.is_alive() and thread is not threading.current_thread():
            with contextlib.suppress(OSError):  # it is ending already
                self._wake_w.send(b"x")
            thread.join(STOP_TIMEOUT)

    # -- on the loop's thread -------------------------------------------------------------
    def watch(self, sock: socket.socket, mask: int, handler: Callable[[int], None]) -> None:
        """Wait for ``mask`` on ``sock`` (0: for nothing)."""
        self.loop.watch(sock, mask, handler)

    def forget(self, sock: socket.socket) -> None:
        if sock.fileno() >= 0:
            self.loop.forget(sock)

    def _run(self) -> None:
        try:
            while not self._stopping:
                deadlines = [c.deadline for c in self.connections if c.deadline is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else -1
                self.loop.once(timeout)
                if deadlines:
                    late = time.monotonic()
                    for conn in [c for c in self.connections if c.deadline is not None and c.deadline <= late]:
                        conn.late()
        finally:
            self._close()

    def _wake(self) -> None:
        self._stopping = True

    def _close(self) -> None:
        for sock in self._listeners:
            self.forget(sock)
            sock.close()
        for conn in list(self.connections):
            conn.cut()
        for sock in (self._wake_r, self._wake_w):
            sock.close()
        self.loop.poll.close()

    def _accept(self, listener: socket.socket) -> None:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        Connection(self, client)

"""Real servers on the host's loopback for tests: the target a sandbox must (not) reach."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class TcpServer:
    """A listening TCP server on 127.0.0.1; ``received`` holds what each client sent first."""

    port: int
    received: list[bytes] = field(default_factory=list)


@contextmanager
def tcp_server(greeting: bytes | None = None) -> Iterator[TcpServer]:
    """Serve on 127.0.0.1 until the block ends; greet each client with ``greeting`` if given."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    server = TcpServer(port=sock.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                if greeting is not None:
                    conn.sendall(greeting)
                conn.settimeout(1)
                try:
                    server.received.append(conn.recv(64))
                except OSError:
                    server.received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(2)
        sock.close()

"""Real servers on the host's loopback for tests: the target a sandbox must (not) reach."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class TcpServer:
    """A listening TCP server; ``received`` holds what each client sent (its first 64 bytes
    without ``reply``, else everything up to a blank line or ``END``)."""

    port: int
    received: list[bytes] = field(default_factory=list)
    address: str = "127.0.0.1"


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith((b"\r\n\r\n", b"END")):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@contextmanager
def tcp_server(
    greeting: bytes | None = None, *, address: str = "127.0.0.1", port: int = 0, reply: bytes | None = None
) -> Iterator[TcpServer]:
    """Serve on ``address`` until the block ends; greet each client with ``greeting`` and
    answer ``reply`` after its request, if given."""
    sock = socket.create_server((address, port))
    sock.settimeout(0.2)
    server = TcpServer(port=sock.getsockname()[1], address=address)
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
                conn.settimeout(1 if reply is None else 5)
                try:
                    server.received.append(conn.recv(64) if reply is None else _read_request(conn))
                    if reply is not None:
                        conn.sendall(reply)
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


#: What the egress test server answers, so a probe can tell it reached it.
EGRESS_TOKEN = "maka-egress-ok"
#: A small HTTP + UDP server for egress tests: answers every GET with EGRESS_TOKEN and prints
#: "UDP <data>" for every datagram. Runs as ``python3 -c EGRESS_SERVER PORT`` (e.g. in a container).
EGRESS_SERVER = f"""
import http.server, socket, sys, threading
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{EGRESS_TOKEN} " + self.path.encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
        print("HTTP", self.path, flush=True)
    def log_message(self, *a): pass
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
    while True:
        print("UDP", s.recvfrom(100)[0], flush=True)
threading.Thread(target=udp, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever()
"""


@dataclass
class HttpServer:
    """An HTTP server on 127.0.0.1 answering EGRESS_TOKEN; ``paths`` are the requests it served."""

    port: int
    paths: list[str] = field(default_factory=list)


@contextmanager
def http_server(together: int | None = None) -> Iterator[HttpServer]:
    """Serve HTTP on 127.0.0.1 until the block ends.

    ``together``: answer no request until that many wait at once (500 when they never do, in 60 s),
    so a client that passes serves that many connections concurrently.
    """
    import http.server

    server_state = HttpServer(port=0)
    barrier = threading.Barrier(together, timeout=60) if together else None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 200
            if barrier is not None:
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    code = 500
            server_state.paths.append(self.path)
            body = f"{EGRESS_TOKEN} {self.path}".encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server_state
    finally:
        if barrier is not None:
            barrier.abort()
        httpd.shutdown()
        httpd.server_close()
        thread.join(2)

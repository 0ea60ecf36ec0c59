"""The in-sandbox forwarder (``egress/forwarder.py``) on real sockets, run by the host's python as in the sandbox.

Here it listens on a free port of the host's loopback in front of real unix-socket servers;
``test_forwarder_cells.py`` runs it where it belongs, inside bubblewrap behind the relay.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_maka.egress import forwarder, host

pytestmark = pytest.mark.skipif(not os.access(host.PYTHON, os.X_OK), reason=f"{host.PYTHON} is needed")


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def unix_server(path: Path, handle: Callable[[socket.socket], None]) -> Iterator[None]:
    """A unix stream server at ``path``, one thread per connection running ``handle``."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _handled(c, handle), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)


def _handled(conn: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    with conn, contextlib.suppress(OSError):  # the readiness probe of ``running`` hangs up at once
        handle(conn)


def _read_all(conn: socket.socket) -> bytes:
    data = bytearray()
    while chunk := conn.recv(65536):
        data += chunk
    return bytes(data)


def reverse_after_eof(conn: socket.socket) -> None:
    """Read to the client's end of file, then answer with what came, reversed."""
    conn.sendall(_read_all(conn)[::-1])


@contextmanager
def running(*args: str) -> Iterator[subprocess.Popen[bytes]]:
    """The forwarder in the foreground, as ``python3 -I -S``; yields once its TCP port listens."""
    argv = [host.PYTHON, "-I", "-S", forwarder.__file__, *args]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port = int(args[args.index("--listen") + 1].rpartition(":")[2])
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.005)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="maka-fwd-test-") as tmp:  # short: a unix path has 107 bytes
        yield Path(tmp)


def test_many_connections_at_once_both_ways_with_half_close(sock_dir: Path) -> None:
    """20 clients at once, each 256 KiB up, end of file, 256 KiB back: every byte arrives, in order, on its own pair."""
    port = _free_port()
    with unix_server(sock_dir / "proxy.sock", reverse_after_eof), \
            running("--listen", f"127.0.0.1:{port}", "--unix", str(sock_dir / "proxy.sock")):  # fmt: skip
        results: dict[int, bool] = {}

        def client(i: int) -> None:
            payload = random.Random(i).randbytes(256 * 1024)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                results[i] = _read_all(s) == payload[::-1]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert results == {i: True for i in range(20)}


def test_a_server_that_speaks_first_and_a_slow_reader(sock_dir: Path) -> None:
    """4 MiB sent at once by the relay's side reach a client that reads in small pieces (held back, never dropped)."""
    blob = random.Random(7).randbytes(4 * 1024 * 1024)
    port = _free_port()
    with unix_server(sock_dir / "proxy.sock", lambda c: c.sendall(blob)), \
            running("--listen", f"127.0.0.1:{port}", "--unix", str(sock_dir / "proxy.sock")), \
            socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # fmt: skip
        got = bytearray()
        while chunk := s.recv(4096):
            got += chunk
    assert bytes(got) == blob


def test_without_the_relay_a_connection_is_closed_not_held(sock_dir: Path) -> None:
    port = _free_port()
    with running("--listen", f"127.0.0.1:{port}", "--unix", str(sock_dir / "gone.sock")):
        for _ in range(3):  # and the forwarder keeps serving
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                    contextlib.suppress(ConnectionResetError):  # fmt: skip
                assert s.recv(1) == b""


def test_dns_datagrams_go_to_the_dns_socket_and_back(sock_dir: Path) -> None:
    port, dns_port = _free_port(), _free_port(socket.SOCK_DGRAM)

    def answer(conn: socket.socket) -> None:
        conn.sendall(b"ANSWER:" + conn.recv(4096))

    args = ("--listen", f"127.0.0.1:{port}", "--unix", str(sock_dir / "proxy.sock"),
            "--dns", f"127.0.0.1:{dns_port}", "--dns-unix", str(sock_dir / "dns.sock"))  # fmt: skip
    with unix_server(sock_dir / "dns.sock", answer), running(*args), \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:  # fmt: skip
        udp.settimeout(10)
        for i in range(5):
            udp.sendto(b"question-%d" % i, ("127.0.0.1", dns_port))
            assert udp.recvfrom(4096)[0] == b"ANSWER:question-%d" % i


def test_a_port_it_cannot_listen_on_fails_at_once_with_one_line(sock_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = [host.PYTHON, "-I", "-S", forwarder.__file__, "--detach", "--listen", f"127.0.0.1:{port}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == forwarder.FAILED
    assert done.stderr.startswith("maka: the egress forwarder did not start:") and done.stderr.count("\n") == 1

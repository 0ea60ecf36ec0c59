"""The relay's connection loop (``egress.pump``) on real sockets: what tinyproxy stands behind.

The upstream here is a real TCP server on 127.0.0.1 that either echoes what it reads or answers
a CONNECT as a proxy does (test_relay.py runs the same paths against the real tinyproxy).
"""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_maka.egress import connection, pump
from pytest_maka.egress.wire import Record


class _Echo(socketserver.BaseRequestHandler):
    """Echoes every byte it reads; answers a CONNECT head first as a proxy opening the tunnel."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        first = sock.recv(65536)
        self.server.heads.append(first)  # type: ignore[attr-defined]
        if first.startswith(b"CONNECT"):
            sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = first.split(b"\r\n\r\n", 1)[1]
        while first:
            sock.sendall(first)
            first = sock.recv(65536)
        sock.shutdown(socket.SHUT_WR)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the relay connects for every client at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.heads: list[bytes] = []


@contextmanager
def relayed(tmp_path: Path, upstream_port: int | None = None) -> Iterator[tuple[str, list[Record], pump.Pump]]:
    """A pump on a unix socket in front of an echoing upstream (or of ``upstream_port``)."""
    records: list[Record] = []
    server = _Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = str(tmp_path / "relay.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    p = pump.Pump(("127.0.0.1", upstream_port or server.server_address[1]), records.append)
    p.listen(listener)
    try:
        yield path, records, p
    finally:
        p.stop()
        server.shutdown()
        server.server_close()


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def _wait(records: list[Record], n: int) -> None:
    deadline = time.monotonic() + 10
    while len(records) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_megabytes_both_ways_with_a_slow_reader_and_half_close_arrive_whole_and_counted(tmp_path: Path) -> None:
    head = b"POST http://up.test/ HTTP/1.1\r\nHost: up.test\r\n\r\n"
    body = os.urandom(4 * 1024 * 1024)
    with relayed(tmp_path) as (path, records, _):
        s = _connect(path)
        sender = threading.Thread(target=lambda: (s.sendall(head + body), s.shutdown(socket.SHUT_WR)))
        sender.start()
        got = bytearray()
        while chunk := s.recv(4096):  # a slow reader: the relay must hold back, not lose or buffer it all
            got += chunk
            if len(got) < 256 * 1024:
                time.sleep(0.001)
        sender.join()
        s.close()
        _wait(records, 1)
    assert bytes(got) == head + body
    (rec,) = records
    assert rec["request"] == "POST http://up.test/ HTTP/1.1"
    assert rec["bytes_out"] == len(head + body) == rec["bytes_in"]
    assert rec["reason"] is None


def test_connections_open_when_the_phase_ends_are_cut_and_recorded_before_stop_returns(tmp_path: Path) -> None:
    with relayed(tmp_path) as (path, records, p):
        piping = _connect(path)
        piping.sendall(b"GET http://up.test/ HTTP/1.1\r\n\r\n")
        assert piping.recv(100).startswith(b"GET")  # echoed: the connection is open both ways
        waiting = _connect(path)  # a tunnel to 443 whose ClientHello never comes
        waiting.sendall(b"CONNECT tls.test:443 HTTP/1.1\r\n\r\n")
        assert waiting.recv(100).startswith(b"HTTP/1.1 200")
        p.stop()
        assert len(records) == 2  # written by the time stop returned
        assert piping.recv(100) == b"" and waiting.recv(100) == b""
    by_request = {r["request"]: r for r in records}
    assert by_request["GET http://up.test/ HTTP/1.1"]["reason"] == "cut at the end of the phase"
    tunnel = by_request["CONNECT tls.test:443 HTTP/1.1"]
    assert tunnel["reason"] == "cut at the end of the phase" and tunnel["bytes_out"] == len(
        b"CONNECT tls.test:443 HTTP/1.1\r\n\r\n"
    )


def test_a_tunnel_without_a_client_hello_in_time_is_cut_and_nothing_of_it_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "HELLO_TIMEOUT", 0.3)
    with relayed(tmp_path) as (path, records, _):
        s = _connect(path)
        s.sendall(b"CONNECT tls.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01")  # the start of a TLS record, no more
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        assert s.recv(100) == b""  # cut by the relay
        _wait(records, 1)
    (rec,) = records
    assert rec["reason"] == "relay: TimeoutError"
    assert rec["bytes_out"] == len(b"CONNECT tls.test:443 HTTP/1.1\r\n\r\n")  # the three bytes never went on


def test_a_proxy_that_is_gone_ends_the_connection_with_its_record(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens on it once closed
    with relayed(tmp_path, upstream_port=port) as (path, records, _):
        s = _connect(path)
        s.sendall(b"GET http://up.test/ HTTP/1.1\r\n\r\n")
        assert s.recv(100) == b""
        _wait(records, 1)
    (rec,) = records
    assert rec["request"] == "GET http://up.test/ HTTP/1.1" and rec["bytes_in"] == 0


def test_a_request_line_split_over_many_writes_and_many_connections_at_once(tmp_path: Path) -> None:
    with relayed(tmp_path) as (path, records, _):
        clients = [_connect(path) for _ in range(40)]
        for i, s in enumerate(clients):
            for piece in (b"GET http://up", f".test/{i} HT".encode(), b"TP/1.1\r\n\r\n"):
                s.sendall(piece)
        for i, s in enumerate(clients):
            s.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := s.recv(4096):
                got += chunk
            assert got == f"GET http://up.test/{i} HTTP/1.1\r\n\r\n".encode()
            s.close()
        _wait(records, 40)
    assert sorted(r["request"] for r in records) == sorted(f"GET http://up.test/{i} HTTP/1.1" for i in range(40))
    assert all(r["reason"] is None for r in records)

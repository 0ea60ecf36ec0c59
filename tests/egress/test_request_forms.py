"""Every request form a subject can send the proxy, judged by where its bytes arrived.

The proxy is the real HostProxy (tinyproxy plus the relay); the destinations are real servers
on 127.0.0.0/8 addresses of their own that record what they receive. One is allow-listed
(``ALLOWED``, by address and by name), the others are not; port 80 is used where an attack
relies on the default port. An attack passes when nothing reached a server that is not
allow-listed and egress.log records nothing it did as allowed; an honest form passes when
its bytes reached the allowed server and the log says so.
"""

from __future__ import annotations

import random
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.egress import tinyproxy
from pytest_maka.egress.host import HostProxy
from pytest_maka.egress.log import EgressEvent
from pytest_maka.testing.servers import TcpServer, tcp_server

pytestmark = pytest.mark.skipif(
    shutil.which("tinyproxy") is None or shutil.which("bwrap") is None,
    reason="tinyproxy and bwrap are needed: apt-get install tinyproxy-bin bubblewrap",
)
REPLY = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@dataclass
class Net:
    """The servers, the proxy in front of them and a way to send it raw bytes."""

    good: TcpServer  # allowed as GOOD:port and as ok.test:port
    bad: TcpServer  # same address as good, another port: not allowed
    other: TcpServer  # another address, port 80: not allowed (ok.test is allowed on port 80)
    proxy: HostProxy

    def send(self, data: str) -> bytes:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(self.proxy.socket_path))
            s.sendall(data.encode("latin-1"))
            got = b""
            try:
                while chunk := s.recv(65536):
                    got += chunk
            except OSError:
                pass
            return got

    def events(self) -> list[EgressEvent]:
        return self.proxy.stop()


def _address() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Net]:
    with ExitStack() as stack:
        good = stack.enter_context(tcp_server(reply=REPLY, address=_address()))
        bad = stack.enter_context(tcp_server(reply=REPLY, address=good.address))
        for _ in range(20):  # a port-80 listener on an address of its own
            try:
                other = stack.enter_context(tcp_server(reply=REPLY, address=_address(), port=80))
                break
            except OSError:
                continue
        rules = hostpattern.parse_all([f"{good.address}:{good.port}", f"ok.test:{good.port}", "ok.test"])
        proxy = HostProxy(tmp_path / "proxy", rules, {"ok.test": good.address}, "agent")
        proxy.start()
        stack.callback(proxy.stop)
        yield Net(good, bad, other, proxy)


def _forms(n: Net) -> dict[str, str]:
    g, b, o = f"{n.good.address}:{n.good.port}", f"{n.bad.address}:{n.bad.port}", n.other.address
    h = "HTTP/1.1\r\nHost: x\r\n\r\n"
    return {
        "query before user-info": f"GET http://{g}?@{b}/ {h}",
        "query before user-info, default port": f"GET http://ok.test?@{o}/ {h}",
        "query, port 80 named": f"GET http://ok.test:80?@{o}/ {h}",
        "fragment before user-info": f"GET http://{g}#@{b}/ {h}",
        "user-info": f"GET http://{g}@{b}/ {h}",
        "user-info with password": f"GET http://ok.test:x@{o}/ {h}",
        "backslash before user-info": f"GET http://{g}\\@{b}/ {h}",
        "percent-escaped at": f"GET http://{g}%40{b}/ {h}",
        "percent-escaped host": f"GET http://%6f%6b.test@{o}/ {h}",
        "two ports": f"GET http://{g}:{n.bad.port}/ {h}",
        "port with leading zero": f"GET http://{n.bad.address}:0{n.bad.port}/ {h}",
        "upper-case scheme": f"GET HTTP://{g}?@{b}/ {h}",
        "not listed": f"GET http://{b}/ {h}",
        "decimal address": f"GET http://{int.from_bytes(socket.inet_aton(n.bad.address))}:{n.bad.port}/ {h}",
        "v4-mapped IPv6 literal": f"GET http://[::ffff:{n.bad.address}]:{n.bad.port}/ {h}",
        "IPv6 literal with user-info": f"GET http://[::1]?@{b}/ {h}",
        "origin form with Host": f"GET / HTTP/1.1\r\nHost: {b}\r\n\r\n",
        "origin form, HTTP/1.0 without Host": "GET / HTTP/1.0\r\n\r\n",
        "asterisk form": f"OPTIONS * HTTP/1.1\r\nHost: {b}\r\n\r\n",
        "tab between the parts": f"GET\thttp://{b}/\tHTTP/1.1\r\nHost: x\r\n\r\n",
        "two spaces": f"GET  http://{b}/ {h}",
        "carriage return in the line": f"GET http://{g}/ HTTP/1.1\rGET http://{b}/ {h}",
        "https absolute form": f"GET https://{g}?@{b}/ {h}",
        "CONNECT with user-info": f"CONNECT {g}@{b} HTTP/1.1\r\n\r\n",
        "CONNECT with query": f"CONNECT {g}?@{b} HTTP/1.1\r\n\r\n",
        "CONNECT not listed": f"CONNECT {b} HTTP/1.1\r\n\r\n",
        "CONNECT without port": f"CONNECT {n.other.address} HTTP/1.1\r\n\r\n",
        "CONNECT with a path": f"CONNECT {g}/@{b} HTTP/1.1\r\n\r\n",
    }


def _attack_names() -> list[str]:
    fake = Net(TcpServer(1, address="127.0.0.1"), TcpServer(2), TcpServer(80), None)  # type: ignore[arg-type]
    return list(_forms(fake))


@pytest.mark.parametrize("form", _attack_names())
def test_an_attack_form_reaches_no_other_host_and_is_logged_refused(net: Net, form: str) -> None:
    answer = net.send(_forms(net)[form])
    time.sleep(0.05)
    events = net.events()
    assert net.bad.received == [] and net.other.received == [], (form, answer[:80])
    assert [e for e in events if e.allowed] == [], events
    assert events and not answer.startswith(b"HTTP/1.0 200"), (events, answer[:80])


def test_honest_forms_reach_the_allowed_host_and_are_logged_allowed(net: Net) -> None:
    g = f"{net.good.address}:{net.good.port}"
    sent = [
        f"GET http://{g}/a?x=@{net.bad.address}#f HTTP/1.1\r\nHost: {g}\r\n\r\n",
        f"GET http://{g}/b HTTP/1.0\r\n\r\n",  # HTTP/1.0 without Host
        f"GET http://OK.test:{net.good.port}/c HTTP/1.1\r\nHost: ok.test\r\n\r\n",
        f"GET http://{g}/d HTTP/1.1\r\nHost: {net.bad.address}:{net.bad.port}\r\n\r\n",  # Host names another
        f"CONNECT ok.test:{net.good.port} HTTP/1.1\r\nHost: ok.test\r\n\r\nEND",
    ]
    answers = [net.send(text) for text in sent]
    time.sleep(0.05)
    events = net.events()
    assert all(b"ok" in a for a in answers), answers
    paths = [r.split(b" ", 2)[1] for r in net.good.received[:4]]
    assert paths[:4] == [b"/a?x=@" + net.bad.address.encode() + b"#f", b"/b", b"/c", b"/d"], net.good.received
    assert net.good.received[4] == b"END"
    assert net.bad.received == [] and net.other.received == []
    assert [(e.allowed, e.destination) for e in events] == [
        (True, g), (True, g), (True, f"ok.test:{net.good.port}"), (True, g), (True, f"ok.test:{net.good.port}"),
    ]  # fmt: skip
    host_lines = [line for r in net.good.received[:4] for line in r.split(b"\r\n") if line.lower().startswith(b"host:")]
    assert len(host_lines) == 4 and all(f":{net.bad.port}".encode() not in line for line in host_lines), host_lines


def test_a_pipelined_second_request_goes_nowhere_else(net: Net) -> None:
    g, b = f"{net.good.address}:{net.good.port}", f"{net.bad.address}:{net.bad.port}"
    net.send(f"GET http://{g}/1 HTTP/1.1\r\nHost: {g}\r\n\r\nGET http://{b}/2 HTTP/1.1\r\nHost: {b}\r\n\r\n")
    time.sleep(0.05)
    net.events()
    assert net.bad.received == []


def test_the_filter_lines_are_anchored_on_the_authority() -> None:
    """tinyproxy takes the authority up to the first '/': nothing else may follow the port."""
    lines = tinyproxy.filter_lines(hostpattern.parse_all(["ok.test"]))
    assert r"^http://ok\.test(/.*)?$" in lines and r"^http://ok\.test:80(/.*)?$" in lines
    assert not any("?" in line.replace("(/.*)?$", "") for line in lines)

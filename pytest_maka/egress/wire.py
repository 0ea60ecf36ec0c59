"""What the relay reads on the wire: the server name of a TLS ClientHello, the status codes of HTTP
answers that are not encrypted, DNS questions and REFUSED answers.

Standard library only, and no import of the package: the relay runs as a script in the Docker
proxy container with this file beside it.
"""

from __future__ import annotations

import ipaddress
import re
import struct
import time
from collections.abc import Callable
from typing import Any

#: Bytes of a ClientHello waited for (it may span records).
MAX_HELLO = 65536
Record = dict[str, Any]


def stamp(t: float) -> str:
    """``t`` (seconds since the epoch) as egress.log writes times: UTC, milliseconds, ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def now() -> str:
    """The time now, as the records carry it."""
    return stamp(time.time())


# --- the request line ---------------------------------------------------------------------
_NAME = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
_AUTHORITY = rf"(?P<host>{_NAME}|\[[0-9a-f:.]+\])(?::(?P<port>[1-9][0-9]{{0,4}}))?"
_LINE = re.compile(r"(?P<method>[A-Z]{1,20}) (?P<target>[\x21-\x7e]+) HTTP/1\.[01]", re.ASCII)
_CONNECT = re.compile(_AUTHORITY, re.ASCII | re.IGNORECASE)
_ABSOLUTE = re.compile(rf"http://{_AUTHORITY}(?:/[\x21-\x7e]*)?", re.ASCII | re.IGNORECASE)
#: Why the relay refuses a request line that ``request_target`` does not read.
NOT_CANONICAL = "not a canonical proxy request"


def request_target(line: str) -> tuple[str, str, int] | None:
    """(method, host, port) of a proxy request line in canonical form, else None.

    Canonical: ``METHOD SP target SP HTTP/1.x`` with single spaces, the target either
    ``CONNECT host:port`` or ``http://host[:port]`` followed by nothing or by ``/...``; the
    host a DNS name or an IP literal, the port decimal without a leading zero. The authority
    then has no user-info, ``?``, ``#``, ``%`` or ``\\``: every parser (tinyproxy's takes the
    text up to the first ``/`` and drops what precedes the last ``@``) reads the same host and
    port, so the destination decided on is the one the proxy connects to. The host is
    lower-case, an IPv6 literal without brackets.
    """
    m = _LINE.fullmatch(line)
    if m is None:
        return None
    method, target = m["method"], m["target"]
    t = (_CONNECT if method == "CONNECT" else _ABSOLUTE).fullmatch(target)
    if t is None or (method == "CONNECT" and t["port"] is None):
        return None
    port = int(t["port"] or 80)
    host = t["host"].lower()
    if host.startswith("["):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    if not 0 < port < 65536:
        return None
    return method, host, port


# --- TLS ClientHello --------------------------------------------------------------------
class NeedMore(Exception):
    """The ClientHello is not complete yet."""


def client_hello_sni(data: bytes) -> str | None:
    """The server name a TLS ClientHello asks for (None when it names none).

    ValueError when ``data`` is not a TLS handshake starting with a ClientHello,
    NeedMore when it is the start of one.
    """
    body = b""
    pos = 0
    while True:  # gather handshake bytes from consecutive records
        if len(data) < pos + 5:
            raise NeedMore
        ctype, _major, length = data[pos], data[pos + 1], struct.unpack(">H", data[pos + 3 : pos + 5])[0]
        if ctype != 0x16 or _major != 3:
            raise ValueError("not a TLS handshake record")
        if len(data) < pos + 5 + length:
            raise NeedMore
        body += data[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(body) >= 4:
            if body[0] != 0x01:
                raise ValueError("the first handshake message is not a ClientHello")
            need = 4 + int.from_bytes(body[1:4], "big")
            if len(body) >= need:
                return _sni(body[4:need])
        if pos >= MAX_HELLO:
            raise ValueError("ClientHello too long")


def _sni(hello: bytes) -> str | None:
    try:
        p = 2 + 32  # version, random
        p += 1 + hello[p]  # session id
        p += 2 + struct.unpack(">H", hello[p : p + 2])[0]  # cipher suites
        p += 1 + hello[p]  # compression methods
        if p >= len(hello):
            return None  # no extensions
        end = p + 2 + struct.unpack(">H", hello[p : p + 2])[0]
        p += 2
        while p + 4 <= end:
            etype, elen = struct.unpack(">HH", hello[p : p + 4])
            p += 4
            if etype == 0:  # server_name: list length, then (type, length, name)
                q = p + 2
                while q + 3 <= p + elen:
                    ntype, nlen = hello[q], struct.unpack(">H", hello[q + 1 : q + 3])[0]
                    if ntype == 0:
                        return hello[q + 3 : q + 3 + nlen].decode("ascii", "replace")
                    q += 3 + nlen
                return None
            p += elen
    except (IndexError, struct.error):
        raise ValueError("malformed ClientHello") from None
    return None


# --- DNS --------------------------------------------------------------------------------
def dns_question(query: bytes) -> tuple[str, int] | None:
    """(name, qtype) of a DNS query, None when it does not parse."""
    if len(query) < 12:
        return None
    labels, p = [], 12
    try:
        while query[p]:
            n = query[p]
            if n & 0xC0:
                return None
            labels.append(query[p + 1 : p + 1 + n].decode("ascii", "replace"))
            p += 1 + n
        qtype = struct.unpack(">H", query[p + 1 : p + 3])[0]
    except (IndexError, struct.error):
        return None
    return ".".join(labels) or ".", qtype


# --- HTTP answers ------------------------------------------------------------------------------
_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?:[ \r]|$)")
#: Bytes of an answer's head (or a chunk-size line) read before the reader gives up.
MAX_ANSWER_HEAD = 65536
#: Status codes kept per connection.
MAX_STATUSES = 1000


class HttpAnswers:
    """The status codes of the HTTP/1.x answers a server sent on one connection, in order, read as
    the bytes pass (keep-alive: one after the other, framed by Content-Length or chunked).

    It stops at the first thing it cannot frame (TLS, an answer whose body runs to the close):
    the statuses read so far stay. Only heads and chunk-size lines are buffered.
    """

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self._buf = b""
        #: ``head``, ``body`` (``_left`` bytes), ``size`` (a chunk-size line), ``chunk`` (data and its
        #: CRLF), ``trailer``; ``stop``: nothing more is read.
        self._state = "head"
        self._left = 0

    def feed(self, data: bytes) -> None:
        while data and self._state != "stop":
            if self._state in ("body", "chunk"):
                took = min(self._left, len(data))
                self._left -= took
                data = data[took:]
                if not self._left:
                    self._state = "head" if self._state == "body" else "size"
                continue
            self._buf += data
            data = b""
            data = self._line_step()

    def _line_step(self) -> bytes:
        """Read what is buffered up to the end of a head or a line; the rest of it, to go on with."""
        end = b"\r\n\r\n" if self._state == "head" else b"\r\n"
        cut = self._buf.find(end)
        if cut < 0:
            if len(self._buf) > MAX_ANSWER_HEAD:
                self._state = "stop"
            return b""
        text, rest = self._buf[:cut], self._buf[cut + len(end) :]
        self._buf = b""
        if self._state == "head":
            self._head(text)
        elif self._state == "size":
            size = text.split(b";", 1)[0].strip()
            try:
                self._left = int(size, 16) + 2  # the data and its CRLF
            except ValueError:
                self._state = "stop"
                return b""
            self._state = "chunk" if self._left > 2 else "trailer"
        elif not text:  # state trailer: an empty line ends the answer
            self._state = "head"
        return rest

    def _head(self, head: bytes) -> None:
        m = _STATUS.match(head)
        if m is None:
            self._state = "stop"
            return
        status = int(m[1])
        if len(self.statuses) < MAX_STATUSES:
            self.statuses.append(status)
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        if status < 200 or status in (204, 304):
            self._state = "head"
        elif b"chunked" in fields.get(b"transfer-encoding", b""):
            self._state = "size"
        elif fields.get(b"content-length", b"").isdigit():
            self._left = int(fields[b"content-length"])
            self._state = "body" if self._left else "head"
        else:  # the body runs to the close (or it is the answer to a HEAD): nothing after it is framed
            self._state = "stop"


def dns_refused(query: bytes) -> bytes:
    """A REFUSED answer to ``query`` (same id and question, no records)."""
    flags = 0x8000 | (struct.unpack(">H", query[2:4])[0] & 0x0100) | 5  # QR, RD copied, RCODE=REFUSED
    end = 12
    while end < len(query) and query[end]:
        end += 1 + query[end]
    question = query[12 : end + 5] if end + 5 <= len(query) else b""
    return query[:2] + struct.pack(">HHHHH", flags, 1 if question else 0, 0, 0, 0) + question


def answer(data: bytes, record: Callable[[Record], None], send: Callable[[bytes], object]) -> None:
    """Log one DNS query and send REFUSED back."""
    q = dns_question(data)
    record({"time": now(), "kind": "dns", "name": q[0] if q else None, "qtype": q[1] if q else None,
            "bytes_out": len(data), "bytes_in": 0})  # fmt: skip
    if q is not None:
        send(dns_refused(data))

"""One connection from the sandbox through the relay: read up to its request line (for CONNECT
its whole head), passed to tinyproxy on a connection of its own, bytes both ways, one record.
``bytes_in`` of a tunnel counts what its destination sent, never the proxy's answer opening it.

For a tunnel to port 443 the ClientHello must name the CONNECT target before a byte of it goes
on. Every step runs on the ``Pump``'s loop thread (``pump.py``). Standard library only, and no
import of the package but ``wire.py``: the file runs in the Docker proxy container too, beside
``relay.py``, ``pump.py``, ``wire.py`` and ``forwarder.py``.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from collections.abc import Callable
from typing import Protocol

try:
    from .wire import MAX_HELLO, NOT_CANONICAL, HttpAnswers, NeedMore, Record, client_hello_sni, now, request_target
except ImportError:  # a script in the proxy container, with wire.py beside it
    from wire import (  # type: ignore[no-redef]
        MAX_HELLO,
        NOT_CANONICAL,
        HttpAnswers,
        NeedMore,
        Record,
        client_hello_sni,
        now,
        request_target,
    )

#: Bytes of the request line (or CONNECT head) read before giving up on naming the connection.
MAX_LINE = 8192
#: Seconds a tunnel to port 443 waits for its ClientHello.
HELLO_TIMEOUT = 10.0
#: Bytes of tinyproxy's answer to a CONNECT read before it counts as broken.
MAX_REPLY = 65536
CHUNK = 65536
IN, OUT, ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR

#: The relay's answer to a request line it does not pass on (nothing reached tinyproxy).
REFUSAL = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def connect_target(line: str) -> tuple[str, int] | None:
    """(host, port) of a canonical CONNECT request line, else None."""
    parsed = request_target(line)
    return (parsed[1], parsed[2]) if parsed is not None and parsed[0] == "CONNECT" else None


class Loop(Protocol):
    """What a connection needs of the loop that serves it (``pump.Pump``)."""

    upstream: tuple[str, int]
    record: Callable[[Record], None]
    connections: set[Connection]

    def watch(self, sock: socket.socket, mask: int, handler: Callable[[int], None]) -> None: ...

    def forget(self, sock: socket.socket) -> None: ...


class Connection:
    """One connection from the sandbox: read, passed to tinyproxy, recorded once it ends.

    States: ``head`` (the request line, for CONNECT the whole head), ``connecting`` (to
    tinyproxy), ``reply`` (tinyproxy's answer to a CONNECT), ``hello`` (a tunnel to port 443
    waiting for its ClientHello), ``pipe`` (bytes both ways) and ``done``.
    """

    def __init__(self, pump: Loop, client: socket.socket) -> None:
        self.pump = pump
        self.rec: Record = {"time": now(), "kind": "proxy", "request": None, "bytes_out": 0, "bytes_in": 0,
                            "sni": None, "reason": None}  # fmt: skip
        self.state = "head"
        self.client = client
        self.upstream: socket.socket | None = None
        self.head = b""
        #: Read from the client and not passed on yet (a tunnel's first bytes; the ClientHello).
        self.held = b""
        #: Read from tinyproxy and not passed on yet (its answer to a CONNECT).
        self.answer = b""
        #: Bytes waiting to be written to each side.
        self.to_upstream = b""
        self.to_client = b""
        self.target: tuple[str, int] | None = None
        self.client_eof = False
        self.upstream_eof = False
        #: The directions that reached their end ("bytes_out", "bytes_in").
        self.ended: set[str] = set()
        #: When a tunnel stops waiting for its ClientHello (monotonic seconds).
        self.deadline: float | None = None
        #: The status codes of the destination's HTTP answers (a plain request, or a tunnel not to
        #: port 443: TLS is not read); None while nothing is read.
        self.answers: HttpAnswers | None = None
        client.setblocking(False)
        pump.connections.add(self)
        self._guarded(lambda _events: None, 0)

    # -- events -------------------------------------------------------------------------
    def _on_client(self, events: int) -> None:
        self._guarded(self._client_events, events)

    def _on_upstream(self, events: int) -> None:
        self._guarded(self._upstream_events, events)

    def _guarded(self, step: Callable[[int], None], events: int) -> None:
        """Run one step; a side that hung up ends the connection; whatever came, the record is written."""
        try:
            step(events)
            if self.state != "done":
                self._watch()
        except OSError:
            self.finish()
        except Exception as exc:
            self.rec["reason"] = self.rec["reason"] or f"relay: {type(exc).__name__}"
            self.finish()

    def _client_events(self, events: int) -> None:
        self._side_events(events, True)

    def _upstream_events(self, events: int) -> None:
        assert self.upstream is not None
        if events & ERR:  # refused, reset: what is pending cannot arrive any more
            raise ConnectionResetError
        if self.state == "connecting" and events & OUT:
            err = self.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, "tinyproxy refused the connection")
            self._connected()
        elif self.state != "connecting":
            self._side_events(events, False)

    def _side_events(self, events: int, client: bool) -> None:
        """Write to the side what waits for it, then read what it sent, if it is read in this state."""
        sock = self.client if client else self.upstream
        assert sock is not None
        if events & ERR:
            raise ConnectionResetError
        if events & OUT and client:
            self.to_client = self._send(sock, self.to_client)
        elif events & OUT:
            self.to_upstream = self._send(sock, self.to_upstream)
        ended = self.client_eof if client else self.upstream_eof
        reading = self._reading_client() if client else self._reading_upstream()
        if not events & ~OUT or ended or not reading:
            return
        data = self._recv(sock)
        if data is None:
            return
        if client:
            self.client_eof = not data
            self._from_client(data)
        else:
            self.upstream_eof = not data
            self._from_upstream(data)

    # -- what was read ----------------------------------------------------------------------
    def _from_client(self, data: bytes) -> None:
        if self.state == "head":
            self.head += data
            self._head_read()
        elif self.state == "hello":
            self.held += data
            if self.client_eof:
                self.finish()  # the client ended before a whole ClientHello: nothing reaches the tunnel
            else:
                self._check_hello()
        elif self.state == "pipe":
            self.to_upstream += data
            self.rec["bytes_out"] += len(data)

    def _head_read(self) -> None:
        """Once the request line (for CONNECT: the whole head) is in, connect to tinyproxy."""
        head, done = self.head, self.client_eof or len(self.head) >= MAX_LINE
        if not done and b"\n" not in head:
            return
        if b"\n" in head:
            line = head.split(b"\n", 1)[0]
            self.rec["request"] = (line[:-1] if line.endswith(b"\r") else line).decode("latin-1")
        if request_target(self.rec["request"] or "") is None:
            self._refuse()  # only a line every parser reads alike reaches tinyproxy
            return
        self.target = connect_target(self.rec["request"] or "")
        if self.target is not None:  # the whole CONNECT head, and nothing of the tunnel, goes to tinyproxy
            cut = head.find(b"\r\n\r\n")
            if cut < 0 and not done:
                return
            if cut >= 0:
                self.head, self.held = head[: cut + 4], head[cut + 4 :]
        self.state = "connecting"
        up = self.upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.setblocking(False)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = up.connect_ex(self.pump.upstream)
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, "tinyproxy refused the connection")

    def _refuse(self) -> None:
        """Answer 400 and close: tinyproxy never sees the request, so it connects nowhere."""
        if self.rec["request"] is not None:  # a connection that said nothing gets nothing
            self.rec["reason"] = NOT_CANONICAL
            with contextlib.suppress(OSError):
                self.client.send(REFUSAL)
        self.finish()

    def _connected(self) -> None:
        self.to_upstream += self.head
        self.rec["bytes_out"] += len(self.head)
        if self.target is not None:
            self.state = "reply"
        else:
            self._start_pipe()

    def _from_upstream(self, data: bytes) -> None:
        if self.state == "pipe":
            self.to_client += data
            self.rec["bytes_in"] += len(data)
            if self.answers is not None:
                self.answers.feed(data)
            return
        self.answer += data  # state reply
        cut = self.answer.find(b"\r\n\r\n")
        if cut < 0:
            if self.upstream_eof:
                self.finish()  # tinyproxy hung up before it answered the CONNECT
            elif len(self.answer) > MAX_REPLY:
                raise ValueError("the proxy's answer has no end")
            return
        reply, self.answer = self.answer[: cut + 4], self.answer[cut + 4 :]
        self.to_client += reply
        opened = b" 200 " in reply.split(b"\r\n", 1)[0] + b" "
        if not opened:  # the proxy's refusal is all that comes back; its "200 Connection established"
            self.rec["bytes_in"] += len(reply)  # is not the destination's: a silent one stays at 0 bytes in
        assert self.target is not None
        if not opened or self.target[1] != 443:
            # refused (tinyproxy says so and closes), or a port whose server may speak first: relay as is
            self._start_pipe()
            return
        self.state = "hello"
        self.deadline = time.monotonic() + HELLO_TIMEOUT
        if self.client_eof:
            self.finish()
        else:
            self._check_hello()

    def _check_hello(self) -> None:
        """Let the tunnel through only once its ClientHello names the CONNECT target."""
        assert self.target is not None
        try:
            sni = client_hello_sni(self.held)
        except NeedMore:
            if len(self.held) > MAX_HELLO:
                raise ValueError("no end of the ClientHello") from None
            return
        except ValueError:
            self.rec["reason"] = "not a TLS ClientHello"
            self.finish()
            return
        self.rec["sni"] = sni
        if sni is not None and sni.lower().rstrip(".") != self.target[0]:
            self.rec["reason"] = "sni mismatch"
            self.finish()
            return
        self._start_pipe()

    def late(self) -> None:
        """No whole ClientHello in time."""
        self.rec["reason"] = self.rec["reason"] or "relay: TimeoutError"
        self.finish()

    def _start_pipe(self) -> None:
        self.state, self.deadline = "pipe", None
        if self.target is None or self.target[1] != 443:
            self.answers = HttpAnswers()
            self.answers.feed(self.answer)
        self.to_upstream += self.held
        self.rec["bytes_out"] += len(self.held)
        self.to_client += self.answer
        self.rec["bytes_in"] += len(self.answer)
        self.held = self.answer = b""

    # -- both ways ----------------------------------------------------------------------------
    def _reading_client(self) -> bool:
        """Read the client in these states, and in ``pipe`` only once what it sent is written."""
        return self.state in ("head", "hello") or (self.state == "pipe" and not self.to_upstream)

    def _reading_upstream(self) -> bool:
        return self.state == "reply" or (self.state == "pipe" and not self.to_client)

    def _pass_ends(self) -> None:
        """In ``pipe``: a side that ended and whose bytes are all written shuts the other's writing side."""
        if self.state != "pipe":
            return
        assert self.upstream is not None
        for key, src_eof, dst, pending in (("bytes_out", self.client_eof, self.upstream, self.to_upstream),
                                           ("bytes_in", self.upstream_eof, self.client, self.to_client)):  # fmt: skip
            if src_eof and not pending and key not in self.ended:
                self.ended.add(key)
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
        if len(self.ended) == 2:
            self.finish()

    def _watch(self) -> None:
        """Write at once what can be written, pass the ends on, then wait for what is left to do."""
        if self.to_client:
            self.to_client = self._send(self.client, self.to_client)
        if self.to_upstream and self.upstream is not None and self.state != "connecting":
            self.to_upstream = self._send(self.upstream, self.to_upstream)
        self._pass_ends()
        if self.state == "done":
            return
        client_mask = IN if not self.client_eof and self._reading_client() else 0
        if self.to_client:
            client_mask |= OUT
        self.pump.watch(self.client, client_mask, self._on_client)
        if self.upstream is not None:
            up_mask = IN if not self.upstream_eof and self._reading_upstream() else 0
            if self.to_upstream or self.state == "connecting":
                up_mask |= OUT
            self.pump.watch(self.upstream, up_mask, self._on_upstream)

    @staticmethod
    def _recv(sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return None

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> bytes:
        """Write what the socket takes now; the rest."""
        try:
            return data[sock.send(data) :]
        except (BlockingIOError, InterruptedError):
            return data

    def cut(self) -> None:
        """The phase ended with the connection still open."""
        if len(self.ended) < 2:
            self.rec["reason"] = self.rec["reason"] or "cut at the end of the phase"
        self.finish()

    def finish(self) -> None:
        """Close both sides and write the record, once."""
        if self.state == "done":
            return
        self.state = "done"
        for sock in (self.client, self.upstream):
            if sock is not None:
                self.pump.forget(sock)
                sock.close()
        self.pump.connections.discard(self)
        if self.answers is not None and self.answers.statuses:
            self.rec["statuses"] = self.answers.statuses
        self.pump.record(self.rec)

"""The relay in front of tinyproxy: counts bytes per connection, checks the SNI of TLS tunnels, logs DNS.

Standard library only, so the same file runs in the harness (``Relay`` on a loop thread,
local executor) and as a script inside the Docker proxy container (``python3 relay.py``).
It is not a proxy: every connection is passed to tinyproxy unchanged, which decides.
The relay only reads what it must: the request line (to name the connection), tinyproxy's
answer to a CONNECT, and the first TLS record of a tunnel, whose ClientHello must name the
CONNECT target (else the tunnel is cut: ``sni mismatch``). A tunnel to port 443 that does not
start with a ClientHello is cut too. DNS questions sent to ``dns`` are logged and answered
REFUSED: names are resolved by the proxy, never inside the sandbox.

Each connection ends as one JSON record (request line, bytes each way, sni, reason).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Bytes of the request line read before giving up on naming the connection.
MAX_LINE = 8192
#: Bytes of a ClientHello waited for (it may span records).
MAX_HELLO = 65536
HELLO_TIMEOUT = 10.0
CHUNK = 65536
Record = dict[str, Any]


def stamp(t: float) -> str:
    """``t`` (seconds since the epoch) as egress.log writes times: UTC, milliseconds, ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _now() -> str:
    return stamp(time.time())


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


def _target(line: str) -> tuple[str, int] | None:
    """(host, port) of a CONNECT request line, else None."""
    parts = line.split()
    if len(parts) < 2 or parts[0].upper() != "CONNECT":
        return None
    host, _, port = parts[1].rpartition(":")
    return (host.strip("[]").lower(), int(port)) if host and port.isdigit() else None


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


def dns_refused(query: bytes) -> bytes:
    """A REFUSED answer to ``query`` (same id and question, no records)."""
    flags = 0x8000 | (struct.unpack(">H", query[2:4])[0] & 0x0100) | 5  # QR, RD copied, RCODE=REFUSED
    end = 12
    while end < len(query) and query[end]:
        end += 1 + query[end]
    question = query[12 : end + 5] if end + 5 <= len(query) else b""
    return query[:2] + struct.pack(">HHHHH", flags, 1 if question else 0, 0, 0, 0) + question


class _Dns(asyncio.DatagramProtocol):
    def __init__(self, record: Callable[[Record], None]) -> None:
        self.record = record
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        answer(data, self.record, lambda out: self.transport.sendto(out, addr) if self.transport else None)


def answer(data: bytes, record: Callable[[Record], None], send: Callable[[bytes], object]) -> None:
    """Log one DNS query and send REFUSED back."""
    q = dns_question(data)
    record({"time": _now(), "kind": "dns", "name": q[0] if q else None, "qtype": q[1] if q else None,
            "bytes_out": len(data), "bytes_in": 0})  # fmt: skip
    if q is not None:
        send(dns_refused(data))


# --- the relay --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Streams:
    """One relayed connection: the client's side, tinyproxy's side and its record."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    up_r: asyncio.StreamReader
    up_w: asyncio.StreamWriter
    rec: Record
    #: The directions that reached their end ("bytes_out", "bytes_in").
    ended: set[str] = field(default_factory=set)


class Relay:
    """Listens where the sandbox connects, passes each connection to tinyproxy, records it."""

    def __init__(self, upstream: tuple[str, int], record: Callable[[Record], None]) -> None:
        self.upstream = upstream
        self.record = record
        self._servers: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def listen_unix(self, path: str) -> None:
        server = await asyncio.start_unix_server(self._client, path)
        os.chmod(path, 0o666)
        self._servers.append(server)

    async def listen_tcp(self, host: str, port: int) -> None:
        self._servers.append(await asyncio.start_server(self._client, host, port, reuse_address=True))

    async def listen_dns(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Dns(self.record), local_addr=(host, port))
        self._servers.append(transport)
        self._servers.append(await asyncio.start_server(self._dns_tcp, host, port, reuse_address=True))

    async def listen_unix_dns(self, path: str) -> None:
        """DNS over a unix stream socket, one raw message per connection (what socat's UDP-RECVFROM sends)."""
        server = await asyncio.start_unix_server(self._dns_unix, path)
        os.chmod(path, 0o666)
        self._servers.append(server)

    async def close(self) -> None:
        """Stop listening and cut the connections still open (each is recorded)."""
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        self._servers.clear()

    async def _dns_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            size = struct.unpack(">H", await reader.readexactly(2))[0]
            data = await reader.readexactly(size)
            out: list[bytes] = []
            answer(data, self.record, out.append)
            if out:
                writer.write(struct.pack(">H", len(out[0])) + out[0])
                await writer.drain()
        writer.close()

    async def _dns_unix(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(reader.read(4096), HELLO_TIMEOUT)
            answer(data, self.record, writer.write)
            await writer.drain()
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        rec: Record = {"time": _now(), "kind": "proxy", "request": None, "bytes_out": 0, "bytes_in": 0,
                       "sni": None, "reason": None}  # fmt: skip
        up_w: asyncio.StreamWriter | None = None
        streams: _Streams | None = None
        try:
            head = await _read_line(reader, b"\n")
            if b"\n" in head:
                rec["request"] = head.split(b"\n", 1)[0].decode("latin-1").rstrip("\r")
            target = _target(rec["request"] or "")
            early = b""
            if target is not None:  # the whole CONNECT head, and nothing of the tunnel, goes to tinyproxy
                head = await _read_line(reader, b"\r\n\r\n", head)
                cut = head.find(b"\r\n\r\n")
                if cut >= 0:
                    head, early = head[: cut + 4], head[cut + 4 :]
            up_r, up_w = await asyncio.open_connection(*self.upstream)
            up_w.write(head)
            rec["bytes_out"] += len(head)
            streams = _Streams(reader, writer, up_r, up_w, rec)
            if target is not None:
                await self._tunnel(streams, target, early)
            else:
                await _pipe_both(streams)
        except (OSError, asyncio.IncompleteReadError):
            pass  # a side hung up
        except asyncio.CancelledError:
            if streams is None or len(streams.ended) < 2:  # not a connection that had just ended
                rec["reason"] = rec["reason"] or "cut at the end of the phase"
        except Exception as exc:  # never lose the record, whatever the client sent
            rec["reason"] = rec["reason"] or f"relay: {type(exc).__name__}"
        finally:
            for w in (writer, up_w):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()
            self._tasks.discard(task)
            self.record(rec)

    async def _tunnel(self, c: _Streams, target: tuple[str, int], hello: bytes) -> None:
        """Pass tinyproxy's answer; when it opened the tunnel, check the ClientHello before relaying it."""
        await c.up_w.drain()
        reply = await c.up_r.readuntil(b"\r\n\r\n")
        c.writer.write(reply)
        c.rec["bytes_in"] += len(reply)
        if b" 200 " not in reply.split(b"\r\n", 1)[0] + b" " or target[1] != 443:
            # refused (tinyproxy says so and closes), or a port whose server may speak first: relay as is
            c.up_w.write(hello)
            c.rec["bytes_out"] += len(hello)
            await _pipe_both(c)
            return
        while True:
            try:
                sni = client_hello_sni(hello)
            except NeedMore:
                chunk = await asyncio.wait_for(c.reader.read(CHUNK), HELLO_TIMEOUT)
                if not chunk:
                    return
                hello += chunk
                continue
            except ValueError:
                c.rec["reason"] = "not a TLS ClientHello"
                return
            c.rec["sni"] = sni
            if sni is not None and sni.lower().rstrip(".") != target[0]:
                c.rec["reason"] = "sni mismatch"
                return
            break
        c.up_w.write(hello)
        c.rec["bytes_out"] += len(hello)
        await _pipe_both(c)


async def _read_line(reader: asyncio.StreamReader, end: bytes, data: bytes = b"") -> bytes:
    """Bytes until ``end`` has been read (or what came before EOF / the cap); more may follow it."""
    while end not in data and len(data) < MAX_LINE:
        chunk = await reader.read(MAX_LINE - len(data))
        if not chunk:
            break
        data += chunk
    return data


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, c: _Streams, key: str) -> None:
    try:
        while chunk := await src.read(CHUNK):
            dst.write(chunk)
            c.rec[key] += len(chunk)
            await dst.drain()
        c.ended.add(key)
    finally:
        with contextlib.suppress(Exception):
            if dst.can_write_eof():
                dst.write_eof()


async def _pipe_both(c: _Streams) -> None:
    await c.up_w.drain()
    results = await asyncio.gather(
        _pipe(c.reader, c.up_w, c, "bytes_out"), _pipe(c.up_r, c.writer, c, "bytes_in"), return_exceptions=True
    )
    for r in results:
        if isinstance(r, asyncio.CancelledError):
            raise r


# --- in the harness: one loop thread per process ----------------------------------------
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """The process's relay loop (a daemon thread, started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None or not _loop.is_running():
            new = asyncio.new_event_loop()
            ready = threading.Event()
            new.call_soon(ready.set)
            threading.Thread(target=new.run_forever, name="maka-egress-relay", daemon=True).start()
            ready.wait()
            _loop = new
        return _loop


def run(coro: Any, timeout: float = 10.0) -> Any:
    """Run ``coro`` on the relay loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, loop()).result(timeout)


# --- in the proxy container: a script ---------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the egress relay in front of tinyproxy")
    parser.add_argument("--listen", required=True, help="HOST:PORT the sandbox connects to")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of tinyproxy")
    parser.add_argument("--dns", help="HOST:PORT to answer DNS on (REFUSED, logged)")
    parser.add_argument("--log", required=True, help="JSON lines, one per connection")
    parser.add_argument("--ready", help="a file created once every socket listens")
    args = parser.parse_args(argv)

    def split(text: str) -> tuple[str, int]:
        host, _, port = text.rpartition(":")
        return host, int(port)

    log = open(args.log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def record(rec: Record) -> None:
        log.write(json.dumps(rec, separators=(",", ":")) + "\n")

    async def serve() -> None:
        relay = Relay(split(args.upstream), record)
        await relay.listen_tcp(*split(args.listen))
        if args.dns:
            await relay.listen_dns(*split(args.dns))
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if args.ready:
            open(args.ready, "w").close()
        await stop.wait()
        await relay.close()

    asyncio.run(serve())
    log.close()
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main())

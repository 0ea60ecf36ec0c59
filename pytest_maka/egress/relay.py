"""The relay in front of tinyproxy: counts bytes per connection, checks the SNI of TLS tunnels, logs DNS.

Standard library only (and ``wire``, for what it parses, and ``pump`` and ``connection``, whose
thread serves the connections), so the same file runs in the harness (local executor; DNS on a loop thread) and as
a script inside the Docker proxy container (``python3 relay.py``, with ``wire.py``, ``pump.py``
and ``connection.py`` beside it).
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
from collections.abc import Callable
from typing import Any

try:
    from . import connection, pump
    from .wire import NeedMore, Record, answer, client_hello_sni
except ImportError:  # a script in the proxy container, with wire.py, pump.py and connection.py beside it
    import connection  # type: ignore[no-redef]
    import pump  # type: ignore[no-redef]
    from wire import NeedMore, Record, answer, client_hello_sni  # type: ignore[no-redef]

__all__ = ["NeedMore", "Relay", "client_hello_sni", "loop", "main", "run"]


class _Dns(asyncio.DatagramProtocol):
    def __init__(self, record: Callable[[Record], None]) -> None:
        self.record = record
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        answer(data, self.record, lambda out: self.transport.sendto(out, addr) if self.transport else None)


# --- the relay --------------------------------------------------------------------------
class Relay:
    """Listens where the sandbox connects, passes each connection to tinyproxy, records it.

    The connections are served by a ``pump.Pump`` (its own thread); DNS on the relay loop.
    """

    def __init__(self, upstream: tuple[str, int], record: Callable[[Record], None]) -> None:
        self.upstream = upstream
        self.record = record
        self._servers: list[Any] = []
        self._pump = pump.Pump(upstream, record)

    async def listen_unix(self, path: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o666)
            sock.listen(256)
        except OSError:
            sock.close()
            raise
        self._pump.listen(sock)

    async def listen_tcp(self, host: str, port: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(256)
        except OSError:
            sock.close()
            raise
        self._pump.listen(sock)

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
        self._servers.clear()
        await asyncio.get_running_loop().run_in_executor(None, self._pump.stop)

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
            data = await asyncio.wait_for(reader.read(4096), connection.HELLO_TIMEOUT)
            answer(data, self.record, writer.write)
            await writer.drain()
        writer.close()


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

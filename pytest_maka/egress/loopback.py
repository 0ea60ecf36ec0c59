"""Allowlisted loopback endpoints, tunnelled one by one into a sandbox that has no network.

An allowlist entry naming the host's loopback (``127.0.0.1:8080``, ``localhost:8080``)
means one service on the harness host, typically a model stand-in. Sending all of the
sandbox's loopback through the proxy for its sake would refuse the sandbox's own local
services (an agent's own server on ``127.0.0.1:4096``). Instead the forwarder inside the
sandbox listens on each listed endpoint's address and port, and passes each connection to a
unix socket of its own; here, on the relay's loop, each such connection is spliced to the
host's endpoint and logged (``TUNNEL``, allowed, bytes both ways, and the statuses of the HTTP
answers that came back, as for a plain-HTTP tunnel through the proxy). Every other loopback port
in the sandbox stays the sandbox's own, and ``NO_PROXY`` keeps loopback off the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import time
from dataclasses import dataclass

from ..core.hostpattern import HostPattern
from .log import EgressEvent
from .wire import HttpAnswers, stamp

#: Names of the loopback that an allowlist entry may use.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
METHOD = "TUNNEL"
#: The reason of a tunnelled connection the host endpoint refused.
REFUSED = "the host endpoint refused the connection"
CHUNK = 65536


@dataclass(frozen=True)
class Endpoint:
    """One loopback address and port listened on in the sandbox; on the host, ``targets`` (default:
    the same address) are tried in order with that port."""

    address: str
    port: int
    targets: tuple[str, ...] = ()

    def hosts(self) -> tuple[str, ...]:
        """The host addresses a connection is passed to, first one that answers."""
        return self.targets or (self.address,)

    @property
    def text(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


def socket_name(index: int) -> str:
    """The unix socket of a phase's ``index``-th tunnel (short: a socket path has at most 107 bytes)."""
    return f"t{index}.sock"


def is_loopback(pattern: HostPattern) -> bool:
    """True when ``pattern`` names the host's loopback (a loopback name or a loopback literal)."""
    if pattern.wildcard:
        return False
    if pattern.host in LOOPBACK_NAMES:
        return True
    try:
        return pattern.is_ip and ipaddress.ip_address(pattern.host).is_loopback
    except ValueError:
        return False


def endpoints(patterns: tuple[HostPattern, ...]) -> tuple[Endpoint, ...]:
    """The loopback endpoints ``patterns`` allow, one per address and port, in order.

    ``localhost`` is listened on at 127.0.0.1 and ::1 (a client may try either first), and
    either one is passed to the host's 127.0.0.1, else its ::1: a server on only one of them
    answers both, and a client never meets an accepted connection that then closes empty
    (which, unlike a refusal, it would not retry on the other address).
    """
    out: dict[tuple[str, int], Endpoint] = {}
    for p in patterns:
        if not is_loopback(p):
            continue
        for port in p.ports:
            if p.host == "localhost":
                for address in ("127.0.0.1", "::1"):
                    out[(address, port)] = Endpoint(address, port, ("127.0.0.1", "::1"))
            else:
                address = str(ipaddress.ip_address(p.host))
                out.setdefault((address, port), Endpoint(address, port))
    return tuple(out.values())


def forwarder_flags(tunnels: tuple[Endpoint, ...], directory: str) -> str:
    """The forwarder's ``--tunnel ADDRESS:PORT=SOCKET`` flags for ``tunnels`` (sockets in ``directory``)."""
    return "".join(f" --tunnel {e.text}={directory}/{socket_name(i)}" for i, e in enumerate(tunnels))


class Tunnels:
    """The host side: a unix socket per endpoint, each connection spliced to the endpoint and logged.

    Runs on the relay's loop (``relay.run``); ``events`` is read after ``close``.
    """

    def __init__(self, tunnels: tuple[Endpoint, ...], directory: str, phase: str) -> None:
        self.tunnels = tunnels
        self.directory = directory
        self.phase = phase
        self.events: list[EgressEvent] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._open: set[asyncio.Task[None]] = set()

    def paths(self) -> list[str]:
        return [os.path.join(self.directory, socket_name(i)) for i in range(len(self.tunnels))]

    async def start(self) -> None:
        for endpoint, path in zip(self.tunnels, self.paths(), strict=True):
            server = await asyncio.start_unix_server(lambda r, w, e=endpoint: self._serve(e, r, w), path)
            os.chmod(path, 0o666)
            self._servers.append(server)

    async def close(self) -> None:
        """Stop listening and cut the connections still open (each is logged)."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for task in list(self._open):
            task.cancel()
        if self._open:
            await asyncio.wait(list(self._open), timeout=2)
        for path in self.paths():
            with contextlib.suppress(OSError):
                os.unlink(path)

    async def _serve(self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        first = time.time()
        counts = [0, 0]
        answers = HttpAnswers()
        reason: str | None = None
        try:
            upstream = await _connect(endpoint)
            if upstream is None:
                reason = REFUSED
                return
            up_r, up_w = upstream
            try:
                await asyncio.gather(_pipe(reader, up_w, counts, 0), _pipe(up_r, writer, counts, 1, answers))
            finally:
                up_w.close()
        except asyncio.CancelledError:
            reason = "cut at the end of the phase"
        finally:
            writer.close()
            self._open.discard(task)
            self.events.append(
                EgressEvent(
                    time=stamp(first),
                    phase=self.phase,
                    method=METHOD,
                    destination=endpoint.text,
                    allowed=True,
                    bytes=counts[0] + counts[1],
                    reason=reason,
                    bytes_out=counts[0],
                    bytes_in=counts[1],
                    statuses=answers.statuses or None,
                )
            )


async def _connect(endpoint: Endpoint) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the first of the endpoint's host addresses that accepts one."""
    for host in endpoint.hosts():
        try:
            return await asyncio.open_connection(host, endpoint.port)
        except OSError:
            continue
    return None


async def _pipe(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, counts: list[int], i: int, answers: HttpAnswers | None = None
) -> None:
    """Copy ``src`` to ``dst`` until end of file, then shut ``dst``'s writing side; count in ``counts[i]``
    (and read the HTTP answers' statuses into ``answers``)."""
    with contextlib.suppress(OSError):
        while data := await src.read(CHUNK):
            counts[i] += len(data)
            if answers is not None:
                answers.feed(data)
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()

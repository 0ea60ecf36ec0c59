"""The forwarder inside the sandbox: its loopback's proxy port (and DNS) to the relay's unix sockets.

Run by the host's interpreter inside the sandbox (``/usr/bin/python3 -I -S forwarder.py``),
so it imports nothing of the package, and of the standard library only built-in modules
(``_socket``, ``select``, ``posix``: no module file is read, which keeps its start near the
interpreter's own). One process serves every connection of the command it starts (an epoll
loop, no fork or thread per connection). It binds its sockets and forks the server off: the
server is adopted by the sandbox's pid 1, so it is no child of the command and dies with the
sandbox's pid namespace. The process the wrapper started exits once the sockets listen, and
only then does the wrapper ``exec`` the command (whose environment and signal dispositions
the interpreter never touches). Each TCP connection is spliced to a new connection on the
relay's socket; each DNS datagram goes to the DNS socket as one message per connection (the
relay logs it and answers REFUSED), its answer back to the sender. Each ``--tunnel`` adds a
listener on an allowlisted loopback endpoint whose connections go to a unix socket of their
own (``egress.loopback``); an IPv6 one is skipped where the sandbox has no ::1.

    forwarder.py [--detach] [--listen H:P] [--unix PATH] [--dns H:P] [--dns-unix PATH] [--tunnel H:P=PATH ...]

Without ``--detach`` it serves in the foreground (the bench's hop timings).
"""

from __future__ import annotations

import _socket
import posix
import select
import sys
import time

TYPE_CHECKING = False  # not typing's: no module file is read at run time
if TYPE_CHECKING:
    from collections.abc import Callable

CHUNK = 65536
#: Seconds a DNS question waits for the relay's answer (socat's ``-T5`` before).
DNS_TIMEOUT = 5.0
#: Exit status when the forwarder cannot listen: the command never starts without it.
FAILED = 125
HERE = __file__.rpartition("/")[0] or "."
IN, OUT, ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR
Socket = _socket.socket


class Loop:
    """An epoll loop: one handler per descriptor, called with the events that came."""

    def __init__(self) -> None:
        self.poll = select.epoll()
        self.handlers: dict[int, Callable[[int], None]] = {}
        self.masks: dict[int, int] = {}

    def watch(self, sock: Socket, mask: int, handler: Callable[[int], None]) -> None:
        """Wait for ``mask`` on ``sock`` (0: for nothing)."""
        fd = sock.fileno()
        old = self.masks.get(fd)
        if old == mask:
            return
        if not mask:
            self.forget(sock)
        elif old is None:
            self.poll.register(fd, mask)
        else:
            self.poll.modify(fd, mask)
        if mask:
            self.masks[fd], self.handlers[fd] = mask, handler

    def forget(self, sock: Socket) -> None:
        fd = sock.fileno()
        if self.masks.pop(fd, None) is not None:
            self.poll.unregister(fd)
            del self.handlers[fd]

    def once(self, timeout: float) -> None:
        for fd, events in self.poll.poll(timeout):
            handler = self.handlers.get(fd)
            if handler is not None:
                handler(events)


class _Pair:
    """One client connection and its connection to the relay, spliced both ways."""

    def __init__(self, loop: Loop, client: Socket, relay: Socket) -> None:
        self.loop = loop
        self.peer = {client: relay, relay: client}
        #: Bytes read from a socket and not yet written to its peer.
        self.pending: dict[Socket, bytes] = {client: b"", relay: b""}
        #: Sockets that reached end of file.
        self.eof: set[Socket] = set()
        #: Sockets whose writing side is shut (their peer ended and all was written).
        self.shut: set[Socket] = set()
        self.closed = False
        for s in (client, relay):
            s.setblocking(False)
            loop.watch(s, IN, self._handler(s))

    def _handler(self, s: Socket) -> Callable[[int], None]:
        return lambda events: self.ready(s, events)

    def ready(self, s: Socket, events: int) -> None:
        if events & ERR:  # reset or refused: what is pending cannot arrive any more
            self.close()
            return
        try:
            if events & OUT:
                self._flush(self.peer[s])
            if events & ~OUT and not self.pending[s] and s not in self.eof:
                try:
                    data = s.recv(CHUNK)
                except BlockingIOError:
                    return
                if data:
                    self.pending[s] = data
                else:
                    self.eof.add(s)
                self._flush(s)
        except OSError:
            self.close()
            return
        if len(self.shut) == 2:
            self.close()
        else:
            for sock in self.peer:
                self._watch(sock)

    def _flush(self, src: Socket) -> None:
        """Write what ``src`` sent to its peer, as much as it takes now; shut the peer after ``src``'s EOF."""
        dst = self.peer[src]
        if self.pending[src]:
            try:
                sent = dst.send(self.pending[src])
            except BlockingIOError:
                sent = 0
            self.pending[src] = self.pending[src][sent:]
        if src in self.eof and not self.pending[src] and dst not in self.shut:
            self.shut.add(dst)
            dst.shutdown(_socket.SHUT_WR)

    def _watch(self, s: Socket) -> None:
        """Read ``s`` while what it sent is written; write to it while its peer's bytes are pending."""
        mask = IN if s not in self.eof and not self.pending[s] else 0
        if self.pending[self.peer[s]]:
            mask |= OUT
        self.loop.watch(s, mask, self._handler(s))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for s in self.peer:
                self.loop.forget(s)
                s.close()


class Forwarder:
    """The listening sockets and what they serve."""

    def __init__(
        self,
        listen: tuple[str, int],
        unix: str,
        dns: tuple[str, int] | None,
        dns_unix: str,
        tunnels: list[tuple[tuple[str, int], str]] | None = None,
    ) -> None:
        self.dns_unix = dns_unix
        #: Listening TCP sockets and the unix socket each one's connections go to.
        self.listeners: list[tuple[Socket, str]] = [(_listener(listen), unix)]
        for address, path in tunnels or []:
            try:
                self.listeners.append((_listener(address), path))
            except OSError as exc:  # no ::1 in this sandbox: nothing can connect there either
                if ":" not in address[0] or exc.errno not in (97, 99):  # EAFNOSUPPORT, EADDRNOTAVAIL
                    raise
        self.udp: Socket | None = None
        if dns is not None:
            self.udp = Socket(_socket.AF_INET, _socket.SOCK_DGRAM)
            self.udp.bind(dns)
        #: DNS questions waiting for the relay: its socket -> (sender, answer so far, deadline).
        self._dns: dict[Socket, tuple[object, bytes, float]] = {}
        #: Made in ``serve`` (after the fork that detaches the server).
        self.loop: Loop

    def fds(self) -> set[int]:
        """The descriptors the forwarder serves on."""
        return {s.fileno() for s, _ in self.listeners} | ({self.udp.fileno()} if self.udp is not None else set())

    def serve(self) -> None:
        self.loop = Loop()
        for sock, path in self.listeners:
            sock.setblocking(False)
            self.loop.watch(sock, IN, self._acceptor(sock, path))
        if self.udp is not None:
            self.udp.setblocking(False)
            self.loop.watch(self.udp, IN, self._question)
        while True:
            self.loop.once(1.0 if self._dns else -1)
            if self._dns:
                self._expire()

    def _acceptor(self, sock: Socket, path: str) -> Callable[[int], None]:
        return lambda _events: self._accept(sock, path)

    def _accept(self, sock: Socket, path: str) -> None:
        try:
            fd, _ = sock._accept()
        except OSError:
            return
        client = Socket(sock.family, _socket.SOCK_STREAM, 0, fd)
        client.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        relay = Socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            relay.connect(path)
        except OSError:  # the relay is gone (the phase ended): the client sees the connection close
            relay.close()
            client.close()
            return
        _Pair(self.loop, client, relay)

    def _question(self, _events: int) -> None:
        assert self.udp is not None
        try:
            data, sender = self.udp.recvfrom(4096)
        except OSError:
            return
        relay = Socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            relay.connect(self.dns_unix)
            relay.sendall(data)
        except OSError:
            relay.close()
            return
        relay.setblocking(False)
        self._dns[relay] = (sender, b"", time.monotonic() + DNS_TIMEOUT)
        self.loop.watch(relay, IN, lambda _events: self._answer(relay))

    def _answer(self, relay: Socket) -> None:
        sender, got, deadline = self._dns[relay]
        try:
            chunk = relay.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._dns[relay] = (sender, got + chunk, deadline)
            return
        self._end_dns(relay)
        if got and self.udp is not None:
            try:  # noqa: SIM105 - no contextlib here: built-in modules only
                self.udp.sendto(got, sender)  # type: ignore[arg-type]
            except OSError:
                pass

    def _expire(self) -> None:
        now = time.monotonic()
        for relay in [r for r, (_, _, deadline) in self._dns.items() if deadline < now]:
            self._end_dns(relay)

    def _end_dns(self, relay: Socket) -> None:
        del self._dns[relay]
        self.loop.forget(relay)
        relay.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _listener(address: tuple[str, int]) -> Socket:
    """A listening TCP socket on ``address`` (IPv6 when the host part has a colon)."""
    sock = Socket(_socket.AF_INET6 if ":" in address[0] else _socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(256)
    except OSError:
        sock.close()
        raise
    return sock


def _tunnel(text: str) -> tuple[tuple[str, int], str]:
    """``H:P=PATH`` as the address to listen on and the unix socket to pass connections to."""
    address, _, path = text.partition("=")
    if not path:
        raise ValueError(f"--tunnel wants ADDRESS:PORT=SOCKET, got {text!r}")
    return _address(address), path


def main(argv: list[str]) -> int:
    """Listen as ``argv`` says; then serve in the foreground, or (``--detach``) from a process of its own.

    Detached, the process exits once the forwarder listens (0), or at once when it cannot (125):
    the command started after it finds the proxy port listening.
    """
    detach = "--detach" in argv
    opts = [a for a in argv if a != "--detach"]
    pairs = [(opts[i], opts[i + 1]) for i in range(0, len(opts) - 1, 2)]
    args = {k: v for k, v in pairs if k != "--tunnel"}
    try:
        fwd = Forwarder(
            _address(args.get("--listen", "127.0.0.1:3128")),
            args.get("--unix", f"{HERE}/proxy.sock"),
            _address(args["--dns"]) if "--dns" in args else None,
            args.get("--dns-unix", f"{HERE}/dns.sock"),
            [_tunnel(v) for k, v in pairs if k == "--tunnel"],
        )
        if detach and posix.fork() > 0:
            return 0
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"maka: the egress forwarder did not start: {exc}\n")
        return FAILED
    if detach:  # the child: adopted by the sandbox's pid 1, out of the command's session and files
        posix.setsid()
        _keep_only(fwd.fds())
    fwd.serve()
    return 0


def _keep_only(fds: set[int]) -> None:
    """/dev/null as stdin, stdout and stderr; every other descriptor not in ``fds`` closed."""
    null = posix.open("/dev/null", posix.O_RDWR)
    for fd in (0, 1, 2):
        posix.dup2(null, fd)
    fds = fds | {0, 1, 2}
    for name in posix.listdir("/proc/self/fd"):
        if int(name) not in fds:
            try:  # noqa: SIM105 - (no contextlib) the listing's own descriptor is closed already
                posix.close(int(name))
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

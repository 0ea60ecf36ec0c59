"""The egress proxy on the harness host, for sandboxes that have no network of their own.

Per phase that needs it: Debian's tinyproxy listens on a free port of the host's loopback
(under ``bwrap --die-with-parent`` with a private ``/etc/hosts``, so names the executor maps
resolve as mapped and a dead harness takes it along), and the harness's relay
(``egress.relay``, on a loop thread: bytes, SNI) listens on a unix socket in front of it.
The socket's directory is bound into the sandbox, whose network stays unshared; a
forwarder started inside each command (``wrapper()``: ``egress.forwarder``, copied into that
directory and run by the host's python, else socat) listens on the sandbox's loopback, so
processes there see an ordinary ``http://127.0.0.1:3128`` proxy.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from ..core.hostpattern import HostPattern
from ..core.hostreqs import Need, missing_line
from . import forwarder, loopback, relay, tinyproxy
from .join import joined
from .log import EgressEvent
from .loopback import Endpoint

#: Where the socket directory appears inside the sandbox.
SANDBOX_DIR = "/run/maka-egress"
SOCKET_NAME = "proxy.sock"
TINYPROXY = "tinyproxy"
#: The user tinyproxy runs as when the harness is root.
UNPRIVILEGED = "nobody"
#: What a proxy says that cannot start for want of a host component (the session checks them first).
MISSING = missing_line([Need("tinyproxy", "the egress proxy"), Need("forwarder", "the egress proxy")])
DNS_SOCKET = "dns.sock"
FORWARDER_NAME = "forwarder.py"
#: The interpreter that runs the forwarder inside the sandbox (the host's, bound in with /usr).
PYTHON = "/usr/bin/python3"


def _socat(command: str, table: str, entry: str, what: str) -> str:
    """The fallback: socat in the background, and a wait until ``entry`` (a listening socket) is in ``table``."""
    return (
        f"  {command} </dev/null >/dev/null 2>&1 &\n"
        f"  i=0; until grep -q '{entry}' /proc/net/{table} 2>/dev/null; do i=$((i+1))\n"
        "    kill -0 $! 2>/dev/null && [ $i -le 20000 ] ||"
        f" {{ echo 'maka: the egress {what} did not start' >&2; exit 125; }}\n"
        "  done\n"
    )


#: 0C38 = port 3128 in /proc/net/tcp (0A: listening), 0035 = 53 in /proc/net/udp (07: bound).
_SOCAT_TCP = _socat(
    f"socat TCP-LISTEN:{tinyproxy.PROXY_PORT},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{SANDBOX_DIR}/{SOCKET_NAME}",
    "tcp", "0100007F:0C38 00000000:0000 0A", "forwarder",
)  # fmt: skip
_SOCAT_DNS = _socat(
    f"socat -T5 UDP4-RECVFROM:53,bind=127.0.0.1,fork UNIX-CONNECT:{SANDBOX_DIR}/{DNS_SOCKET}",
    "udp", "0100007F:0035 00000000:0000 07", "DNS forwarder",
)  # fmt: skip


def _socat_tunnel(index: int, endpoint: Endpoint) -> str:
    """socat on an IPv4 loopback endpoint, to its tunnel socket (the fallback skips IPv6 ones)."""
    if ":" in endpoint.address:
        return ""
    entry = "".join(f"{int(b):02X}" for b in reversed(endpoint.address.split("."))) + f":{endpoint.port:04X}"
    return _socat(
        f"socat TCP-LISTEN:{endpoint.port},bind={endpoint.address},fork,reuseaddr"
        f" UNIX-CONNECT:{SANDBOX_DIR}/{loopback.socket_name(index)}",
        "tcp", f"{entry} 00000000:0000 0A", "loopback tunnel",
    )  # fmt: skip


def wrapper(dns: bool, tunnels: tuple[Endpoint, ...] = ()) -> str:
    """The shell script started in front of every command of an allowlist phase (the command is "$1").

    It starts the forwarder on the sandbox's loopback (with ``dns``, also on its 127.0.0.1:53,
    passing each question to the relay, which logs it; with ``tunnels``, also on each
    allowlisted loopback endpoint), then the command. The forwarder
    (``egress.forwarder``, one process for every connection of the command) is run by the
    host's python and returns once it listens. Where that interpreter is missing or fails,
    socat takes its place (one fork per connection, and a wait until it listens).
    """
    flags = (" --dns 127.0.0.1:53" if dns else "") + loopback.forwarder_flags(tunnels, SANDBOX_DIR)
    return (
        f"if ! {{ [ -x {PYTHON} ] && {PYTHON} -I -S {SANDBOX_DIR}/{FORWARDER_NAME} --detach{flags}; }}; then\n"
        + (_SOCAT_DNS if dns else "")
        + _SOCAT_TCP
        + "".join(_socat_tunnel(i, e) for i, e in enumerate(tunnels))
        + "fi\n"
        'exec /bin/sh -c "$1"\n'
    )


#: The sandbox's resolv.conf while its DNS goes to the relay.
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n"


class EgressUnavailable(Exception):
    """The egress proxy could not be started: the phase must not run (never an open network)."""


#: Where the relay's socket directories are made, whatever TMPDIR is: a unix socket path has at
#: most 107 bytes, and a user's TMPDIR can be long (the fallback, where this one is not writable).
SOCKET_ROOT = "/tmp"
SOCKET_PREFIX = "maka-egress-"
#: The longest path a unix socket can have (sun_path is 108 bytes with its terminating NUL).
MAX_SOCKET_PATH = 107
#: Loopback tunnels a phase may have (an allowlist entry is one, ``localhost`` two).
MAX_TUNNELS = 1000


def socket_dir(directory: Path) -> Path:
    """A new private directory for one phase's sockets, with a path short enough for them.

    Its name says whose it is (this process's id and the last parts of the attempt's
    directory, cut to fit); directories of processes that are gone are removed first.
    """
    root = SOCKET_ROOT if os.access(SOCKET_ROOT, os.W_OK | os.X_OK) else tempfile.gettempdir()
    _sweep(root)
    longest = max(len(SOCKET_NAME), len(DNS_SOCKET), len(FORWARDER_NAME), len(loopback.socket_name(MAX_TUNNELS - 1)))
    head = f"{SOCKET_PREFIX}{os.getpid()}-"
    room = MAX_SOCKET_PATH - len(os.path.join(root, head)) - len("-12345678/") - longest
    if room < 0:
        raise EgressUnavailable(f"{root}: too long a directory for the relay's unix sockets ({MAX_SOCKET_PATH} bytes)")
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(directory.parts[-4:]))[-min(room, 60) :] if room else ""
    return Path(tempfile.mkdtemp(prefix=f"{head}{tag}-", dir=root))


@functools.cache
def _sweep(root: str) -> None:
    """Remove the socket directories of processes that are gone (once per process and root)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            pid = entry.name[len(SOCKET_PREFIX) :].split("-", 1)[0]
            if not (entry.name.startswith(SOCKET_PREFIX) and pid.isdigit() and entry.is_dir(follow_symlinks=False)):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                    continue
                os.kill(int(pid), 0)
            except ProcessLookupError:
                if not _answers(os.path.join(entry.path, SOCKET_NAME)):  # a relay in another pid namespace
                    shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def proxy_env(url: str, loopback_names: tuple[str, ...]) -> dict[str, str]:
    """HTTP(S)_PROXY for ``url``; NO_PROXY keeps the sandbox's own loopback direct (a listed loopback
    endpoint is tunnelled in on its own where the executor can: ``egress.loopback``)."""
    env = {k: url for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = ",".join(loopback_names)
    return env


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HostProxy:
    """tinyproxy plus the relay in front of it on the host, for one phase of one attempt."""

    def __init__(
        self,
        directory: Path,
        patterns: tuple[HostPattern, ...],
        hosts: Mapping[str, str],
        phase: str,
        *,
        dns: bool = False,
        tunnels: tuple[Endpoint, ...] = (),
    ):
        self.dir = directory
        #: Also take the sandbox's DNS questions (to log and refuse them) on ``dns.sock``.
        self.dns = dns
        self.patterns = patterns
        self.hosts = dict(hosts)
        self.phase = phase
        self._procs: list[subprocess.Popen[bytes]] = []
        self._log = directory / "tinyproxy.log"
        self._records: list[dict[str, object]] = []
        #: tinyproxy's port on the host's loopback, once started.
        self.port: int | None = None
        self._copiers: list[threading.Thread] = []
        self._relay: relay.Relay | None = None
        self._socket_dir = socket_dir(directory)
        #: The allowlisted loopback endpoints' tunnels (``egress.loopback``).
        self._tunnels = loopback.Tunnels(tunnels, str(self._socket_dir), phase)

    @property
    def socket_path(self) -> Path:
        return self._socket_dir / SOCKET_NAME

    def start(self) -> None:
        """Start tinyproxy and the relay; EgressUnavailable with the reason when either fails."""
        if shutil.which(TINYPROXY) is None or (shutil.which("socat") is None and not os.access(PYTHON, os.X_OK)):
            raise EgressUnavailable(MISSING)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self._socket_dir / FORWARDER_NAME).write_bytes(_forwarder_source())
        (self.dir / "filter").write_text("\n".join(tinyproxy.filter_lines(self.patterns)) + "\n")
        (self.dir / "hosts").write_text(self._hosts_file())
        for _ in range(5):  # a free port can be taken between choosing and binding it
            port = self.port = _free_port()
            self._write_config(port)
            proc = self._spawn(self._proxy_argv())
            if self._wait(functools.partial(_listening, port), proc):
                break
            self._stop(proc)
        else:
            self.stop()
            raise EgressUnavailable(f"tinyproxy did not start: {self._log_tail()}")
        self._relay = relay.Relay(("127.0.0.1", port), self._records.append)
        try:
            relay.run(self._relay.listen_unix(str(self.socket_path)))
            if self.dns:
                (self._socket_dir / "resolv.conf").write_text(RESOLV_CONF)
                relay.run(self._relay.listen_unix_dns(str(self._socket_dir / DNS_SOCKET)))
            relay.run(self._tunnels.start())
        except (OSError, TimeoutError) as exc:
            self.stop()
            raise EgressUnavailable(f"the relay in front of the egress proxy did not start: {exc}") from None

    def _proxy_argv(self) -> list[str]:
        """tinyproxy in the foreground, in a pid namespace of its own with a private /etc/hosts.

        The pid namespace is what stops it with the harness: tinyproxy changes its user,
        which clears a parent-death signal, but it cannot outlive the namespace's init.
        """
        hosts = str(self.dir / "hosts")
        return [
            "bwrap", "--die-with-parent", "--unshare-pid", "--dev-bind", "/", "/", "--ro-bind", hosts, "/etc/hosts",
            TINYPROXY, "-d", "-c", str(self.dir / "tinyproxy.conf"),
        ]  # fmt: skip

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{ip} {name}" for name, ip in self.hosts.items()]
        return "\n".join(lines) + "\n"

    def _write_config(self, port: int) -> None:
        """Logs go to stdout (captured in the log file); as root, tinyproxy drops to ``nobody``."""
        conf = tinyproxy.render_config(
            listen="127.0.0.1",
            port=port,
            filter_path=str(self.dir / "filter"),
            log_path=None,
            user=UNPRIVILEGED if os.geteuid() == 0 else None,
        )
        (self.dir / "tinyproxy.conf").write_text(conf)

    def _spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start tinyproxy; a thread copies its output to the log file.

        Through a pipe, not a file: tinyproxy calls fsync after every log line, which on a
        disk costs milliseconds per request (on a pipe it returns at once).
        """
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # the harness may be killed: the proxy must go too
        )
        assert proc.stdout is not None
        copier = threading.Thread(target=_copy, args=(proc.stdout, self._log), name="maka-egress-log", daemon=True)
        copier.start()
        self._procs.append(proc)
        self._copiers.append(copier)
        return proc

    def _wait(self, ready: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.001)
        return False

    def _log_tail(self) -> str:
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        lines = [line for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith(("ERROR", "CRITICAL"))]
        return (errors or lines or ["no log written"])[-1]

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> list[EgressEvent]:
        """Stop the relay and tinyproxy and return what they saw in this phase."""
        if self._relay is not None:
            with contextlib.suppress(Exception):
                relay.run(self._relay.close())
            self._relay = None
        with contextlib.suppress(Exception):
            relay.run(self._tunnels.close())
        for proc in reversed(self._procs):
            self._stop(proc)
        self._procs.clear()
        for copier in self._copiers:
            copier.join(5)
        self._copiers.clear()
        for name in (SOCKET_NAME, DNS_SOCKET, "resolv.conf", FORWARDER_NAME):
            with contextlib.suppress(OSError):
                (self._socket_dir / name).unlink()
        with contextlib.suppress(OSError):
            self._socket_dir.rmdir()
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        events = joined(tinyproxy.parse_requests(text, self.phase, self.patterns), list(self._records), self.phase)
        if self._tunnels.events:
            events = sorted(events + self._tunnels.events, key=lambda e: e.time)
        return events


@functools.cache
def _forwarder_source() -> bytes:
    return Path(forwarder.__file__).read_bytes()


def _copy(pipe: IO[bytes], path: Path) -> None:
    with pipe, path.open("ab") as out:
        while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
            out.write(chunk)
            out.flush()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True

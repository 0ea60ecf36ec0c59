"""The egress proxy on the harness host, for sandboxes that have no network of their own.

Per phase that needs it: Debian's tinyproxy listens on a free port of the host's loopback
(under ``bwrap --die-with-parent`` with a private ``/etc/hosts``, so names the executor maps
resolve as mapped and a dead harness takes it along), and socat bridges a unix socket to
it. The socket's directory is bound into the sandbox, whose network stays unshared; a
forwarder started inside each command (``FORWARDER``) listens on the sandbox's loopback,
so processes there see an ordinary ``http://127.0.0.1:3128`` proxy.
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
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..core.hostpattern import HostPattern
from . import tinyproxy
from .log import EgressEvent

#: Where the socket directory appears inside the sandbox.
SANDBOX_DIR = "/run/maka-egress"
SOCKET_NAME = "proxy.sock"
TINYPROXY = "tinyproxy"
#: The user tinyproxy runs as when the harness is root.
UNPRIVILEGED = "nobody"
MISSING = "the egress proxy needs tinyproxy and socat on this host: apt-get install tinyproxy-bin socat"
#: Started in front of every command of an allowlist phase: the forwarder on the sandbox's
#: loopback, a wait until it listens (0C38 = port 3128), then the command itself ("$1").
FORWARDER = (
    f"socat TCP-LISTEN:{tinyproxy.PROXY_PORT},bind=127.0.0.1,fork,reuseaddr "
    f"UNIX-CONNECT:{SANDBOX_DIR}/{SOCKET_NAME} </dev/null >/dev/null 2>&1 &\n"
    "i=0; until grep -q '0100007F:0C38 00000000:0000 0A' /proc/net/tcp 2>/dev/null; do\n"
    "  i=$((i+1)); if [ $i -gt 20000 ]; then echo 'maka: the egress forwarder did not start' >&2; exit 125; fi\n"
    "done\n"
    'exec /bin/sh -c "$1"\n'
)


class EgressUnavailable(Exception):
    """The egress proxy could not be started: the phase must not run (never an open network)."""


def proxy_env(patterns: tuple[HostPattern, ...], url: str, loopback_names: tuple[str, ...]) -> dict[str, str]:
    """HTTP(S)_PROXY for ``url``; NO_PROXY keeps the sandbox's own loopback direct unless it is allow-listed."""
    env = {k: url for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")}
    if not any(p.host in loopback_names for p in patterns):
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
    """tinyproxy plus its unix-socket bridge on the host, for one phase of one attempt."""

    def __init__(self, directory: Path, patterns: tuple[HostPattern, ...], hosts: Mapping[str, str], phase: str):
        self.dir = directory
        self.patterns = patterns
        self.hosts = dict(hosts)
        self.phase = phase
        self._procs: list[subprocess.Popen[bytes]] = []
        self._log = directory / "tinyproxy.log"
        # a unix socket path has at most 107 bytes: keep it short, whatever the scratch path is
        # (its name still says whose it is: the last parts of the attempt's directory)
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(directory.parts[-4:]))[-60:]
        self._socket_dir = Path(tempfile.mkdtemp(prefix=f"maka-egress-{tag}-"))

    @property
    def socket_path(self) -> Path:
        return self._socket_dir / SOCKET_NAME

    def start(self) -> None:
        """Start tinyproxy and the bridge; EgressUnavailable with the reason when either fails."""
        if shutil.which(TINYPROXY) is None or shutil.which("socat") is None:
            raise EgressUnavailable(MISSING)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "filter").write_text("\n".join(tinyproxy.filter_lines(self.patterns)) + "\n")
        (self.dir / "hosts").write_text(self._hosts_file())
        for _ in range(5):  # a free port can be taken between choosing and binding it
            port = _free_port()
            self._write_config(port)
            proc = self._spawn("tinyproxy", self._proxy_argv(), log=self._log)
            # The bridge connects to the port per client, so both start at once.
            bridge = self._spawn(
                "socat",
                ["socat", f"UNIX-LISTEN:{self.socket_path},fork,mode=0666,unlink-early", f"TCP:127.0.0.1:{port}"],
            )
            if self._wait(functools.partial(_listening, port), proc):
                break
            self._stop(bridge)
            self._stop(proc)
        else:
            self.stop()
            raise EgressUnavailable(f"tinyproxy did not start: {self._log_tail()}")
        if not self._wait(self.socket_path.exists, bridge):
            self.stop()
            raise EgressUnavailable("the unix-socket bridge to the egress proxy (socat) did not start")

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

    def _spawn(self, name: str, argv: list[str], log: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv``; its output goes to ``log`` (default ``<name>.out``)."""
        with (log or self.dir / f"{name}.out").open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # the harness may be killed: the proxy must go too
            )
        self._procs.append(proc)
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
        """Stop both processes and return what the proxy saw in this phase."""
        for proc in reversed(self._procs):
            self._stop(proc)
        self._procs.clear()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()
        with contextlib.suppress(OSError):
            self._socket_dir.rmdir()
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        return tinyproxy.parse_log(text, self.phase, self.patterns)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True

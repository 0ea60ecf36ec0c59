"""Reach a Docker engine through a throwaway ``sshd`` on loopback, as an ``ssh://`` engine URL.

The Docker SDK (``use_ssh_client=True``) runs ``ssh [-l USER] [-p PORT] -- HOST 'docker system
dial-stdio'``, finding ``ssh`` on ``$PATH``. OpenSSH reads ``~/.ssh/config`` from the passwd entry,
not ``$HOME``, so to leave the real ``~/.ssh`` alone :attr:`SshEngine.bin_dir` holds an ``ssh`` that
adds ``-F`` with this helper's own client config (its key, no known-hosts file, short timeouts):
put it first on ``$PATH`` in the process that talks to the engine (pytester subprocesses inherit
it). The server runs as root on ``127.0.0.1:PORT`` and sets ``DOCKER_HOST`` for its sessions
(``SetEnv``), so ``docker system dial-stdio`` there dials the engine given to the constructor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
MISSING = "ssh:// engines need root, sshd, ssh, ssh-keygen and docker: apt-get install openssh-server openssh-client"


def missing_reason() -> str | None:
    """Why an :class:`SshEngine` cannot run here, or None."""
    if os.geteuid() != 0 or not os.access(SSHD, os.X_OK):
        return MISSING
    if any(shutil.which(tool) is None for tool in ("ssh", "ssh-keygen", "docker")):
        return MISSING
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SshEngine:
    """``sshd`` on 127.0.0.1 in front of the engine at ``docker_host``; ``url`` is its ``ssh://`` URL.

    ``kill()`` drops sshd and every session it serves (a machine falling off the network);
    ``start()`` brings it back on the same port with the same keys.
    """

    def __init__(self, docker_host: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="maka-ssh-", dir="/tmp"))
        self.port = _free_port()
        self.url = f"ssh://root@127.0.0.1:{self.port}"
        self.bin_dir = self.root / "bin"
        self.proc: subprocess.Popen[bytes] | None = None
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"maka-{name}", "-f", str(self.root / name)],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        (self.root / "home").mkdir()
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        (self.root / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1:{self.port}\n"
            f"HostKey {self.root / 'host_key'}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "AllowTcpForwarding no\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "MaxStartups 100\n"
            "MaxSessions 100\n"
            "LogLevel ERROR\n"
            # HOME: sessions' bash must not source the real ~/.bashrc (it may print, or block on
            # a lock such as pyenv's rehash), nor read the real ~/.docker
            f"SetEnv DOCKER_HOST={docker_host} HOME={self.root / 'home'}\n"
        )
        (self.root / "ssh_config").write_text(
            "Host *\n"
            f"  IdentityFile {self.root / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            "  BatchMode yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n"
            "  ConnectTimeout 5\n"
            "  ServerAliveInterval 2\n"
            "  ServerAliveCountMax 3\n"
        )
        self.bin_dir.mkdir()
        wrapper = self.bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {self.root / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)

    @property
    def path(self) -> str:
        """``$PATH`` with the ``ssh`` wrapper first."""
        return f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"

    def start(self, timeout: float = 20) -> None:
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation; left in place
        log = open(self.root / "sshd.log", "ab")  # noqa: SIM115 - owned by the daemon process
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        env = {**os.environ, "PATH": self.path}
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                check = subprocess.run(
                    ["ssh", "-p", str(self.port), "-l", "root", "--", "127.0.0.1", "docker version --format ok"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=max(1.0, deadline - time.monotonic()),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                last = "ssh ... docker version timed out"
                break
            if check.returncode == 0:
                return
            last = (check.stderr or check.stdout).decode(errors="replace").strip()
            time.sleep(0.2)
        log_text = (self.root / "sshd.log").read_text(errors="replace")[-2000:]
        self.kill()
        raise RuntimeError(f"sshd on 127.0.0.1:{self.port} did not serve docker: {last}\n{log_text}")

    def kill(self) -> None:
        """SIGKILL sshd and its per-connection children (each calls setsid, so walk /proc)."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGSTOP)  # accepts no more connections while we look
        for pid in [*self._descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _descendants(root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        found: list[int] = []
        todo = [root]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

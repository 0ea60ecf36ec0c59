"""Start a second Docker engine for a test: its own socket, data-root, exec-root and bridge."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from pytest_maka.executors.docker.cleanup import kill_trees, processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def started_engine(source: docker.APIClient, image: str) -> Iterator[SecondEngine]:
    """A running second engine holding ``image`` (skips where one cannot be started), stopped after."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("ip") is None:
        pytest.skip("starting a second dockerd needs root, dockerd and ip")
    engine = SecondEngine()
    try:
        engine.start()
        engine.load_from(source, image)
        yield engine
    finally:
        engine.stop()


SUBNET_LOCKS = Path("/tmp/maka-d2-subnets")


def _claim_subnet() -> tuple[int, int]:
    """A 172.29.N.0/24 no other engine of any process holds and no interface uses.

    Each claim is an flock on ``SUBNET_LOCKS/N.lock``, held until ``stop()`` (or until the
    process dies), so parallel xdist workers never pick the same bridge subnet.
    """
    SUBNET_LOCKS.mkdir(exist_ok=True)
    in_use = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    for n in range(64, 192):
        if f" 172.29.{n}." in in_use:
            continue
        fd = os.open(SUBNET_LOCKS / f"{n}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return n, fd
    raise RuntimeError("no free 172.29.N.0/24 subnet for a second engine")


class SecondEngine:
    """A throwaway ``dockerd``; ``kill()`` makes it stop answering, ``start()`` brings it back."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="maka-d2-", dir="/tmp"))
        self.url = f"unix://{self.root}/docker.sock"
        self.tcp_url = f"tcp://127.0.0.1:{_free_port()}"  # the same engine, also on loopback TCP
        self.bridge = f"maka{uuid.uuid4().hex[:8]}"
        self.proc: subprocess.Popen[bytes] | None = None
        subnet, self._subnet_lock = _claim_subnet()
        subprocess.run(["ip", "link", "add", "name", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"172.29.{subnet}.1/24", "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)

    def start(self, timeout: float = 60) -> None:
        """Start dockerd; when its own containerd does not come up in time (seen right after another
        test engine's shutdown), stop what it started and try once more before failing."""
        try:
            self._start_once(timeout)
        except RuntimeError as first:
            if "containerd" not in str(first):
                raise
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
            self._kill_strays()
            self._start_once(timeout * 2)

    def _start_once(self, timeout: float) -> None:
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - owned by the daemon process
        self.proc = subprocess.Popen(
            [
                "dockerd",
                "--host",
                self.url,
                "--host",
                self.tcp_url,
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "docker.pid"),
                "--bridge",
                self.bridge,
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                client = docker.APIClient(base_url=self.url, version="auto", timeout=5)
                client.ping()
                client.close()
                return
            except Exception:
                if self.proc.poll() is not None:  # it gave up: no use waiting out the timeout
                    break
                time.sleep(0.2)
        tail = (self.root / "dockerd.log").read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError("second dockerd did not come up:\n" + "\n".join(t for t in tail if "grpc" not in t))

    def load_from(self, source: docker.APIClient, image: str) -> None:
        """Copy ``image`` from another engine (no registry is needed)."""
        client = docker.APIClient(base_url=self.url, version="auto", timeout=300)
        client.load_image(b"".join(source.get_image(image)))
        client.close()

    def kill(self) -> None:
        """Stop answering at once (SIGKILL), as a machine that drops off the network."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self._wait_containerd_gone()

    def _wait_containerd_gone(self, timeout: float = 60) -> None:
        """The killed daemon's containerd dies after it (parent-death signal); a start() before it
        is gone races it for the socket and times out, so wait for that state."""
        deadline = time.monotonic() + timeout
        while self._pids(lambda cmd: cmd.startswith(b"containerd\0")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd of {self.root} did not exit after dockerd was killed")
            time.sleep(0.05)

    def _pids(self, match: Callable[[bytes], bool]) -> list[int]:
        """Processes whose command line names this engine's root and satisfies ``match``."""
        root = str(self.root).encode()
        return [pid for pid, (_, cmd) in processes().items() if root in cmd and match(cmd)]

    def restart(self, timeout: float = 120) -> None:
        """Shut down cleanly (its containers die with it) and start again, as ``systemctl restart``."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
            self.proc = None
            self._wait_containerd_gone()
        self.start(timeout)

    def stop(self) -> None:
        """Shut down cleanly (kills its containers) and remove everything it made."""
        if self.proc is None and (self.root / "data").exists():
            self.start()  # a clean shutdown also removes what a killed daemon left running
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._kill_strays()
        mounts = [
            line.split()[1]
            for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(self.root))
        ]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], check=False)
        os.close(self._subnet_lock)  # the subnet is free for the next engine

    def _kill_strays(self) -> None:
        """containerd and shims of this engine (their command lines name its root) and their children.

        Killing a container's init (a shim's child) ends everything in its pid namespace.
        """
        kill_trees(processes(), set(self._pids(lambda cmd: True)))

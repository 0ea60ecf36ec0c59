"""The ssh:// transport's socket: closing it after ``ssh`` has exited must not raise.

docker-py's own socket writes to the dead ``ssh``'s stdin on close; after a hijacked
``exec_start`` stream that race surfaced as ``BrokenPipeError`` out of a container start.
"""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("docker", reason="the docker SDK is not installed: pip install 'docker>=7.1,<8'")

from docker.transport.sshconn import SSHSocket

from pytest_maka.executors.docker.ssh_transport import QuietSSHSocket


def _exited(sock: SSHSocket) -> subprocess.Popen[bytes]:
    sock.proc = subprocess.Popen(["true"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    sock.proc.wait()
    return sock.proc


def test_docker_py_socket_raises_when_ssh_has_gone() -> None:
    """The bug this transport exists for (if docker-py fixes it, this test says so)."""
    sock = SSHSocket("root@127.0.0.1:22")
    _exited(sock)
    with pytest.raises(BrokenPipeError):
        sock.close()


def test_quiet_socket_closes_an_exited_ssh_and_leaves_stdout_readable() -> None:
    sock = QuietSSHSocket("root@127.0.0.1:22")
    proc = _exited(sock)
    sock.close()
    sock.close()  # twice is harmless
    assert proc.stdin.closed and proc.returncode == 0
    assert proc.stdout.read() == b""  # http.client may still flush/read the response file


def test_quiet_socket_ends_a_running_ssh() -> None:
    sock = QuietSSHSocket("root@127.0.0.1:22")
    proc = sock.proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    sock.close()
    assert sock.proc is None and proc.returncode is not None  # terminated and reaped

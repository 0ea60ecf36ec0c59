"""Whether a container's owner process is gone: dead, reused pid, or a zombie."""

from __future__ import annotations

import os
import subprocess
import time

from pytest_maka.executors.docker import labels as L


def _labels_of(pid: int, start: str | None) -> dict[str, str]:
    import socket

    return {L.OWNER_HOST: socket.gethostname(), L.OWNER_PID: str(pid), L.OWNER_START: start or ""}


def test_a_live_owner_is_alive_and_a_reused_pid_is_not() -> None:
    me = os.getpid()
    assert not L.owner_is_dead(_labels_of(me, L.process_start(me)))
    assert L.owner_is_dead(_labels_of(me, "1"))  # same pid, another start time: reused


def test_a_zombie_owner_is_dead() -> None:
    child = subprocess.Popen(["true"])  # not waited for: it stays a zombie until reaped
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        assert L.process_start(child.pid) is None
        assert L.owner_is_dead(_labels_of(child.pid, "anything"))
    finally:
        child.wait()


def test_an_owner_on_another_host_is_never_declared_dead() -> None:
    labels = _labels_of(os.getpid(), None)
    labels[L.OWNER_HOST] = "some-other-host.invalid"
    assert not L.owner_is_dead(labels)

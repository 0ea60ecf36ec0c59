"""The relay's unix sockets: their paths never depend on the user's TMPDIR (a socket path has at most 107 bytes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.egress import host, loopback
from pytest_maka.testing.servers import EGRESS_TOKEN, HttpServer, http_server

from ..conftest import Cohort

pytestmark = [pytest.mark.sandbox, pytest.mark.needs("bwrap", "tinyproxy", "forwarder", "curl")]


@pytest.fixture
def server() -> Iterator[HttpServer]:
    with http_server() as s:
        yield s


def long_tmpdir(base: Path) -> Path:
    """A TMPDIR of well over 28 characters (the length that broke every cell's egress)."""
    path = base / ("long-tmpdir-" + "x" * 60) / "of-a-user"
    path.mkdir(parents=True)
    return path


def test_a_long_tmpdir_leaves_local_egress_working(
    cohort: Cohort, server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmpdir = long_tmpdir(cohort.root)
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    cohort.task("t")
    cmd = f"curl -s -m 10 -o - -w ' %{{http_code}}\\n' http://allowed.test:{server.port}/agent > $MAKA_LOGS_DIR/net.txt"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}],
        executor={"kind": "local", "egress_hosts": {"allowed.test": "127.0.0.1"}},
        policy={"egress": [f"allowed.test:{server.port}"]},
    )
    result = cohort.run_subprocess()
    record = cohort.results()["t[a-r0]"]
    assert record["status"] == "agent_failure", (record["error"], result.stdout.str()[-2000:])
    assert server.paths == ["/agent"], "the agent reached the allowed host through the proxy"
    assert record["isolation"]["network"]["phases"]["agent"]["connections"] == {"allowed": 1, "refused": 0}
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert EGRESS_TOKEN in seen and seen.endswith(" 200\n"), seen


def test_the_socket_directory_is_short_whatever_tmpdir_and_the_attempt_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(long_tmpdir(tmp_path)))
    monkeypatch.setattr("tempfile.tempdir", None)  # tempfile caches the first TMPDIR it saw
    attempt = tmp_path / ("cells-" + "y" * 120) / "t__a__r0-0123456789ab" / "attempt-1" / "egress-agent"
    made = host.socket_dir(attempt)
    try:
        assert made.parent == Path(host.SOCKET_ROOT)
        assert stat_mode(made) == 0o700, "private to this user"
        assert made.name.startswith(f"{host.SOCKET_PREFIX}{os.getpid()}-") and "attempt-1" in made.name
        tunnel = loopback.socket_name(host.MAX_TUNNELS - 1)
        for name in (host.SOCKET_NAME, host.DNS_SOCKET, host.FORWARDER_NAME, tunnel):
            assert len(str(made / name)) <= host.MAX_SOCKET_PATH
    finally:
        made.rmdir()


def test_socket_directories_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    dead = root / f"{host.SOCKET_PREFIX}{2**22 + 7}-t-abcdefgh"  # above pid_max's default: no such process
    alive = root / f"{host.SOCKET_PREFIX}{os.getpid()}-t-abcdefgh"
    other = root / "maka-egress-notapid"
    for d in (dead, alive, other):
        d.mkdir()
        (d / host.FORWARDER_NAME).write_text("")
    host._sweep(str(root))
    assert sorted(p.name for p in root.iterdir()) == sorted([alive.name, other.name])


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777

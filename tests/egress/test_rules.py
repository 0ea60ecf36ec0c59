"""Allowlist entries, the NetworkPlan, tinyproxy's rules and log, and spec errors for bad entries."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.core.spec import Policy
from pytest_maka.core.task import Task
from pytest_maka.egress import tinyproxy
from pytest_maka.egress.plan import build_plan
from pytest_maka.testing.servers import EGRESS_TOKEN, http_server

from ..conftest import Cohort


@pytest.mark.parametrize(
    ("entry", "host", "port", "allowed"),
    [
        ("api.example.com", "api.example.com", 443, True),
        ("api.example.com", "API.Example.com", 80, True),
        ("api.example.com", "api.example.com", 8443, False),
        ("api.example.com", "evil-api.example.com", 443, False),
        ("api.example.com", "api.example.com.evil.test", 443, False),
        ("*.example.org:443", "a.b.example.org", 443, True),
        ("*.example.org:443", "example.org", 443, False),
        ("*.example.org:443", "a.example.org", 80, False),
        ("*.example.org:443", "aexample.org", 443, False),
        ("10.1.2.3:8000", "10.1.2.3", 8000, True),
        ("10.1.2.3:8000", "10.1.2.3", 8001, False),
        ("localhost:8000", "127.0.0.1", 8000, False),  # a name never grants the address it resolves to
        ("127.0.0.1:8000", "localhost", 8000, False),
        ("[::1]:8000", "::1", 8000, True),
    ],
)
def test_entries_match_host_and_port(entry: str, host: str, port: int, allowed: bool) -> None:
    assert hostpattern.parse(entry).matches(host, port) is allowed


@pytest.mark.parametrize(
    "entry", ["", "http://api.example.com", "api.example.com/v1", "*", "*.com", "a*.example.org", "x:0", "x:99999",
              "user@host", "bad_name.test", "-lead.test", "host:port"],
)  # fmt: skip
def test_bad_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        hostpattern.parse(entry)


def _task(tmp_path: Path, network: str, hosts: list[str], verifier: str | None = None) -> Task:
    return Task(
        id="t",
        path=tmp_path,
        instruction="",
        digest="",
        network=network,
        verifier_network=verifier,
        agent_allowed_hosts=tuple(hosts),
        verifier_allowed_hosts=tuple(hosts),
    )


def test_plan_unions_policy_subject_and_task_hosts(tmp_path: Path) -> None:
    task = _task(tmp_path, "allowlist", ["pypi.test", "api.model.test"])
    plan = build_plan(task, Policy(agent_network=True, egress=["api.model.test"]), ("telemetry.test:443",))
    assert plan.agent.mode == "allowlist"
    assert [p.text for p in plan.agent.allow] == ["api.model.test", "telemetry.test:443", "pypi.test"]
    assert plan.verifier.mode == "none" and plan.setup.mode == "none"


def test_plan_says_what_the_policy_did_not_grant(tmp_path: Path) -> None:
    task = _task(tmp_path, "allowlist", ["pypi.test", "api.model.test", "a.model.test:443", "not a host"])
    plan = build_plan(task, Policy(egress=["api.model.test", "*.model.test:443"]))
    assert plan.agent.mode == "allowlist"
    assert [p.text for p in plan.agent.allow] == ["api.model.test", "*.model.test:443"]
    assert plan.agent.record()["not_granted"] == ["pypi.test", "not a host (not a host pattern)"]


def test_plan_keeps_the_old_switches(tmp_path: Path) -> None:
    public = _task(tmp_path, "public", [])
    assert build_plan(public, Policy()).agent.mode == "none"
    assert build_plan(public, Policy(agent_network=True)).agent.mode == "all"
    offline = _task(tmp_path, "none", [], verifier="none")
    assert build_plan(offline, Policy(agent_network=True)).agent.mode == "none"
    assert build_plan(offline, Policy(verifier_network=True)).verifier.mode == "all"
    verifier = build_plan(offline, Policy(verifier_egress=["pypi.test"]))
    assert verifier.verifier.mode == "allowlist" and verifier.agent.mode == "none"


def test_setup_phase_gets_its_own_plan(tmp_path: Path) -> None:
    public, listed = _task(tmp_path, "public", []), _task(tmp_path, "allowlist", ["pypi.test"])
    assert build_plan(public, Policy(agent_network=True, egress=["api.test"])).setup.mode == "none"
    plan = build_plan(public, Policy(setup_egress=["deb.test"]), setup_egress=("npm.test:443",))
    assert plan.setup.mode == "allowlist" and [p.text for p in plan.setup.allow] == ["deb.test", "npm.test:443"]
    assert plan.agent.mode == "none" and plan.verifier.mode == "none", "setup hosts are for setup only"
    assert build_plan(public, Policy(setup_network=True)).setup.mode == "all"
    granted = build_plan(listed, Policy(setup_network=True)).setup
    assert granted.mode == "allowlist" and [p.text for p in granted.allow] == ["pypi.test"]
    assert build_plan(listed, Policy()).setup.record() == {"mode": "none", "declared": "allowlist"}
    offline = _task(tmp_path, "none", [])
    assert build_plan(offline, Policy(setup_network=True)).setup.mode == "none"


def test_log_parser_reads_tinyproxy_lines() -> None:
    log = (
        "CONNECT   Dec 01 08:26:58.823 [27001]: Request (file descriptor 4): CONNECT ok.test:443 HTTP/1.1\n"
        "CONNECT   Dec 01 08:26:58.838 [27001]: Request (file descriptor 5): CONNECT bad.test:443 HTTP/1.1\n"
        'NOTICE    Dec 01 08:26:58.838 [27001]: Proxying refused on filtered url "bad.test:443"\n'
        "CONNECT   Dec 01 08:26:58.849 [27001]: Request (file descriptor 4): GET http://ok.test/x HTTP/1.1\n"
        "CONNECT   Dec 01 08:26:58.850 [27001]: Request (file descriptor 6): \x16\x03\x01garbage\n"
    )
    events = tinyproxy.parse_log(log, "agent", hostpattern.parse_all(["ok.test"]))
    assert [(e.method, e.destination, e.allowed) for e in events] == [
        ("CONNECT", "ok.test:443", True),
        ("CONNECT", "bad.test:443", False),
        ("GET", "ok.test:80", True),
        ("\x16\x03\x01garbage", "?", False),
    ]
    assert re.match(r"^\d{4}-12-01T08:26:58\.823Z$", events[0].time)


@pytest.mark.needs("tinyproxy", "curl")
def test_real_tinyproxy_enforces_the_rendered_rules(tmp_path: Path) -> None:
    """The regular expressions mean in tinyproxy what the matcher says (plain HTTP and CONNECT)."""
    with http_server() as server, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        rules = hostpattern.parse_all([f"127.0.0.1:{server.port}"])
        (tmp_path / "filter").write_text("\n".join(tinyproxy.filter_lines(rules)) + "\n")
        conf = tinyproxy.render_config(
            listen="127.0.0.1", port=port, filter_path=str(tmp_path / "filter"), log_path=str(tmp_path / "log")
        )
        (tmp_path / "conf").write_text(conf)
        proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(tmp_path / "conf")])
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.005)

            def curl(*args: str) -> str:
                cmd = ["curl", "-s", "-o", "-", "-w", " %{http_code}", "--max-time", "5", "-x", f"127.0.0.1:{port}"]
                return subprocess.run([*cmd, *args], capture_output=True, text=True).stdout

            assert EGRESS_TOKEN in curl(f"http://127.0.0.1:{server.port}/a")
            assert EGRESS_TOKEN in curl("-p", f"http://127.0.0.1:{server.port}/b")
            assert curl(f"http://127.0.0.1:{server.port}@localhost:{server.port}/c").endswith(" 403")
            assert curl(f"http://localhost:{server.port}/d").endswith(" 403")
            assert curl(f"http://127.0.0.1:{port}/e").endswith(" 403")
        finally:
            proc.terminate()
            proc.wait(10)
        assert server.paths == ["/a", "/b"]
        events = tinyproxy.parse_log((tmp_path / "log").read_text(), "agent", rules)
        assert [e.allowed for e in events] == [True, True, False, False, False]


@pytest.mark.parametrize(
    ("policy", "key"),
    [
        ('{egress: ["api.example.com", "http://x.test/"]}', "policy.egress[1]"),
        ('{verifier_egress: ["*"]}', "policy.verifier_egress[0]"),
        ('{setup_egress: ["ok.test", "user@x.test"]}', "policy.setup_egress[1]"),
    ],
)
def test_bad_entry_is_a_spec_error_naming_the_key(cohort: Cohort, policy: str, key: str) -> None:
    cohort.task("one")
    head = "name: t\ntasks: [{path: tasks}]\nsubjects: [{name: a, kind: oracle}]\n"
    cohort.spec.write_text(f"{head}policy: {policy}\n")
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.stderr.str().splitlines() if line.startswith("ERROR:")]
    assert len(lines) == 1 and f"cohort.yaml: {key}:" in lines[0], lines
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_bad_subject_entry_names_the_subject_key(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.spec.write_text(
        "name: t\ntasks: [{path: tasks}]\nsubjects: [{name: a, kind: nop, egress: [ok.test, 'bad host']}]\n"
    )
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cohort.yaml: subjects[0].egress[1]:" in result.stderr.str()


def test_each_phase_gets_its_own_declared_hosts(tmp_path: Path) -> None:
    """Harbor's [agent] and [verifier] allowed_hosts (and a step's) are per phase: the
    verifier's hosts are not the agent's, and the agent's do not leak into the verifier."""
    from dataclasses import replace

    task = replace(
        _task(tmp_path, "allowlist", ["shared.test"], verifier="allowlist"),
        agent_allowed_hosts=("api.model.test",),
        verifier_allowed_hosts=("pypi.test", "not a host"),
    )
    plan = build_plan(task, Policy(agent_network=True, verifier_network=True))
    assert [p.text for p in plan.agent.allow] == ["api.model.test"]
    assert [p.text for p in plan.verifier.allow] == ["pypi.test"]
    assert plan.verifier.record()["not_granted"] == ["not a host (not a host pattern)"]
    shared = build_plan(
        _task(tmp_path, "allowlist", ["shared.test"], verifier="allowlist"),
        Policy(agent_network=True, verifier_network=True),
    )
    assert [p.text for p in shared.verifier.allow] == ["shared.test"] == [p.text for p in shared.agent.allow]

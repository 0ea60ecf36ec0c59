"""Conformance: an allowlist phase reaches what it lists through the egress proxy, and nothing else.

Capability-flagged: an executor without an egress proxy sets ``supports_egress = False``.
The executor under test must resolve ``EgressTarget.name`` to ``EgressTarget.ip`` in its
proxy (``egress_hosts``); the default target is an HTTP server on the host's 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from ...core import hostpattern
from ...egress.log import PAST_PROXY, EgressLog
from ...egress.loopback import METHOD as TUNNEL
from ...egress.plan import PhasePlan
from ...executors.base import Sandbox
from ..servers import EGRESS_TOKEN, http_server
from .base import ConformanceBase, Run

#: An address nobody has (RFC 5737 TEST-NET-1): sent to directly, past the proxy.
TEST_NET = "192.0.2.1"
#: Runs in the sandbox: ``probe MODE HOST PORT`` with MODE proxy-get, connect or direct.
PROBE = """
import http.client, os, socket, sys, urllib.parse
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    if mode == "direct":
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET /direct HTTP/1.0\\r\\n\\r\\n"); data = b""
        while len(data) < 400:  # the whole answer: a tunnel may pass the headers and the body apart
            chunk = s.recv(400)
            if not chunk:
                break
            data += chunk
        print("REACHED", data)
    elif mode == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"maka-udp", (host, port)); print("SENT")
    elif mode == "dns":
        print("RESOLVED", socket.getaddrinfo(host, port))
    elif mode == "own-and-listed":  # a server of its own on loopback, then it and the listed endpoint by URL
        import http.server, threading, urllib.request
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"own-" + self.path.encode())
            def log_message(self, *a): pass
        own = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=own.serve_forever, daemon=True).start()
        for url in (f"http://127.0.0.1:{own.server_port}/mine", f"http://localhost:{own.server_port}/by-name",
                    f"http://{host}:{port}/listed"):
            try:
                print("GOT", urllib.request.urlopen(url, timeout=10).read(200))
            except Exception as e:
                print("FAILED", url, type(e).__name__, e)
    else:
        p = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
        c = http.client.HTTPConnection(p.hostname, p.port, timeout=10)
        if mode == "connect":
            c.set_tunnel(host, port); c.request("GET", "/via-connect")
        else:
            c.request("GET", f"http://{host}:{port}/via-get")
        r = c.getresponse(); print("STATUS", r.status, r.read(200))
except Exception as e:
    print("FAILED", type(e).__name__, e)
"""


@dataclass(frozen=True)
class EgressTarget:
    """An HTTP server the proxy can reach: ``name`` (mapped by the executor to ``ip``) and ``port``."""

    name: str
    ip: str
    port: int


class EgressTests(ConformanceBase):
    """Allowlist phases: reached when listed, refused and logged otherwise, nothing without the proxy."""

    #: The executor enforces allowlist phases through an egress proxy.
    supports_egress: ClassVar[bool] = True
    #: DNS questions asked inside an allowlist phase reach the proxy's responder (logged, refused).
    egress_logs_dns: ClassVar[bool] = True
    #: What a command sends past the proxy (here TCP connects to addresses) is logged, refused at once.
    egress_logs_past_proxy: ClassVar[bool] = False
    #: An allowlisted endpoint on the host's loopback is tunnelled into the sandbox on its own
    #: (reached directly, logged as ``TUNNEL``); the rest of the sandbox's loopback stays its own.
    egress_tunnels_loopback: ClassVar[bool] = False

    @pytest.fixture
    def egress_target(self) -> Iterator[EgressTarget]:
        """Override when the proxy cannot reach the host's loopback (e.g. a server in a container)."""
        with http_server() as server:
            yield EgressTarget(name="allowed.test", ip="127.0.0.1", port=server.port)

    def _egress_probe(self, sandbox: Sandbox, tmp_path: Path, mode: str, host: str, port: int, **kw: object) -> Run:
        env = {"PATH": self.path_env, "MAKA_PROBE": PROBE}
        env.update(kw.pop("env", {}))  # type: ignore[arg-type]
        prefix = kw.pop("prefix", "")
        return self.run(
            sandbox, f'{prefix}python3 -c "$MAKA_PROBE" {mode} {host} {port}', tmp_path, env=env, network=True, **kw
        )

    def _phase(self, sandbox: Sandbox, entries: list[str], log: EgressLog, name: str = "agent") -> object:
        if not self.supports_egress:
            pytest.skip("this executor has no egress proxy")
        plan = PhasePlan("allowlist", hostpattern.parse_all(entries))
        return sandbox.egress_phase(name, plan, log)  # type: ignore[attr-defined]

    def test_egress_listed_host_is_reached_and_others_refused(
        self, sandbox: Sandbox, tmp_path: Path, egress_target: EgressTarget
    ) -> None:
        t = egress_target
        log = EgressLog(tmp_path / "egress.log")
        with self._phase(sandbox, [f"{t.name}:{t.port}"], log):  # type: ignore[attr-defined]
            via_get = self._egress_probe(sandbox, tmp_path, "get", t.name, t.port)
            via_connect = self._egress_probe(sandbox, tmp_path, "connect", t.name, t.port)
            other_host = self._egress_probe(sandbox, tmp_path, "get", "unlisted.test", t.port)
            other_port = self._egress_probe(sandbox, tmp_path, "connect", t.name, t.port + 1 if t.port < 65535 else 1)
            direct_ip = self._egress_probe(sandbox, tmp_path, "get", t.ip, t.port)
        assert f"STATUS 200 b'{EGRESS_TOKEN} http://" in via_get.stdout or EGRESS_TOKEN in via_get.stdout, via_get
        assert EGRESS_TOKEN in via_connect.stdout, via_connect
        for refused in (other_host, other_port, direct_ip):
            assert EGRESS_TOKEN not in refused.stdout, refused
            assert "403" in refused.stdout, refused
        events = log.events()
        allowed = {e.destination for e in events if e.allowed}
        refused_dest = {e.destination for e in events if not e.allowed}
        assert allowed == {f"{t.name}:{t.port}"}, events
        assert {f"unlisted.test:{t.port}", f"{t.ip}:{t.port}"} <= refused_dest, events
        assert len(events) == 5, events
        assert log.path.is_file() and len(log.path.read_text().splitlines()) == 5

    def test_egress_without_the_proxy_reaches_nothing(
        self, sandbox: Sandbox, tmp_path: Path, egress_target: EgressTarget
    ) -> None:
        t = egress_target
        log = EgressLog(tmp_path / "egress.log")
        with self._phase(sandbox, [f"{t.name}:{t.port}", f"{t.ip}:{t.port}"], log):  # type: ignore[attr-defined]
            unset = self._egress_probe(sandbox, tmp_path, "direct", t.ip, t.port, prefix="env -i PATH=$PATH ")
            dns = self._egress_probe(sandbox, tmp_path, "dns", "unlisted.test", t.port)
            listed_name = self._egress_probe(sandbox, tmp_path, "dns", t.name, t.port)
            elsewhere = self._egress_probe(sandbox, tmp_path, "direct", TEST_NET, t.port, prefix="env -i PATH=$PATH ")
        tunnelled = self.egress_tunnels_loopback and ipaddress.ip_address(t.ip).is_loopback
        if tunnelled:  # the listed loopback endpoint is the one thing reached without the proxy
            assert EGRESS_TOKEN in unset.stdout, unset
        else:
            assert unset.stdout.startswith("FAILED"), unset
        assert elsewhere.stdout.startswith("FAILED"), elsewhere
        assert dns.stdout.startswith("FAILED"), f"DNS answered inside the sandbox: {dns.stdout}"
        assert listed_name.stdout.startswith("FAILED"), "names resolve only in the proxy, never in the sandbox"
        events = log.events()
        tunnel = [(e.method, e.destination, e.allowed) for e in events if e.method == TUNNEL]
        assert tunnel == ([(TUNNEL, f"{t.ip}:{t.port}", True)] if tunnelled else []), events
        events = [e for e in events if e.method != TUNNEL]
        assert not any(e.allowed for e in events), events
        past = [e for e in events if e.method != "DNS"]
        assert all(e.reason == PAST_PROXY for e in past), "nothing else reached the proxy"
        if self.egress_logs_past_proxy:  # the sandbox's own loopback is not past the proxy: it never leaves
            target = [] if ipaddress.ip_address(t.ip).is_loopback else [("TCP", f"{t.ip}:{t.port}")]
            assert [(e.method, e.destination) for e in past] == [*target, ("TCP", f"{TEST_NET}:{t.port}")], events
            assert "ConnectionRefusedError" in elsewhere.stdout, f"refused at once: {elsewhere.stdout}"
        if self.egress_logs_dns:
            assert {"unlisted.test:53", f"{t.name}:53"} <= {e.destination for e in events}, events

    def test_egress_each_phase_gets_only_its_own_allowlist(
        self, sandbox: Sandbox, tmp_path: Path, egress_target: EgressTarget
    ) -> None:
        t = egress_target
        log = EgressLog(tmp_path / "egress.log")
        with self._phase(sandbox, [f"{t.name}:{t.port}"], log, "agent"):  # type: ignore[attr-defined]
            agent = self._egress_probe(sandbox, tmp_path, "get", t.name, t.port)
            offline = self.run(sandbox, "env | grep -ci _proxy || true", tmp_path, network=False)
        with self._phase(sandbox, [f"index.test:{t.port}"], log, "verifier"):  # type: ignore[attr-defined]
            verifier = self._egress_probe(sandbox, tmp_path, "connect", t.name, t.port)
        assert EGRESS_TOKEN in agent.stdout, agent
        assert offline.stdout.strip() == "0", "network=False commands get no proxy variables"
        assert EGRESS_TOKEN not in verifier.stdout and "403" in verifier.stdout, verifier
        assert [(e.phase, e.allowed) for e in log.events()] == [("agent", True), ("verifier", False)]

    def test_egress_own_loopback_stays_own_while_a_loopback_endpoint_is_listed(
        self, sandbox: Sandbox, tmp_path: Path
    ) -> None:
        """The command's own server on the sandbox's loopback (an agent's local service) answers it
        while a loopback endpoint is listed. Where the executor tunnels loopback, the listed
        endpoint on the host's loopback (a model stand-in) is reached too, logged as ``TUNNEL``."""
        log = EgressLog(tmp_path / "egress.log")
        with http_server() as server, self._phase(sandbox, [f"127.0.0.1:{server.port}"], log):  # type: ignore[attr-defined]
            run = self._egress_probe(sandbox, tmp_path, "own-and-listed", "127.0.0.1", server.port)
        got = [line for line in run.stdout.splitlines() if line.startswith("GOT")]
        assert got[:2] == ["GOT b'own-/mine'", "GOT b'own-/by-name'"], run
        events = [(e.method, e.destination, e.allowed) for e in log.events()]
        if not self.egress_tunnels_loopback:
            assert server.paths == [] and not any(allowed for _, _, allowed in events), (run, events)
            return
        assert len(got) == 3 and f"{EGRESS_TOKEN} /listed" in got[2], run
        assert server.paths == ["/listed"]
        assert events == [(TUNNEL, f"127.0.0.1:{server.port}", True)], events
        assert all(e.bytes_out and e.bytes_in for e in log.events()), log.events()

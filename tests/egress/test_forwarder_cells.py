"""The forwarder inside a real bubblewrap sandbox, through whole cells: many connections at once, no leftovers.

The upstream answers no request until 15 are in flight at once, so the cell passes only when
the forwarder (and the relay and tinyproxy behind it) serve connections concurrently.
"""

from __future__ import annotations

import json
import uuid

import pytest

from pytest_maka.egress import host
from pytest_maka.testing.servers import EGRESS_TOKEN, http_server

from ..conftest import Cohort, needs_bwrap
from .procs import processes_with_env

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.needs("tinyproxy", "curl")]

LOCAL = {"kind": "local", "egress_hosts": {"allowed.test": "127.0.0.1"}}
ALLOWED, REFUSED = 15, 5
#: Each forwarder process of the sandbox, as "PPid cmdline" (inside the sandbox's pid namespace).
LIST_FORWARDERS = (
    "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null) || continue; "
    f'case "$c" in "{host.PYTHON} -I -S "*|"socat TCP-LISTEN"*) '
    "echo \"$(awk '/^PPid/{print $2}' $p/status) $c\";; esac; "
    "done"
)


@pytest.mark.parametrize(
    "interpreter",
    [
        pytest.param("python", marks=pytest.mark.needs("forwarder")),
        pytest.param("socat-fallback", marks=pytest.mark.needs("socat")),
    ],
)
def test_one_sandbox_command_makes_20_requests_at_once(
    cohort: Cohort, interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if interpreter == "socat-fallback":  # no usable python in the sandbox: socat serves instead
        monkeypatch.setattr(host, "PYTHON", "/nonexistent/python3")
    marker = f"fwd-{uuid.uuid4().hex[:12]}"
    logs = "$MAKA_LOGS_DIR"
    with http_server(together=ALLOWED) as server:
        port = server.port
        curl = "curl -s -m 90 -o - -w ' %{http_code}\\n'"
        cmd = (
            f"for i in $(seq 1 {ALLOWED}); do {curl} http://allowed.test:{port}/p$i > {logs}/ok-$i.txt 2>&1 & done; "
            f"for i in $(seq 1 {REFUSED}); do {curl} http://telemetry.test:{port}/t$i > {logs}/no-$i.txt 2>&1 & done; "
            f"{LIST_FORWARDERS} > {logs}/forwarders.txt; wait"
        )
        cohort.task("t", agent_timeout=180)
        cohort.write(
            subjects=[{"name": "a", "kind": "command", "command": cmd, "set_env": {"FWD_MARK": marker}}],
            executor=LOCAL,
            policy={"egress": [f"allowed.test:{port}"]},
        )
        cohort.run().assert_outcomes(failed=1)
        assert sorted(server.paths) == sorted(f"/p{i}" for i in range(1, ALLOWED + 1)), "all answered together"
    assert processes_with_env(marker) == [], "no forwarder (nor anything else) outlives the phase"
    record = cohort.results()["t[a-r0]"]
    out = cohort.out / record["artifacts"]["agent_logs"]
    for i in range(1, ALLOWED + 1):
        assert (out / f"ok-{i}.txt").read_text() == f"{EGRESS_TOKEN} /p{i} 200\n"
    for i in range(1, REFUSED + 1):
        assert (out / f"no-{i}.txt").read_text().endswith(" 403\n")
    forwarders = (out / "forwarders.txt").read_text().splitlines()
    if interpreter == "python":  # one process for all 20 connections, adopted by the sandbox's pid 1
        assert len(forwarders) == 1 and forwarders[0].startswith(f"1 {host.PYTHON} -I -S "), forwarders
    else:
        assert forwarders and all("socat TCP-LISTEN" in f for f in forwarders), forwarders
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["connections"] == {"allowed": ALLOWED, "refused": REFUSED}
    assert agent["refused_destinations"] == {f"telemetry.test:{port}": REFUSED}
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert sorted(e["destination"] for e in events if e["allowed"]) == [f"allowed.test:{port}"] * ALLOWED
    assert all(e["bytes_in"] > 0 and e["bytes_out"] > 0 for e in events), events

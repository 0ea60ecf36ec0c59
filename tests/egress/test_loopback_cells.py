"""Whole cells on the local executor: an allowlisted loopback endpoint (a model stand-in on the
host) is tunnelled in, while the subject's own server on the sandbox's loopback stays its own."""

from __future__ import annotations

import json

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.egress import host
from pytest_maka.egress.loopback import Endpoint, endpoints, forwarder_flags
from pytest_maka.testing.servers import EGRESS_TOKEN, http_server

from ..conftest import Cohort, needs_bwrap

CELLS = [pytest.mark.sandbox, needs_bwrap, pytest.mark.needs("tinyproxy", "curl")]


def cells(fn):  # type: ignore[no-untyped-def]
    """The marks of a test that runs whole cells in bubblewrap behind the egress proxy."""
    for mark in CELLS:
        fn = mark(fn)
    return fn


LOCAL = {"kind": "local"}
#: The subject: a server of its own on the sandbox's 127.0.0.1:8765, then both by URL (proxy variables set).
OWN_PORT = 8765
SUBJECT = (
    f"python3 -m http.server {OWN_PORT} --bind 127.0.0.1 --directory $MAKA_LOGS_DIR >/dev/null 2>&1 & "
    f"i=0; until curl -s -o /dev/null http://127.0.0.1:{OWN_PORT}/; do "
    "i=$((i+1)); [ $i -lt 100 ] || break; sleep 0.05; done; "
    "echo mine > $MAKA_LOGS_DIR/own.txt; "
    f"curl -s -m 20 -w ' %{{http_code}}\\n' http://localhost:{OWN_PORT}/own.txt > $MAKA_LOGS_DIR/own-got.txt 2>&1; "
    "curl -s -m 20 -w ' %{http_code}\\n' http://127.0.0.1:MODEL/v1/models > $MAKA_LOGS_DIR/model-got.txt 2>&1; "
    "kill %1"
)


def test_only_loopback_entries_are_tunnelled_and_localhost_listens_on_both_addresses() -> None:
    allow = hostpattern.parse_all(["localhost:8000", "127.0.0.1:8000", "127.0.0.2:9", "api.test", "*.local.test:1"])
    both = ("127.0.0.1", "::1")
    assert endpoints(allow) == (
        Endpoint("127.0.0.1", 8000, both),
        Endpoint("::1", 8000, both),
        Endpoint("127.0.0.2", 9),
    )
    assert forwarder_flags(endpoints(allow), "/d") == (
        " --tunnel 127.0.0.1:8000=/d/t0.sock --tunnel [::1]:8000=/d/t1.sock --tunnel 127.0.0.2:9=/d/t2.sock"
    )


@cells
@pytest.mark.parametrize(
    "interpreter",
    [
        pytest.param("python", marks=pytest.mark.needs("forwarder")),
        pytest.param("socat-fallback", marks=pytest.mark.needs("socat")),
    ],
)
def test_subject_serves_on_its_own_loopback_while_the_model_endpoint_is_allowlisted(
    cohort: Cohort, interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if interpreter == "socat-fallback":  # no usable python for the forwarder: socat serves instead
        monkeypatch.setattr(host, "PYTHON", "/nonexistent/python3")
    with http_server() as server:
        cohort.task("t", agent_timeout=60)
        cohort.write(
            subjects=[{"name": "a", "kind": "command", "command": SUBJECT.replace("MODEL", str(server.port))}],
            executor=LOCAL,
            policy={"egress": [f"127.0.0.1:{server.port}"]},
        )
        cohort.run().assert_outcomes(failed=1)  # the task's verifier fails: the agent only talks
        assert server.paths == ["/v1/models"]
    record = cohort.results()["t[a-r0]"]
    out = cohort.out / record["artifacts"]["agent_logs"]
    assert (out / "own-got.txt").read_text() == "mine\n 200\n", "the subject's own server answered it"
    assert (out / "model-got.txt").read_text() == f"{EGRESS_TOKEN} /v1/models 200\n"
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert [(e["method"], e["destination"], e["allowed"]) for e in events] == [
        ("TUNNEL", f"127.0.0.1:{server.port}", True)
    ], events
    assert events[0]["bytes_out"] > 0 and events[0]["bytes_in"] > 0, events
    assert events[0]["statuses"] == [200], "the tunnel reads the answers' statuses"
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["connections"] == {"allowed": 1, "refused": 0}, agent


@cells
@pytest.mark.needs("forwarder")
def test_a_localhost_entry_answers_on_both_loopback_addresses(cohort: Cohort) -> None:
    """``localhost:PORT`` listed, the host's server on 127.0.0.1 only: the sandbox reaches it by
    ``localhost``, ``127.0.0.1`` and ``[::1]`` (each passed to whichever host address answers)."""
    with http_server() as server:
        port = server.port
        curls = "; ".join(
            f"curl -s -m 20 -w ' %{{http_code}}\\n' http://{h}:{port}/{n} >> $MAKA_LOGS_DIR/got.txt 2>&1"
            for h, n in (("localhost", "name"), ("127.0.0.1", "v4"), ("[::1]", "v6"))
        )
        cohort.task("t", agent_timeout=60)
        cohort.write(
            subjects=[{"name": "a", "kind": "command", "command": curls}],
            executor=LOCAL,
            policy={"egress": [f"localhost:{port}"]},
        )
        cohort.run().assert_outcomes(failed=1)
        assert sorted(server.paths) == ["/name", "/v4", "/v6"]
    record = cohort.results()["t[a-r0]"]
    got = (cohort.out / record["artifacts"]["agent_logs"] / "got.txt").read_text().splitlines()
    assert got == [f"{EGRESS_TOKEN} /{n} 200" for n in ("name", "v4", "v6")], got


@cells
def test_a_listed_loopback_port_the_proxy_uses_is_named(cohort: Cohort) -> None:
    cohort.task("t", agent_timeout=60)
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": "true"}],
        executor=LOCAL,
        policy={"egress": ["127.0.0.1:3128"]},
        retries={"infra": 0},
    )
    cohort.run()
    record = cohort.results()["t[a-r0]"]
    assert record["status"] == "infra_failure", record
    assert "loopback port 3128 is allow-listed, but the sandbox's egress proxy" in str(record["error"]), record

"""Provider failures on the Docker executor: a provider that hangs behind a TLS tunnel (CONNECT through
the egress proxy), whose only answer is the proxy's own "200 Connection established"; a provider that
rejects every key, seen in the status codes of its plain-HTTP answers by the egress proxy, or in the
agent's stderr (captured from its container)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import BY_KIND, docker_model_server, installed

pytestmark = [pytest.mark.docker, pytest.mark.agent]

#: Reads what each client sends and never answers: a TLS provider that hangs after the ClientHello.
SILENT = """
import socket, threading
srv = socket.create_server(("0.0.0.0", 443))
print("silent server on 443", flush=True)
held = []
def hold(conn):
    while conn.recv(65536):
        pass
while True:
    conn, _ = srv.accept()
    held.append(conn)
    threading.Thread(target=hold, args=(conn,), daemon=True).start()
"""


@contextmanager
def silent_tls_provider(api: Any) -> Iterator[tuple[str, str]]:
    """A silent server on port 443 in a ``python:3.11-slim`` container on an internal network of its own:
    (network name, its address). Removed afterwards."""
    tag = uuid.uuid4().hex[:8]
    name = f"maka-test-silent-{tag}"
    labels = {"io.pytest-maka.test": "silent-provider"}
    api.create_network(name, driver="bridge", internal=True, labels=labels)
    cid = None
    try:
        cid = api.create_container(
            "python:3.11-slim",
            ["python3", "-u", "-c", SILENT],
            labels=labels,
            host_config=api.create_host_config(network_mode=name),
        )["Id"]
        api.start(cid)
        for chunk in api.logs(cid, stream=True, follow=True):
            if b"silent server on 443" in chunk:
                break
        else:
            raise RuntimeError(f"the silent server did not start: {api.logs(cid)[-500:]!r}")
        yield name, api.inspect_container(cid)["NetworkSettings"]["Networks"][name]["IPAddress"]
    finally:
        if cid is not None:
            api.remove_container(cid, force=True)
        api.remove_network(name)


def test_claude_code_when_a_tls_provider_hangs_is_infra_failure_on_docker(
    cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any
) -> None:
    installed(agent_cache, "claude-code")
    with silent_tls_provider(docker_api) as (network, ip):
        cohort.task("t", agent_timeout=15)
        subject = {
            "name": "agent",
            "kind": "claude-code",
            "base_url": "https://model.test",
            "env": ["ANTHROPIC_API_KEY"],
            "cache_dir": str(agent_cache.root),
        }
        executor = {"kind": "docker", "egress_network": network, "egress_hosts": {"model.test": ip}}
        cohort.write(subjects=[subject], executor={**executor, "agent_install": "mount"}, retries={"infra": 1})
        result = cohort.run()
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], result.outlines[-20:])
    assert record["agent"]["timed_out"] is True and record["agent"]["provider_answered"] is False, record["agent"]
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]
    events = [json.loads(line) for line in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    tunnels = [e for e in events if e["phase"] == "agent" and e["destination"] == "model.test:443" and e["allowed"]]
    assert tunnels, events
    # the proxy's "200 Connection established" is not counted: the provider sent nothing back
    assert all(e["method"] == "CONNECT" and e["bytes_out"] > 0 and e["bytes_in"] == 0 for e in tunnels), tunnels
    assert record["agent"]["provider_errors"]["no answer"] >= len(tunnels), record["agent"]


@pytest.mark.parametrize(("kind", "model"), [("pi", "claude-sonnet-4-5"), ("gemini-cli", "gemini-2.5-pro")])
def test_a_preset_that_reports_no_statuses_with_every_request_rejected_is_infra_failure_on_docker(
    kind: str, model: str, cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any, tmp_path: Any
) -> None:
    """The agent says nothing of the 401s it got; the egress proxy read them from the plain-HTTP answers."""
    installed(agent_cache, kind)
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], fault=Fault("401"))
    with docker_model_server(docker_api, script, tmp_path) as server:
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=60)
        subject = {
            "name": "agent",
            "kind": kind,
            "model": model,
            "base_url": server.url,
            "env": [BY_KIND[kind].key_env],
            "cache_dir": str(agent_cache.root),
        }
        cohort.write(subjects=[subject], executor=server.executor(agent_install="mount"), retries={"infra": 2})
        result = cohort.run()
        refused = len(server.requests())
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], record["agent"], result.outlines[-20:])
    agent = record["agent"]
    assert agent["provider_answered"] is False and 1 <= agent["provider_errors"]["401"] <= refused, (agent, refused)
    assert record["error"]["message"].startswith("provider refused every request: 401 x"), record["error"]


def test_mini_swe_agent_in_docker_with_every_request_rejected_is_infra_failure(
    cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any, tmp_path: Any
) -> None:
    """mini-swe-agent reports the status only in the traceback on its stderr (docs/agents.md)."""
    installed(agent_cache, "mini-swe-agent")
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], fault=Fault("401"))
    with docker_model_server(docker_api, script, tmp_path) as model:
        cohort.task("a", agent_timeout=120)
        cohort.task("b", agent_timeout=120)
        subject = {
            "name": "mini",
            "kind": "mini-swe-agent",
            "base_url": model.url,
            "env": ["OPENAI_API_KEY"],
            "cache_dir": str(agent_cache.root),
        }
        executor = model.executor(agent_install="mount")
        cohort.write(subjects=[subject], executor=executor, retries={"infra": 2})
        result = cohort.run()
        refused = [r for r in model.requests() if r.get("method") == "POST" and r.get("wire")]
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[mini-r0]", "b[mini-r0]"], "no retry, one attempt per cell"
    first, second = attempts
    assert first["status"] == "infra_failure", (first["error"], first["agent"], result.outlines[-20:])
    assert first["agent"]["provider_errors"] == {"401": 1} and len(refused) >= 1, (first["agent"], refused)
    assert first["error"]["message"] == "provider refused every request: 401 x1 (authentication rejected)"
    assert second["error"]["message"].startswith("not run: provider refused every request: 401 x1")

"""``opencode acp`` on the local (bubblewrap) executor: the model on the host's 127.0.0.1 is an
allowlisted loopback endpoint, tunnelled into the sandbox on its own, while opencode's own server
on the sandbox's loopback stays its own (before, all loopback went to the proxy and was refused)."""

from __future__ import annotations

import json

import pytest

from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import SECRET, opencode_acp, tree_contains

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]


def test_opencode_acp_on_the_local_executor(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], final_text="Done.", input_tokens=500)
    with model_server(script) as server:
        subject = opencode_acp(agent_cache, server.url, name="opencode-acp")
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=240)
        cohort.write(subjects=[subject], policy={"egress": [f"127.0.0.1:{server.port}"]}, retries={"infra": 0})
        result = cohort.run()
        assert any("/v1/messages" in r.path for r in server.requests), "the agent reached the model server"
    record = cohort.results()["t[opencode-acp-r0]"]
    assert record["status"] == "agent_success", (record["error"], result.outlines[-30:])
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert {(e["method"], e["destination"]) for e in events if e["allowed"]} == {("TUNNEL", f"127.0.0.1:{server.port}")}
    diff = (cohort.out / record["artifacts"]["diff"]).read_text()
    assert "+ok" in diff, diff
    assert not tree_contains(cohort.out, SECRET)

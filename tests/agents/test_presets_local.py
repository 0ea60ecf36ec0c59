"""A preset on the local (bubblewrap) executor: the same cache directory, bound read-only into the sandbox;
the model on the host's 127.0.0.1 reached only through the egress proxy."""

from __future__ import annotations

import json

import pytest

from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import SECRET, installed, tree_contains

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]


def test_claude_code_on_the_local_executor(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "claude-code")
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], final_text="Done.", input_tokens=500)
    with model_server(script) as server:
        cohort.task("t", agent_timeout=180)
        subject = {
            "name": "claude",
            "kind": "claude-code",
            "base_url": server.url,
            "env": ["ANTHROPIC_API_KEY"],
            "cache_dir": str(agent_cache.root),
        }
        cohort.write(subjects=[subject], retries={"infra": 0})  # no network: the model through the egress proxy
        result = cohort.run()
        assert any("/v1/messages" in r.path for r in server.requests), "the agent reached the model server"
    record = cohort.results()["t[claude-r0]"]
    assert record["status"] == "agent_success", (record["error"], result.outlines[-20:])
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["mode"] == "allowlist" and agent["allowed"] == [f"127.0.0.1:{server.port}"], agent
    assert agent["connections"]["allowed"] >= 1, agent
    assert record["usage"]["input_tokens"] >= 500 and record["usage"]["cost_usd"] > 0
    assert any("/opt/maka/agent (ro" in m for m in record["isolation"]["mounts"]), record["isolation"]["mounts"]
    transcript = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    assert transcript["agent"]["version"] == "2.1.332" == record["agent"]["version"]
    assert not tree_contains(cohort.out, SECRET)

"""``@zed-industries/claude-code-acp`` through the ACP subject in Docker: its file writes are routed to the harness."""

from __future__ import annotations

import json

import pytest

from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort

from .conftest import SECRET, bridge_gateway, tree_contains

pytestmark = [pytest.mark.docker, pytest.mark.agent]
PACKAGE = "npm:@zed-industries/claude-code-acp@0.16.2"


def test_claude_code_acp_passes_with_its_writes_routed(cohort: Cohort, agent_cache, secret_env, docker_api) -> None:  # type: ignore[no-untyped-def]
    from pytest_maka.agents.cache import InstallError
    from pytest_maka.subjects.acp.subject import install_spec

    try:
        agent_cache.ensure(install_spec(PACKAGE))
    except InstallError as e:
        pytest.skip(f"claude-code-acp cannot be installed here: {e}")
    host = bridge_gateway()
    script = Script(
        actions=[Action.write("/app/done.txt", "ok\n")],
        final_text="Done.",
    )
    with model_server(script, host=host) as server:
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=240)
        subject = {
            "name": "claude-acp",
            "kind": "acp",
            "command": "claude-code-acp",
            "install": PACKAGE,
            "env": ["ANTHROPIC_API_KEY"],
            "set_env": {
                "ANTHROPIC_BASE_URL": f"http://{host}:{server.port}",
                "IS_SANDBOX": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
            "cache_dir": str(agent_cache.root),
        }
        cohort.write(
            subjects=[subject], executor={"kind": "docker"}, policy={"agent_network": True}, retries={"infra": 0}
        )
        result = cohort.run()
        record = cohort.results()["t[claude-acp-r0]"]
        assert record["status"] == "agent_success", (record["error"], result.outlines[-30:])
    trajectory = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert [c["arguments"].get("file_path") for c in calls] == ["/app/done.txt"], trajectory
    assert "+ok" in (cohort.out / record["artifacts"]["diff"]).read_text()
    log = (cohort.out / record["artifacts"]["agent_log"]).read_text()
    assert "1 fs/write_text_file" in log, f"the write went through the harness's client: {log}"
    # Its shell call reaches our terminal only when the model fills the Bash tool's required
    # ``timeout``, which the scripted model server does not: tests/agents/test_acp.py routes terminals.
    assert not tree_contains(cohort.out, SECRET)

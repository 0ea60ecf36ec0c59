"""``@zed-industries/claude-code-acp`` through the ACP subject in Docker, its model reached only through the
egress proxy: its file writes and its shell commands are routed to the harness and run in the same sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import SECRET, docker_model_server, tree_contains

pytestmark = [pytest.mark.docker, pytest.mark.agent]
PACKAGE = "npm:@zed-industries/claude-code-acp@0.16.2"


def _installed(agent_cache) -> None:  # type: ignore[no-untyped-def]
    from pytest_maka.subjects.acp.subject import install_spec
    from pytest_maka.subjects.install.cache import InstallError

    try:
        agent_cache.ensure(install_spec(PACKAGE))
    except InstallError as e:
        pytest.skip(f"claude-code-acp cannot be installed here: {e}")


def _subject(agent_cache, url: str, **extra: object) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {
        "name": "claude-acp",
        "kind": "acp",
        "command": "claude-code-acp",
        "install": PACKAGE,
        "env": ["ANTHROPIC_API_KEY"],
        "set_env": {"ANTHROPIC_BASE_URL": url, "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        "cache_dir": str(agent_cache.root),
        **extra,
    }


def test_claude_code_acp_routes_writes_and_shell_through_the_harness(
    cohort: Cohort, agent_cache, secret_env, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _installed(agent_cache)
    script = Script(
        actions=[Action.write("/app/done.txt", "ok\n"), Action.shell("echo routed > /app/shell.txt; echo $PWD")],
        final_text="Done.",
    )
    with docker_model_server(docker_api, script, tmp_path) as model:
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=240)
        cohort.write(subjects=[_subject(agent_cache, model.url)], executor=model.executor(), retries={"infra": 0})
        result = cohort.run()
        record = cohort.results()["t[claude-acp-r0]"]
        assert record["status"] == "agent_success", (record["error"], result.outlines[-30:])
        assert any("/v1/messages" in str(r["path"]) for r in model.requests())
    trajectory = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert [c["arguments"].get("file_path") for c in calls][:1] == ["/app/done.txt"], trajectory
    assert any("echo routed" in str(c["arguments"].get("command")) for c in calls), trajectory
    diff = (cohort.out / record["artifacts"]["diff"]).read_text()
    assert "+ok" in diff and "+routed" in diff, diff
    log = (cohort.out / record["artifacts"]["agent_log"]).read_text()
    assert "1 fs/write_text_file" in log and "1 terminal/create" in log, f"routed through the client: {log}"
    network = record["isolation"]["network"]
    assert network["agent"] == "allowlist" and network["phases"]["agent"]["allowed"] == [f"model.test:{model.port}"]
    assert not tree_contains(cohort.out, SECRET)


def test_claude_code_acp_denied_permissions_are_recorded(
    cohort: Cohort, agent_cache, secret_env, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``permissions: deny``: the agent's permission requests are refused; nothing it asked for is written."""
    _installed(agent_cache)
    script = Script(actions=[Action.shell("echo routed > /app/shell.txt")], final_text="Could not run it.")
    with docker_model_server(docker_api, script, tmp_path) as model:
        cohort.task("t", instruction="Run a command.", agent_timeout=240)
        cohort.write(
            subjects=[_subject(agent_cache, model.url, permissions="deny")],
            executor=model.executor(),
            retries={"infra": 0},
        )
        result = cohort.run()
        record = cohort.results()["t[claude-acp-r0]"]
    log = (cohort.out / record["artifacts"]["agent_log"]).read_text()
    assert "0 terminal/create" in log, (log, result.outlines[-30:])
    assert record["status"] in ("agent_failure", "policy_denied"), record
    assert record["passed"] is False
    assert "maka acp: permission denied: " in log, log
    assert not (cohort.out / record["artifacts"]["diff"]).read_text().count("+routed")


def test_claude_code_acp_with_every_request_rejected_is_infra_failure_named_from_the_proxys_statuses(
    cohort: Cohort, agent_cache, secret_env, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """claude-code-acp retries a 401 in silence (nothing of it on the ACP stream): the egress proxy saw the
    provider's answers, so the attempt is infra_failure, named, not retried."""
    from pytest_maka.testing.model_faults import Fault

    _installed(agent_cache)
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], fault=Fault("401"))
    with docker_model_server(docker_api, script, tmp_path) as model:
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=40)
        cohort.write(subjects=[_subject(agent_cache, model.url)], executor=model.executor(), retries={"infra": 2})
        result = cohort.run()
        rejected = [r for r in model.requests() if "/v1/messages" in str(r["path"])]
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], record["agent"], result.outlines[-20:])
    agent = record["agent"]
    assert agent["provider_answered"] is False and agent["provider_errors"]["401"] >= 1, agent
    assert agent["provider_errors"]["401"] <= len(rejected), (agent, len(rejected))  # each one a refused request
    assert record["error"]["message"].startswith("provider refused every request: 401 x"), record["error"]
    assert record["error"]["retryable"] is False
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert any(e["allowed"] and 401 in (e["statuses"] or []) for e in events), events

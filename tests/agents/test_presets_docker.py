"""Every preset, installed for real, run through pytest in Docker against the scripted model server.

The cell has no network of its own (``agent_network`` off): the agent reaches the model only
through the per-attempt egress proxy, whose allowlist is the preset's ``base_url`` host.
"""

from __future__ import annotations

import json

import pytest

from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import BY_KIND, SECRET, docker_model_server, installed, tree_contains

pytestmark = [pytest.mark.docker, pytest.mark.agent]

MODELS = {
    "claude-code": "claude-sonnet-4-5",
    "codex": "gpt-5-codex",
    "gemini-cli": "gemini-2.5-pro",
    "opencode": "anthropic/claude-sonnet-4-5",
    "qwen-code": "qwen3-coder-plus",
    "pi": "claude-sonnet-4-5",
    "aider": "gpt-4o",
    "mini-swe-agent": "openai/gpt-4o",
}


MODEL_PATHS = ("/messages", "/responses", "/chat/completions", "GenerateContent", "generateContent")
#: A host not on the allowlist, contacted by the agent's shell tool through the proxy.
DENIED = "telemetry.test"
PHONE_HOME = (
    f"python3 -c \"import urllib.request as u; u.urlopen('http://{DENIED}/ping', timeout=10)\" 2>/dev/null; true"
)


def _script(kind: str) -> Script:
    actions = [Action.write("/app/done.txt", "ok\n")]
    if kind != "aider":  # aider runs no tools
        actions.append(Action.shell('echo "key is $' + BY_KIND[kind].key_env + '"; ' + PHONE_HOME))
    if kind == "mini-swe-agent":  # it ends by running exactly this command
        actions.append(Action.shell("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"))
    return Script(actions=actions, final_text="Done: wrote /app/done.txt.", input_tokens=1000, output_tokens=100)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_preset_cell_passes_with_usage_cost_trajectory_and_no_secret(
    kind: str,
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    docker_api,  # type: ignore[no-untyped-def]
    tmp_path,
) -> None:
    installed(agent_cache, kind)
    with docker_model_server(docker_api, _script(kind), tmp_path) as model:
        cohort.task("t", instruction="Create /app/done.txt containing ok.", agent_timeout=240)
        subject = {
            "name": "agent",
            "kind": kind,
            "model": MODELS[kind],
            "base_url": model.url,
            "env": [BY_KIND[kind].key_env],
            "cache_dir": str(agent_cache.root),
        }
        # claude-code runs from an image layer (the default; built once per environment, reused by later
        # runs); the others from the read-only mount, so a cold engine does not build eight layers in CI
        install = "layer" if kind == "claude-code" else "mount"
        cohort.write(subjects=[subject], executor=model.executor(agent_install=install), retries={"infra": 0})
        result = cohort.run()
        record = cohort.results()["t[agent-r0]"]
        assert record["status"] == "agent_success", (record["error"], result.outlines[-30:])
        paths = [str(r["path"]) for r in model.requests()]
        assert any(p in path for path in paths for p in MODEL_PATHS), f"the agent talked to the model server: {paths}"
    assert any(
        f"/opt/maka/agent ({'image layer' if install == 'layer' else 'ro'}" in m for m in record["isolation"]["mounts"]
    )
    network = record["isolation"]["network"]
    agent = network["phases"]["agent"]
    assert network["agent"] == "allowlist" and agent["allowed"] == [f"model.test:{model.port}"], network
    events = [json.loads(line) for line in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    assert {e["destination"] for e in events if e["allowed"]} == {f"model.test:{model.port}"}, events
    assert agent["connections"]["allowed"] >= 1, agent
    if kind != "aider":
        assert f"{DENIED}:80" in agent["refused_destinations"], agent
    usage = record["usage"]
    if kind == "aider":  # aider reports its own token estimate, not the provider's figure
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, usage
        # exact, from its event log, not the stdout's rounded "2.4k"
        log = cohort.out / record["artifacts"]["dir"] / "agent" / "aider-events.jsonl"
        sent = [json.loads(line)["properties"] for line in log.read_text().splitlines() if '"message_send"' in line]
        assert sent and usage["input_tokens"] == sum(p["prompt_tokens"] for p in sent), (usage, sent)
    else:
        assert usage["input_tokens"] and usage["input_tokens"] >= 1000, usage
        assert usage["output_tokens"] and usage["output_tokens"] >= 100, usage
    assert usage["cost_usd"] is not None and usage["cost_usd"] > 0, usage
    trajectory = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    pinned = BY_KIND[kind].version  # the agent's own report where it gives one, else the installed pin
    assert record["agent"]["version"] == pinned == trajectory["agent"]["version"], (record["agent"], pinned)
    calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert calls, f"the trajectory has the agent's tool call: {trajectory}"
    assert record["agent"]["telemetry"]["tool_calls"] >= 1
    assert record["agent"]["stop_reason"] == "end_turn", record["agent"]
    assert record["subject_claim"]["authoritative"] is False
    leaks = tree_contains(cohort.out, SECRET)
    assert not leaks, f"the key reached {leaks}"
    if kind != "aider":  # the agent echoed its key: the echo is there, scrubbed
        assert tree_contains(cohort.out, "key is [REDACTED]"), "the shell call's output was kept, with the key scrubbed"

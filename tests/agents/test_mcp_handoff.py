"""A Harbor task's MCP servers and skills reach the agents that take them, and every record says what was handed.

The MCP server is real (tests/agents/mcp_marker_server.py, MCP JSON-RPC over stdio): it leaves
``/app/mcp-started`` when an agent starts it and ``/app/mcp-called`` when its tool runs, and
the task's own verifier checks those files. The model is the scripted server; a subclass
makes its first reply a call of the MCP tool, under whatever name the agent gave it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.testing.model_server import Action, Script, ScriptedModel, model_server
from pytest_maka.testing.model_wire import Reply, ToolCall
from tests.conftest import Cohort, needs_bwrap

from .conftest import SECRET, installed, mcp_servers_toml, tree_contains

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]

SERVER = Path(__file__).with_name("mcp_marker_server.py").read_text()
TOKEN = "mcp-token-7f3a9c51e2"
SKILL = "---\nname: maka-demo-skill\ndescription: Use maka-demo-skill to greet in Klingon.\n---\nSay nuqneH.\n"
TEST_SH = (
    "mkdir -p /logs/verifier; "
    "if [ -s /app/mcp-started ] && [ -s /app/mcp-called ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


class CallsMcpFirst(ScriptedModel):
    """First reply: a call of the MCP tool ``touch_marker`` (as the agent named it); then the script."""

    def reply(self, wire: Any, body: dict[str, Any]) -> Reply:
        tools = wire.tools(body)
        mcp = next((name for name in tools if name.endswith("touch_marker")), None)
        if mcp and wire.tool_results(body) == 0:
            return Reply(text="", tool_call=ToolCall("call_mcp", mcp, {"note": "from the model"}), usage=(200, 20, 0))
        return super().reply(wire, body)


def mcp_task(cohort: Cohort, name: str, *, header_var: str = "MCP_TOKEN") -> None:
    extra = mcp_servers_toml("marker", '["/app/mcp_marker_server.py", "/app"]', "remote", header_var=header_var)
    cohort.task(
        name,
        agent_timeout=240,
        test=TEST_SH,
        extra_toml=extra,
        workspace={"mcp_marker_server.py": SERVER, "skills/maka-demo/SKILL.md": SKILL},
    )


def run_preset(cohort: Cohort, agent_cache: Any, kind: str, *, call_tool: bool) -> tuple[dict[str, Any], Any]:
    installed(agent_cache, kind)
    # action 0 is the MCP call (made by CallsMcpFirst); then a plain file write, then the final text
    script = Script(actions=[Action.shell("true"), Action.write("/app/done.txt", "ok\n")], final_text="Done.")
    with model_server(script) as server:
        if call_tool:
            server.model = CallsMcpFirst(script)
        mcp_task(cohort, "t")
        subject = {
            "name": "agent",
            "kind": kind,
            "base_url": server.url,
            "env": [BY_KEY[kind], "MCP_TOKEN"],
            "cache_dir": str(agent_cache.root),
        }
        if kind == "claude-code":  # else it defers MCP tools behind its ToolSearch tool
            subject["set_env"] = {"ENABLE_TOOL_SEARCH": "false"}
        if kind == "opencode":
            subject["model"] = "anthropic/claude-sonnet-4-5"
        cohort.write(subjects=[subject], retries={"infra": 0})
        result = cohort.run()
        bodies = [json.dumps(r.body) for r in server.requests if r.body]
    record = cohort.results()["t[agent-r0]"]
    return record, (result, bodies)


BY_KEY = {
    "claude-code": "ANTHROPIC_API_KEY",
    "codex": "OPENAI_API_KEY",
    "gemini-cli": "GEMINI_API_KEY",
    "qwen-code": "OPENAI_API_KEY",
    "opencode": "ANTHROPIC_API_KEY",
}


@pytest.fixture
def mcp_env(secret_env: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MCP_TOKEN", TOKEN)
    return TOKEN


@pytest.mark.parametrize("kind", ["claude-code", "gemini-cli"])
def test_the_agent_starts_the_tasks_mcp_server_and_calls_its_tool(
    cohort: Cohort, agent_cache: Any, mcp_env: str, kind: str
) -> None:
    record, (result, bodies) = run_preset(cohort, agent_cache, kind, call_tool=True)
    workspace = (cohort.out / record["artifacts"]["diff"]).read_text()
    assert "mcp-started" in workspace, (record["agent"], result.outlines[-20:])
    assert "mcp-called" in workspace and "from the model" in workspace, record["agent"]
    assert record["status"] == "agent_success", (record["error"], record["agent"])
    servers = {m["name"]: m for m in record["agent"]["mcp_servers"]}
    assert servers["marker"] == {"name": "marker", "transport": "stdio", "handed": True}
    assert servers["remote"]["handed"] is True and servers["remote"]["headers"] == ["Authorization"]
    skills = record["agent"]["skills"]
    assert skills["handed"] is True and skills["names"] == ["maka-demo"], skills
    assert any("maka-demo-skill" in b for b in bodies), "the agent told its model about the task's skill"
    assert not tree_contains(cohort.out, TOKEN), "the header's secret is scrubbed from every artifact"
    assert not tree_contains(cohort.out, SECRET)


@pytest.mark.parametrize("kind", ["codex", "qwen-code", "opencode"])
def test_the_agent_starts_the_tasks_mcp_server(cohort: Cohort, agent_cache: Any, mcp_env: str, kind: str) -> None:
    record, (result, _bodies) = run_preset(cohort, agent_cache, kind, call_tool=False)
    workspace = (cohort.out / record["artifacts"]["diff"]).read_text()
    assert "mcp-started" in workspace, (record["agent"], result.outlines[-20:])
    servers = {m["name"]: m for m in record["agent"]["mcp_servers"]}
    assert servers["marker"]["handed"] is True
    assert record["agent"]["skills"]["handed"] is True
    assert not tree_contains(cohort.out, TOKEN)

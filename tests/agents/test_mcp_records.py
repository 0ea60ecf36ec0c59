"""What a subject was handed is on every record: ACP sessions get the servers the agent can take; a subject
that takes none says so with a reason; a header's secret never reaches a record or an artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cohort, needs_bwrap

from .conftest import mcp_servers_toml, tree_contains

pytestmark = [pytest.mark.sandbox, needs_bwrap]
AGENT = (Path(__file__).parent / "fake_acp_agent.py").read_text()
TOKEN = "hdr-secret-41d2e8b0a7"
SERVERS = mcp_servers_toml("local-tool", '["/app/server.py", "--flag"]', "web", sse=True)
SKILL = "---\nname: demo\ndescription: a demo skill\n---\nbody\n"


def _acp(cohort: Cohort, monkeypatch: pytest.MonkeyPatch, *, http: bool, env: list[str]) -> dict:
    monkeypatch.setenv("MCP_TOKEN", TOKEN)
    cohort.task("t", workspace={"agent.py": AGENT, "skills/demo/SKILL.md": SKILL}, extra_toml=SERVERS, agent_timeout=60)
    set_env = {"FAKE_ACP_MODE": "work", **({"FAKE_ACP_MCP_HTTP": "1"} if http else {})}
    subject = {
        "name": "acp-agent",
        "kind": "acp",
        "command": "python3 agent.py",
        "set_env": set_env,
        "env": env,
        "skills_to": ["~/.claude/skills", "/app/.agents/skills"],
    }
    cohort.write(subjects=[subject], retries={"infra": 0})
    cohort.run()
    return cohort.results()["t[acp-agent-r0]"]


def test_an_acp_session_gets_stdio_and_advertised_http_servers_with_headers(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _acp(cohort, monkeypatch, http=True, env=["MCP_TOKEN"])
    assert record["status"] == "agent_success", record["error"]
    servers = {m["name"]: m for m in record["agent"]["mcp_servers"]}
    assert servers["local-tool"]["handed"] is True and servers["web"]["handed"] is True
    assert servers["events"] == {
        "name": "events",
        "transport": "sse",
        "handed": False,
        "reason": "the agent does not advertise mcpCapabilities.sse",
    }
    diff = (cohort.out / record["artifacts"]["diff"]).read_text()
    line = next(x for x in diff.splitlines() if x.startswith("+[{"))
    got = {s["name"]: s for s in json.loads(line[1:])}
    assert got["local-tool"] == {
        "name": "local-tool",
        "command": "python3",
        "args": ["/app/server.py", "--flag"],
        "env": [],
    }
    assert got["web"]["type"] == "http" and got["web"]["url"] == "http://127.0.0.1:9/mcp"
    assert got["web"]["headers"][0]["name"] == "Authorization", "the header reached the agent (its value is scrubbed)"
    assert "events" not in got
    skills = record["agent"]["skills"]
    assert skills["handed"] is True and skills["names"] == ["demo"]
    assert skills["to"] == ["/logs/agent/home/.claude/skills", "/app/.agents/skills"]
    assert "+name: demo" in diff, "the skill was copied where the agent reads it"
    assert not tree_contains(cohort.out, TOKEN), "the resolved header value is a secret: scrubbed everywhere"


def test_http_servers_are_withheld_unless_advertised_and_a_missing_header_variable_is_named(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _acp(cohort, monkeypatch, http=False, env=[])
    servers = {m["name"]: m for m in record["agent"]["mcp_servers"]}
    assert servers["local-tool"]["handed"] is True
    assert servers["web"]["handed"] is False
    assert "MCP_TOKEN" in servers["web"]["reason"] and "env:" in servers["web"]["reason"], servers["web"]
    assert servers["events"]["handed"] is False


def test_a_subject_that_takes_no_mcp_says_so_on_every_record(cohort: Cohort) -> None:
    cohort.task("t", workspace={"skills/demo/SKILL.md": SKILL}, extra_toml=SERVERS)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run()
    agent = cohort.results()["t[oracle-r0]"]["agent"]
    assert [m["name"] for m in agent["mcp_servers"]] == ["local-tool", "web", "events"]
    assert all(m["handed"] is False and "'oracle' takes no MCP" in m["reason"] for m in agent["mcp_servers"])
    assert agent["skills"]["handed"] is False and agent["skills"]["dir"] == "/app/skills"


def test_an_agent_that_never_started_was_handed_nothing(cohort: Cohort) -> None:
    """The hand-off travels with the subject's result: an ACP agent whose program is missing
    is recorded with every server not handed, never as handed beside a run that did not happen."""
    cohort.task("t", workspace={"skills/demo/SKILL.md": SKILL}, extra_toml=SERVERS, agent_timeout=30)
    subject = {"name": "gone", "kind": "acp", "command": "python3 no-such-agent.py"}
    cohort.write(subjects=[subject], retries={"infra": 0})
    cohort.run()
    agent = cohort.results()["t[gone-r0]"]["agent"]
    assert [m["name"] for m in agent["mcp_servers"]] == ["local-tool", "web", "events"], agent
    assert not any(m["handed"] for m in agent["mcp_servers"]), agent["mcp_servers"]

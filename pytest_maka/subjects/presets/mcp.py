"""How each agent CLI takes a task's MCP servers: the config it reads, in its own format.

Checked on the installed CLIs (``codex mcp add``, ``gemini mcp add``, ``qwen mcp add`` wrote
these shapes; ``claude --help`` documents ``--mcp-config`` with ``{"mcpServers": ...}``):

    claude-code  --mcp-config FILE   {"mcpServers": {N: {type: stdio, command, args} | {type: http|sse, url, headers}}}
    codex        ~/.codex/config.toml  [mcp_servers.N] command, args | url, http_headers  (no SSE)
    gemini-cli   ~/.gemini/settings.json  mcpServers.N {command, args} | {url, type: sse|http, headers}
    qwen-code    ~/.qwen/settings.json   mcpServers.N {command, args} | {url} (sse) | {httpUrl} (http), headers
    opencode     ~/.config/opencode/opencode.json  mcp.N {type: local, command: [..]} | {type: remote, url, headers}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.task_parts import McpServer

#: One server with its headers resolved -> the agent's entry for it.
Entry = Callable[[McpServer, dict[str, str]], dict[str, Any]]


@dataclass(frozen=True)
class McpFormat:
    """Where an agent reads MCP servers, which transports it takes, and how one entry looks."""

    path: str  # relative to the agent's $HOME
    key: tuple[str, ...]  # where the servers table sits in that file
    entry: Entry
    transports: frozenset[str] = frozenset({"stdio", "sse", "streamable-http"})
    #: Flags that make the agent read ``path`` (the file's sandbox path is filled in).
    flags: Callable[[str], list[str]] = lambda path: []
    toml: bool = False


@dataclass
class McpPlan:
    """The files (JSON documents merged into what the preset writes, or text) and flags for one run."""

    files: dict[str, Any] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)


def _claude(s: McpServer, headers: dict[str, str]) -> dict[str, Any]:
    if s.transport == "stdio":
        return {"type": "stdio", "command": s.command, "args": list(s.args)}
    kind = "http" if s.transport == "streamable-http" else "sse"
    return {"type": kind, "url": s.url, **({"headers": headers} if headers else {})}


def _codex(s: McpServer, headers: dict[str, str]) -> dict[str, Any]:
    if s.transport == "stdio":
        return {"command": s.command, "args": list(s.args)}
    return {"url": s.url, **({"http_headers": headers} if headers else {})}


def _gemini(s: McpServer, headers: dict[str, str]) -> dict[str, Any]:
    if s.transport == "stdio":
        return {"command": s.command, "args": list(s.args)}
    kind = "http" if s.transport == "streamable-http" else "sse"
    return {"url": s.url, "type": kind, **({"headers": headers} if headers else {})}


def _qwen(s: McpServer, headers: dict[str, str]) -> dict[str, Any]:
    if s.transport == "stdio":
        return {"command": s.command, "args": list(s.args)}
    url_key = "httpUrl" if s.transport == "streamable-http" else "url"
    return {url_key: s.url, **({"headers": headers} if headers else {})}


def _opencode(s: McpServer, headers: dict[str, str]) -> dict[str, Any]:
    if s.transport == "stdio":
        return {"type": "local", "command": [s.command, *s.args], "enabled": True}
    remote = {"type": "remote", "url": s.url, "enabled": True, "oauth": False}
    return {**remote, **({"headers": headers} if headers else {})}


CLAUDE = McpFormat(".maka/mcp.json", ("mcpServers",), _claude, flags=lambda path: ["--mcp-config", path])
CODEX = McpFormat(".codex/config.toml", ("mcp_servers",), _codex, frozenset({"stdio", "streamable-http"}), toml=True)
GEMINI = McpFormat(".gemini/settings.json", ("mcpServers",), _gemini)
QWEN = McpFormat(".qwen/settings.json", ("mcpServers",), _qwen)
OPENCODE = McpFormat(".config/opencode/opencode.json", ("mcp",), _opencode, frozenset({"stdio", "streamable-http"}))


def plan(fmt: McpFormat, servers: list[tuple[McpServer, dict[str, str]]], home: str) -> McpPlan:
    """The config for ``servers`` (each already accepted, with its resolved headers)."""
    if not servers:
        return McpPlan()
    table = {s.name: fmt.entry(s, headers) for s, headers in servers}
    doc: dict[str, Any] = table
    for key in reversed(fmt.key):
        doc = {key: doc}
    content: Any = toml_tables(doc) if fmt.toml else doc
    return McpPlan(files={fmt.path: content}, args=fmt.flags(f"{home}/{fmt.path}"))


def merge_json(existing: str | None, extra: dict[str, Any]) -> str:
    """``extra`` merged (deeply) into the JSON document ``existing``."""
    base = json.loads(existing) if existing else {}

    def into(a: dict[str, Any], b: dict[str, Any]) -> None:
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                into(a[k], v)
            else:
                a[k] = v

    into(base, extra)
    return json.dumps(base)


def toml_tables(doc: dict[str, Any]) -> str:
    """A TOML document of ``{table: {name: {key: str | list[str] | {str: str}}}}`` (JSON strings are TOML strings)."""
    lines: list[str] = []
    for table, entries in doc.items():
        for name, entry in entries.items():
            lines.append(f"[{table}.{json.dumps(name)}]")
            for key, value in entry.items():
                if isinstance(value, dict):
                    inner = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                    lines.append(f"{key} = {{ {inner} }}")
                else:
                    lines.append(f"{key} = {json.dumps(value)}")
            lines.append("")
    return "\n".join(lines)

"""What a subject is handed from the task beside the instruction (MCP servers, skills), and the record of it.

Every declared MCP server and the skills directory get one entry on the attempt's record,
``agent.mcp_servers: [{name, transport, handed, reason?}]`` and ``agent.skills: {dir, handed,
to?, names?, reason?}``: a subject that cannot take one says why, never silently. Header
values are never recorded (only their names); a ``${VAR}`` in a header is filled from the
variables the subject was given by name, so the value is one of its secrets and is scrubbed
from every artifact.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.task_parts import McpServer

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SKILLS_TIMEOUT_SEC = 60.0


@dataclass
class Handoff:
    """One subject run's hand-off facts (merged into ``record["agent"]``)."""

    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    skills: dict[str, Any] | None = None

    def mcp(self, server: McpServer, handed: bool, reason: str | None = None) -> None:
        entry: dict[str, Any] = {"name": server.name, "transport": server.transport, "handed": handed}
        if server.headers:
            entry["headers"] = sorted(server.headers)
        if reason:
            entry["reason"] = reason
        self.mcp_servers.append(entry)

    def refuse_all(self, servers: tuple[McpServer, ...], reason: str) -> None:
        for server in servers:
            self.mcp(server, False, reason)

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.mcp_servers:
            out["mcp_servers"] = self.mcp_servers
        if self.skills is not None:
            out["skills"] = self.skills
        return out


def resolve_headers(server: McpServer, env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The headers with every ``${VAR}`` filled from ``env``; or a reason naming a variable not given."""
    out = {}
    for name, value in server.headers.items():
        for var in _VAR.findall(value):
            if var not in env:
                return {}, f"header {name} needs ${{{var}}}: list {var} under the subject's env:"
        out[name] = _VAR.sub(lambda m: env[m[1]], value)
    return out, None


def skills_command(source: str, destinations: list[str]) -> str:
    """Copy the contents of ``source`` (a directory in the environment) into each destination; list its entries."""
    src = shlex.quote(source)
    copies = " && ".join(f"mkdir -p {shlex.quote(d)} && cp -R {src}/. {shlex.quote(d)}/" for d in destinations)
    missing = shlex.quote(f"maka: no directory {source} in the environment")
    return f"[ -d {src} ] || {{ echo {missing} >&2; exit 3; }}; {copies} && ls -1A {src}"


def hand_skills(sandbox: Any, ctx: Any, source: str, destinations: list[str], cwd: str) -> dict[str, Any]:
    """Run the copy inside the sandbox (as the agent phase's user, before the agent) and say what happened."""
    if not destinations:
        return {"dir": source, "handed": False, "reason": "this subject reads no skills directory"}
    out, err = ctx.stdout_path.with_name("skills.stdout.txt"), ctx.stdout_path.with_name("skills.stderr.txt")
    result = ctx.run(
        sandbox,
        skills_command(source, destinations),
        cwd=cwd,
        timeout_sec=SKILLS_TIMEOUT_SEC,
        stdout_path=out,
        stderr_path=err,
        network=False,
    )
    if result.exit_code != 0:
        why = _tail(err) or f"the copy exited {result.exit_code}" + (" (timed out)" if result.timed_out else "")
        return {"dir": source, "handed": False, "reason": why}
    names = [n for n in _tail(out, 65536).splitlines() if n]
    return {"dir": source, "handed": True, "to": destinations, "names": names[:100]}


def _tail(path: Path, limit: int = 400) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[-limit:]
    except OSError:
        return ""

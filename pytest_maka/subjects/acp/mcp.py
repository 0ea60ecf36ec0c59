"""The task's MCP servers as ``session/new`` parameters: stdio always, http and sse only when advertised."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.task_parts import McpServer
from ..handoff import Handoff, resolve_headers


def mcp_servers(servers: tuple[McpServer, ...], init: Any, given: Mapping[str, str], handoff: Handoff) -> list[Any]:
    """What to pass to ``new_session(mcp_servers=...)``; each server noted in ``handoff``."""
    from acp.schema import HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer

    caps = getattr(getattr(init, "agent_capabilities", None), "mcp_capabilities", None)
    out: list[Any] = []
    for server in servers:
        headers, missing = resolve_headers(server, given)
        wire = [HttpHeader(name=k, value=v) for k, v in headers.items()]
        if missing:
            handoff.mcp(server, False, missing)
        elif server.transport == "stdio":
            out.append(McpServerStdio(name=server.name, command=server.command or "", args=list(server.args), env=[]))
            handoff.mcp(server, True)
        elif server.transport == "streamable-http" and getattr(caps, "http", False):
            out.append(HttpMcpServer(type="http", name=server.name, url=server.url or "", headers=wire))
            handoff.mcp(server, True)
        elif server.transport == "sse" and getattr(caps, "sse", False):
            out.append(SseMcpServer(type="sse", name=server.name, url=server.url or "", headers=wire))
            handoff.mcp(server, True)
        else:
            kind = "http" if server.transport == "streamable-http" else "sse"
            handoff.mcp(server, False, f"the agent does not advertise mcpCapabilities.{kind}")
    return out

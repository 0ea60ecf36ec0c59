"""A tiny MCP server over stdio (newline-delimited JSON-RPC), for tests: it leaves marker files.

python3 mcp_marker_server.py DIR    # writes DIR/mcp-started at start, DIR/mcp-called when its tool runs
"""

import json
import os
import sys

DIR = sys.argv[1] if len(sys.argv) > 1 else "."
TOOL = {
    "name": "touch_marker",
    "description": "Record that the MCP tool was called.",
    "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}}},
}


def mark(name: str, text: str) -> None:
    with open(os.path.join(DIR, name), "a", encoding="utf-8") as f:
        f.write(text + "\n")


def answer(request: dict) -> dict | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return None  # a notification
    if method == "initialize":
        version = (request.get("params") or {}).get("protocolVersion", "2025-06-18")
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "marker", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        mark("mcp-called", json.dumps((request.get("params") or {}).get("arguments") or {}))
        result = {"content": [{"type": "text", "text": "marker written"}], "isError": False}
    elif method in ("ping", "resources/list", "prompts/list"):
        result = {"ping": {}, "resources/list": {"resources": []}, "prompts/list": {"prompts": []}}[method]
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    mark("mcp-started", str(os.getpid()))
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        reply = answer(request)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()

"""A tiny ACP agent (stdlib only) for testing the harness's client: JSON-RPC lines over stdio.

FAKE_ACP_MODE: work (write a file, run a terminal, end the turn), deny (ask permission; on a
rejection stop with "refusal"), budget (report a cost, then wait to be cancelled), hang
(never answer the prompt, ignore cancellation), cancelled (write the file, then stop the turn as
"cancelled"), meta (a call announced only by tool_call_update, tokens in the response's _meta as
gemini nests them). FAKE_ACP_MCP_HTTP=1 advertises http MCP servers; the session's mcpServers land in
$MAKA_WORKDIR/acp-mcp.json.
"""

import json
import os
import sys

MODE = os.environ.get("FAKE_ACP_MODE", "work")
WORKDIR = os.environ.get("MAKA_WORKDIR", "/app")
_next = [100]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def request(method, params):
    _next[0] += 1
    send({"jsonrpc": "2.0", "id": _next[0], "method": method, "params": params})
    while True:
        message = read()
        if message.get("id") == _next[0] and "method" not in message:
            return message.get("result"), message.get("error")


def update(session, body):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": body}})


def prompt(msg_id, session):
    if MODE == "work":
        update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": "Write done.txt",
                "kind": "edit",
                "status": "pending",
                "rawInput": {"path": f"{WORKDIR}/done.txt", "content": "ok"},
            },
        )
        _, err = request("fs/write_text_file", {"sessionId": session, "path": f"{WORKDIR}/done.txt", "content": "ok\n"})
        back, _ = request("fs/read_text_file", {"sessionId": session, "path": f"{WORKDIR}/done.txt"})
        update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t1",
                "status": "completed",
                "rawOutput": {"error": err, "read_back": back},
            },
        )
        update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t2",
                "title": "Run tests",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": "pytest -q"},
            },
        )
        term, _ = request(
            "terminal/create",
            {"sessionId": session, "command": "sh", "args": ["-c", "echo ran > ran.txt; echo terminal-out"]},
        )
        tid = term["terminalId"]
        exited, _ = request("terminal/wait_for_exit", {"sessionId": session, "terminalId": tid})
        out, _ = request("terminal/output", {"sessionId": session, "terminalId": tid})
        request("terminal/release", {"sessionId": session, "terminalId": tid})
        update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t2",
                "status": "completed",
                "rawOutput": {"exit": exited, "output": out["output"]},
            },
        )
        update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "All done."}})
        usage = {"inputTokens": 300, "outputTokens": 40, "totalTokens": 340}
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "end_turn", "usage": usage}})
    elif MODE == "deny":
        options = [
            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"},
        ]
        result, _ = request(
            "session/request_permission",
            {
                "sessionId": session,
                "options": options,
                "toolCall": {"toolCallId": "t1", "title": "rm -rf /app", "status": "pending"},
            },
        )
        chosen = (result or {}).get("outcome", {}).get("optionId")
        if chosen == "yes":
            request("fs/write_text_file", {"sessionId": session, "path": f"{WORKDIR}/done.txt", "content": "ok\n"})
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "end_turn"}})
        else:
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "refusal"}})
    elif MODE == "budget":
        update(
            session,
            {"sessionUpdate": "usage_update", "used": 1000, "size": 200000, "cost": {"amount": 5.0, "currency": "USD"}},
        )
        while True:
            message = read()
            if message.get("method") == "session/cancel":
                send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "cancelled"}})
                return
    elif MODE == "cancelled":  # cancelled by its own side (a user in its UI, a shutdown), with a file written
        request("fs/write_text_file", {"sessionId": session, "path": f"{WORKDIR}/done.txt", "content": "ok\n"})
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "cancelled"}})
    elif MODE == "meta":
        call = {"sessionUpdate": "tool_call_update", "toolCallId": "t3", "status": "in_progress"}
        update(session, {**call, "title": "Write done.txt", "kind": "edit", "rawInput": {"path": "done.txt"}})
        request("fs/write_text_file", {"sessionId": session, "path": f"{WORKDIR}/done.txt", "content": "ok\n"})
        update(session, {**call, "status": "completed", "rawOutput": "written"})
        meta = {"quota": {"token_count": {"input_tokens": 70, "output_tokens": 9}, "model_usage": []}}
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "end_turn", "_meta": meta}})
    elif MODE == "hang":
        while True:
            read()


def main():
    while True:
        message = read()
        method, msg_id = message.get("method"), message.get("id")
        if method == "initialize":
            caps = {"mcpCapabilities": {"http": True}} if os.environ.get("FAKE_ACP_MCP_HTTP") else {}
            info = {"name": "fake-acp-agent", "version": "0.0.7"}
            result = {"protocolVersion": 1, "agentCapabilities": caps, "agentInfo": info}
            send({"jsonrpc": "2.0", "id": msg_id, "result": result})
        elif method == "session/new":
            if message["params"].get("mcpServers"):  # what it was handed, for the test to read
                with open(os.path.join(WORKDIR, "acp-mcp.json"), "w") as f:
                    json.dump(message["params"]["mcpServers"], f)
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"sessionId": "s1"}})
        elif method == "session/prompt":
            prompt(msg_id, message["params"]["sessionId"])


if __name__ == "__main__":
    main()

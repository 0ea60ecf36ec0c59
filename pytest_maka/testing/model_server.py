"""A scripted model provider on 127.0.0.1 that speaks four real wire protocols.

For testing agent subjects without a paid API: point an agent's base URL here and it runs a
whole turn (a tool call that writes a file, then a final message) against a server that
answers the way its provider does.

    Anthropic Messages       POST /v1/messages (SSE stream or JSON), /v1/messages/count_tokens
    OpenAI Chat Completions  POST /v1/chat/completions (streamed chunks + usage chunk, or JSON)
    OpenAI Responses         POST /v1/responses (streamed events)
    Gemini                   POST /v1beta/models/M:streamGenerateContent?alt=sse, :generateContent

Replies follow what the conversation holds, never a request count (agents send side
requests for titles and token counts): with N tool results so far, the reply is the script's
action N as a call to the agent's own write or shell tool, found from the tools' JSON
schemas; once every action has a result, the final text (or, with ``repeat``, action 0 again: an
agent that never stops, for budgets and timeouts). A request that offers no tools gets
the final text, or an aider-style SEARCH/REPLACE block when its prompt asks for one.

    python -m pytest_maka.testing.model_server --port 4000 --write /app/hello.txt=hi

``Script.fault`` (``--fault KIND --fault-every K``) makes it a provider that fails: see model_faults.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .model_faults import KINDS, Fault, FaultPlan, error_body
from .model_wire import WIRES, Reply, ToolCall, Wire

PATH_KEYS = ("file_path", "path", "filePath", "absolute_path", "filename")
CONTENT_KEYS = ("content", "contents", "text", "file_text")
COMMAND_KEYS = ("command", "cmd", "commands")


@dataclass(frozen=True)
class Action:
    """One step the scripted model asks the agent to take: write a file, or run a command."""

    path: str | None = None
    content: str = ""
    command: str | None = None

    @staticmethod
    def write(path: str, content: str) -> Action:
        return Action(path=path, content=content)

    @staticmethod
    def shell(command: str) -> Action:
        return Action(command=command)

    def as_command(self) -> str:
        if self.command is not None:
            return self.command
        return f"printf %s {shlex.quote(self.content)} > {shlex.quote(str(self.path))}"


@dataclass
class Script:
    """What the model does: these actions in order, then ``final_text``; usage per reply."""

    actions: list[Action] = field(default_factory=list)
    final_text: str = "Done: the file is written."
    input_tokens: int = 120
    output_tokens: int = 30
    cache_read_tokens: int = 0
    #: Loop: once every action has a result, start the actions over, forever (a runaway agent).
    repeat: bool = False
    #: Seconds before each reply, as a real provider takes to answer (0: at once).
    reply_delay_sec: float = 0.0
    #: How the provider fails instead of answering (None: it never does).
    fault: Fault | None = None


@dataclass
class SeenRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    wire: str | None


class ScriptedModel:
    """Chooses a reply for a parsed request from the script and the conversation."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._ids = itertools.count(1)
        self._replies = itertools.count(1)
        self._lock = threading.Lock()

    def reply(self, wire: Wire, body: dict[str, Any]) -> Reply:
        if self.script.reply_delay_sec > 0:
            time.sleep(self.script.reply_delay_sec)
        with self._lock:
            number = next(self._replies)
        return replace(self._reply(wire, body), reply_id=f"scripted{number}")

    def _reply(self, wire: Wire, body: dict[str, Any]) -> Reply:
        tools = wire.tools(body)
        done = wire.tool_results(body)
        usage = (self.script.input_tokens, self.script.output_tokens, self.script.cache_read_tokens)
        actions = self.script.actions
        if tools and actions and (done < len(actions) or self.script.repeat):
            call = self._call(actions[done % len(actions)], tools)
            if call is not None:
                return Reply(text="", tool_call=call, usage=usage)
        if not tools and self.script.actions and "SEARCH/REPLACE" in wire.prompt_text(body):
            return Reply(text=_edit_blocks(self.script.actions), tool_call=None, usage=usage)
        return Reply(text=self.script.final_text, tool_call=None, usage=usage)

    def _call(self, action: Action, tools: dict[str, dict[str, Any]]) -> ToolCall | None:
        call_id = f"call_{next(self._ids)}"
        if action.path is not None:
            for name, props in tools.items():
                path_key = next((k for k in PATH_KEYS if k in props), None)
                content_key = next((k for k in CONTENT_KEYS if k in props), None)
                if path_key and content_key:
                    return ToolCall(call_id, name, {path_key: action.path, content_key: action.content})
        for name, props in tools.items():
            key = next((k for k in COMMAND_KEYS if k in props), None)
            if key is None:
                continue
            command = action.as_command()
            args: dict[str, Any] = {key: ["bash", "-lc", command] if props[key].get("type") == "array" else command}
            return ToolCall(call_id, name, {**_required_defaults(props), **args})
        return None


#: Values for required arguments the script does not set (e.g. claude-code-acp's Bash ``timeout``).
TYPE_DEFAULTS: dict[str, Any] = {"integer": 60000, "number": 60000, "boolean": False, "string": ""}


def _required_defaults(props: dict[str, Any]) -> dict[str, Any]:
    return {
        k: TYPE_DEFAULTS[v["type"]]
        for k, v in props.items()
        if isinstance(v, dict) and v.get("required") and v.get("type") in TYPE_DEFAULTS
    }


def _edit_blocks(actions: list[Action]) -> str:
    """aider's diff edit format: a new file is a SEARCH block with nothing to search."""
    parts = []
    for action in actions:
        if action.path is None:
            continue
        parts.append(f"{action.path}\n```\n<<<<<<< SEARCH\n=======\n{action.content}\n>>>>>>> REPLACE\n```\n")
    return "\n".join(parts)


class ModelServer:
    """A threading HTTP server on 127.0.0.1 (port 0 picks a free one); ``requests`` records what came."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0, requests_log: str | None = None) -> None:
        self.model = ScriptedModel(script)
        self.faults = FaultPlan(script.fault)
        self.requests_log = requests_log
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tool_requests(self) -> list[SeenRequest]:
        """The requests that offered the agent tools: its own turns, not its side requests (titles, counts)."""
        with self._lock:
            seen = list(self.requests)
        by_name = {w.name: w for w in WIRES}
        return [r for r in seen if r.wire in by_name and isinstance(r.body, dict) and by_name[r.wire].tools(r.body)]

    def seen(self, wire: str | None = None) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if wire is None or r.wire == wire]

    def note(self, request: SeenRequest) -> None:
        with self._lock:
            self.requests.append(request)
            if self.requests_log:
                with open(self.requests_log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(request)) + "\n")

    def start(self) -> ModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.faults.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


@contextmanager
def model_server(script: Script | None = None, host: str = "127.0.0.1", port: int = 0) -> Iterator[ModelServer]:
    """Serve ``script`` until the block ends."""
    server = ModelServer(script or Script(), host, port).start()
    try:
        yield server
    finally:
        server.stop()


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._note(None)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._note(None)
            models = {"object": "list", "data": [{"id": "scripted-model", "object": "model", "type": "model"}]}
            self._json(200, models)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._note(None, raw.decode("utf-8", "replace"))
                self._json(400, {"error": {"type": "invalid_request_error", "message": "body is not JSON"}})
                return
            split = urlsplit(self.path)
            if split.path.endswith("/count_tokens"):
                self._note("anthropic", body)
                self._json(200, {"input_tokens": server.model.script.input_tokens})
                return
            wire = next((w for w in WIRES if w.matches(split.path)), None)
            self._note(wire.name if wire else None, body)
            if wire is None or not isinstance(body, dict):
                self._json(404, {"error": {"type": "not_found_error", "message": f"no endpoint {split.path}"}})
                return
            fault = server.faults.next()
            if fault is not None:
                self._fail(wire.name, fault)
                return
            reply = server.model.reply(wire, body)
            model = wire.model(split.path, body) or "scripted-model"
            if wire.streams(split, body):
                self._stream(wire.events(reply, model))
            else:
                self._json(200, wire.whole(reply, model))

        def _note(self, wire: str | None, body: Any = None) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.note(SeenRequest(self.command, self.path, headers, body, wire))

        def _fail(self, wire: str, fault: Fault) -> None:
            """Answer as a failing provider: its error body, no answer at all, or a closed connection."""
            status = fault.status
            if status is not None:
                self._json(status, error_body(wire, status), retry_after=status in (429, 503, 529))
                return
            if fault.kind == "hang":
                server.faults.stopping.wait()
            self.close_connection = True
            with suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _json(self, status: int, payload: Any, retry_after: bool = False) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            if retry_after:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, events: Iterator[tuple[str | None, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
                chunk = frame.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_maka.testing.model_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=4000)
    parser.add_argument("--write", action="append", default=[], metavar="PATH=CONTENT")
    parser.add_argument("--shell", action="append", default=[], metavar="COMMAND")
    parser.add_argument("--final", default=Script.final_text)
    parser.add_argument("--repeat", action="store_true", help="start the actions over forever (a looping agent)")
    parser.add_argument("--script", metavar="FILE", help="the whole Script as JSON (replaces --write/--shell/--final)")
    parser.add_argument("--requests-log", metavar="FILE", help="append every request as one JSON line")
    parser.add_argument("--fault", choices=KINDS, help="fail model requests: a status code, hang or no-answer")
    parser.add_argument("--fault-every", type=int, default=1, metavar="K", help="only every K-th model request")
    args = parser.parse_args(argv)
    if args.fault_every < 1:
        parser.error(f"--fault-every: expected 1 or more (got {args.fault_every})")
    if args.script:
        script = script_from_json(Path(args.script).read_text(encoding="utf-8"))
    else:
        actions = [Action.write(*item.split("=", 1)) for item in args.write] + [Action.shell(c) for c in args.shell]
        script = Script(actions=actions, final_text=args.final, repeat=args.repeat)
    if args.fault:
        script = replace(script, fault=Fault(args.fault, args.fault_every))
    server = ModelServer(script, args.host, args.port, requests_log=args.requests_log).start()
    print(f"scripted model server on http://{args.host}:{server.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def script_to_json(script: Script) -> str:
    """``script`` as JSON, for ``--script`` (a server run in another process or container)."""
    return json.dumps(asdict(script))


def script_from_json(text: str) -> Script:
    data = json.loads(text)
    fault = Fault(**data["fault"]) if data.get("fault") else None
    return Script(**{**data, "actions": [Action(**a) for a in data.get("actions", [])], "fault": fault})


if __name__ == "__main__":
    raise SystemExit(main())

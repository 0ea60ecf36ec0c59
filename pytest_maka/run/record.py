"""The one place where an attempt's typed facts (``run/facts.py``) become the record's mappings.

The lifecycle's record building (``CellRunner._build``) passes these to
``core.records.attempt_record``; a field of a facts record is its key, ``None`` / empty
absent unless noted (the record's shape is the ledger's contract: same keys, same values).
"""

from __future__ import annotations

from typing import Any

from ..egress.plan import PHASES
from .facts import AgentFacts, BudgetFacts, IsolationFacts, StepsVerdict, Tamper, VerifierFacts, VerifierRun
from .work import AttemptWork, StepsRun


def agent_mapping(facts: AgentFacts) -> dict[str, Any]:
    """The record's ``agent``."""
    out: dict[str, Any] = {}
    if facts.setup is not None:
        out["setup"] = {"exit_code": facts.setup.exit_code, "duration_s": facts.setup.duration_s}
    if facts.not_started:
        out["not_started"] = facts.not_started
    if facts.run is not None:
        run = facts.run
        out.update(
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            timeout_sec=run.timeout_sec,
            duration_s=run.duration_s,
            output_truncated=run.output_truncated,
            env_passed=run.env_passed,
        )
    if facts.limits_hit:
        out["limits_hit"] = list(facts.limits_hit)
    if facts.could_not_start:
        out["started"] = False
    for key, text in (
        ("stop_reason", facts.stop_reason),
        ("error", facts.error),
        ("cost_source", facts.cost_source),
        ("version", facts.version),
    ):
        if text:
            out[key] = text
    if facts.cost is not None:
        out["cost"] = facts.cost
    if facts.usage_partial:
        out["usage_partial"] = True
    out.update(facts.handoff)
    if facts.telemetry:
        out["telemetry"] = facts.telemetry
    if facts.workspace_changes is not None:
        out["workspace_changes"] = facts.workspace_changes
    if facts.copied_out is not None:
        out["copied_out"] = facts.copied_out
    if facts.copy_truncated:
        out["copy_truncated"] = True
    if facts.freeze_notes:
        out["freeze_notes"] = facts.freeze_notes
    if facts.usage_problems:
        out["usage_problems"] = facts.usage_problems
    if facts.claim_agrees_with_verdict is not None:
        out["claim_agrees_with_verdict"] = facts.claim_agrees_with_verdict
    if facts.decisive_step is not None:
        out["decisive_step"] = facts.decisive_step
    return out


def _tamper(tamper: Tamper | None) -> dict[str, Any] | None:
    if tamper is None:
        return None
    if tamper.refused is None:
        return tamper.report
    return {**tamper.report, "refused": tamper.refused, "paths": tamper.paths}


def _verifier_run(run: VerifierRun) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": run.kind,
        "exit_code": run.exit_code,
        "timed_out": run.timed_out,
        "timeout_sec": run.timeout_sec,
        "duration_s": run.duration_s,
        "set_up_ahead": run.set_up_ahead,
        "reward": run.reward,
        "rewards": run.rewards,
        "reward_source": run.reward_source,
        "error": run.error,
        "output_path": run.output_path,
        "verdict_channel": run.verdict_channel,
    }
    if run.passed_with_exit_code is not None:
        out["passed_with_exit_code"] = run.passed_with_exit_code
    if run.collect_notes:
        out["collect_notes"] = run.collect_notes
    out.update(run.details)  # the verifier's own keys
    return out


def _steps_verdict(steps: StepsVerdict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": steps.kind,
        "strategy": steps.strategy,
        "reward": steps.reward,
        "rewards": steps.rewards,
        "reward_source": steps.reward_source,
        "steps_run": steps.steps_run,
        "steps_total": steps.steps_total,
        "timed_out": steps.timed_out,
        "timeout_sec": steps.timeout_sec,
        "error": steps.error,
    }
    if steps.stopped:
        out["stopped"] = steps.stopped
    return out


def verifier_mapping(facts: VerifierFacts) -> dict[str, Any]:
    """The record's ``verifier``."""
    if facts.steps is not None:
        return _steps_verdict(facts.steps)
    before = (
        ("environment", facts.environment),
        ("artifacts", facts.artifacts),
        ("collect_hooks", facts.collect_hooks),
    )
    if facts.run is None:  # not verified: what was done towards it, in the order it was done
        out: dict[str, Any] = {key: value for key, value in reversed(before) if value is not None}
        if facts.tamper is not None:
            out["tamper"] = _tamper(facts.tamper)
        return out
    out = _verifier_run(facts.run)
    out["tamper"] = _tamper(facts.tamper)
    out.update({key: value for key, value in before if value is not None})
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
    """The record's ``isolation``: the sandbox's report, its teardown error, the network it had."""
    out = dict(facts.sandbox)
    if facts.teardown_error is not None:
        out["teardown_error"] = facts.teardown_error
    if facts.network is not None:
        out["network"] = facts.network
    return out


def steps_mapping(work: AttemptWork, steps: StepsRun) -> list[dict[str, Any]]:
    """The record's ``steps`` list: every declared step, the ones not run marked so."""
    out_dir, declared = work.settings.out_dir, work.cell.task.steps
    entries: list[dict[str, Any]] = []
    for i, (step_work, outcome) in enumerate(steps.done):
        agent, verifier = agent_mapping(step_work.agent_facts), verifier_mapping(step_work.verifier_facts)
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
                "network": {phase: step_work.plan.phase(phase).record() for phase in PHASES},
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

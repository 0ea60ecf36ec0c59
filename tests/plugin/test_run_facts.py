"""The attempt's typed facts (``run/facts.py``) as the record's mappings (``run/record.py``):
the record keeps its keys, in order, with absent facts absent; ``run/`` has one lifecycle."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_maka.core.cell import Cell
from pytest_maka.run.facts import (
    AgentFacts,
    BudgetFacts,
    CarriedArtifact,
    CellLimits,
    CollectHookRun,
    HookResult,
    IsolationFacts,
    SeparateEnvironment,
    StepSetup,
    SubjectRun,
    Tamper,
    Timeouts,
    VerifierFacts,
    VerifierRun,
)
from pytest_maka.run.record import agent_mapping, budget_mapping, isolation_mapping, verifier_mapping

from ..report.builders import make_cell

RUN = Path(__file__).resolve().parents[2] / "pytest_maka" / "run"
CELL = make_cell("t", "s")
SUBJECT = SubjectRun(
    exit_code=0, timed_out=False, timeout_sec=30.0, duration_s=1.5, output_truncated=False, env_passed=[]
)
VERIFIED = VerifierRun(
    kind="harbor",
    exit_code=0,
    timed_out=False,
    timeout_sec=60.0,
    duration_s=0.5,
    set_up_ahead=False,
    reward=1.0,
    rewards={"reward": 1.0},
    reward_source="reward.txt",
    error=None,
    output_path="cells/c/attempt-1/verifier.stdout.txt",
    verdict_channel="none",
    details={"tests": 3},
)


def test_a_subject_that_ran_has_its_measured_keys_then_its_own_report() -> None:
    facts = AgentFacts(run=SUBJECT, version="1.2", handoff={"mcp": []}, freeze_notes=["x"], usage_problems=[])
    assert list(agent_mapping(facts, CELL)) == [
        "exit_code",
        "timed_out",
        "timeout_sec",
        "duration_s",
        "output_truncated",
        "env_passed",
        "version",
        "mcp",
        "freeze_notes",
    ]
    assert agent_mapping(replace(facts, decisive_step="two"), CELL)["decisive_step"] == "two"


def test_a_subject_that_never_started_has_only_why() -> None:
    assert agent_mapping(AgentFacts(not_started="the run spent 2 USD"), CELL) == {"not_started": "the run spent 2 USD"}
    assert agent_mapping(AgentFacts(setup=StepSetup(1, 0.25)), CELL) == {"setup": {"exit_code": 1, "duration_s": 0.25}}
    could_not = AgentFacts(run=SUBJECT, limits_hit=["memory"], started=False)
    assert list(agent_mapping(could_not, CELL))[-2:] == ["limits_hit", "started"]
    assert agent_mapping(could_not, CELL)["started"] is False


def test_skills_offered_and_not_handed_are_noted_after_the_subjects_own_keys() -> None:
    cell = Cell(replace(CELL.task, skills_dir="skills"), CELL.subject, 1)
    ran = agent_mapping(AgentFacts(run=SUBJECT), cell)
    assert list(ran)[-1] == "skills"
    reason = "subject kind 'command' takes no MCP servers or skills"
    assert ran["skills"] == {"dir": "skills", "handed": False, "reason": reason}
    never = agent_mapping(AgentFacts(not_started="no"), cell)
    assert never["skills"]["reason"] == "the subject did not run"
    handed = {"skills": {"dir": "skills", "handed": True}}
    assert agent_mapping(AgentFacts(run=SUBJECT, handoff=handed), cell)["skills"]["handed"] is True


def test_a_misspelt_fact_is_an_error_not_a_new_key() -> None:
    with pytest.raises(TypeError):
        AgentFacts(not_startd="typo")  # type: ignore[call-arg]


def test_verifier_keys_keep_the_verdict_first_then_what_came_before_it() -> None:
    environment = SeparateEnvironment("separate", "image debian", {"image": "sha256:1"})
    carried = [CarriedArtifact("/logs/artifacts", 0, 0, not_carried="gone"), CarriedArtifact("/app", 10, 1)]
    facts = VerifierFacts(run=VERIFIED, tamper=Tamper({"mechanism": "m"}), environment=environment, artifacts=carried)
    out = verifier_mapping(facts)
    assert list(out)[-5:] == ["verdict_channel", "tests", "tamper", "environment", "artifacts"]
    assert out["tamper"] == {"mechanism": "m"} and "collect_hooks" not in out
    assert out["environment"] == {"mode": "separate", "definition": "image debian", "image": "sha256:1"}
    assert out["artifacts"] == [
        {"source": "/logs/artifacts", "bytes": 0, "entries": 0, "not_carried": "gone"},
        {"source": "/app", "bytes": 10, "entries": 1},
    ]
    # not verified (refused while carrying the artifacts): in the order it happened
    hooks = [CollectHookRun("c", "main", result=HookResult(None, True)), CollectHookRun("d", "db", not_run="x")]
    refused = VerifierFacts(collect_hooks=hooks, tamper=Tamper(refused="r", paths=["/a"]))
    assert verifier_mapping(refused) == {
        "collect_hooks": [
            {"command": "c", "service": "main", "exit_code": None, "timed_out": True},
            {"command": "d", "service": "db", "not_run": "x"},
        ],
        "tamper": {"refused": "r", "paths": ["/a"]},
    }
    assert verifier_mapping(VerifierFacts()) == {}


def test_budget_keys_of_a_task_its_steps_and_a_cell_not_started() -> None:
    limits = CellLimits(cell_timeout_sec=None, max_tokens=10, max_cost_usd=None, max_output_bytes=None)
    one = BudgetFacts(Timeouts(30.0, 60.0), limits)
    assert list(budget_mapping(one, "max_tokens")) == [
        "agent_timeout_sec",
        "verifier_timeout_sec",
        "cell_timeout_sec",
        "max_tokens",
        "max_cost_usd",
        "max_output_bytes",
        "exceeded",
    ]
    cell = BudgetFacts(limits=limits, steps=[one, BudgetFacts()])
    assert budget_mapping(cell)["steps"] == [{"agent_timeout_sec": 30.0}, {}]
    assert budget_mapping(BudgetFacts(), "cell_timeout_sec") == {"exceeded": "cell_timeout_sec"}


def test_isolation_is_the_sandbox_s_report_with_the_network_it_had() -> None:
    facts = IsolationFacts(
        {"executor": "local", "network": "none"}, teardown_error="OSError: x", network={"agent": "none"}
    )
    assert isolation_mapping(facts) == {
        "executor": "local",
        "network": {"agent": "none"},
        "teardown_error": "OSError: x",
    }
    assert list(isolation_mapping(facts)) == ["executor", "network", "teardown_error"]
    assert isolation_mapping(IsolationFacts()) == {}


def _imports() -> dict[str, set[str]]:
    """Which run/ modules each run/ module imports (also lazily or for type checking only)."""
    modules = {p.stem for p in RUN.glob("*.py")} - {"__init__"}
    edges: dict[str, set[str]] = {}
    for name in modules:
        found = set()
        for node in ast.walk(ast.parse((RUN / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                found |= {t for t in targets if t in modules}
        edges[name] = found
    return edges


def test_run_modules_import_each_other_in_no_circle() -> None:
    edges = _imports()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, f"import circle in pytest_maka/run: {' -> '.join([*path, name])}"
        if name in done:
            return
        for target in sorted(edges[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(edges):
        visit(name, [])


def test_one_lifecycle_one_healthcheck_poller() -> None:
    defined = {
        (path.stem, node.name)
        for path in RUN.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
    }
    assert [m for m, f in defined if f == "wait_healthy"] == ["health"]
    # the sequence limit → subject → freeze → verify is written once: in run/steps.py's run_step
    callers = {
        path.stem
        for path in RUN.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_subject"
    }
    assert callers == {"steps"}


def test_a_misspelt_fact_set_later_is_an_error_too() -> None:
    facts = AgentFacts()
    with pytest.raises(AttributeError):
        facts.not_startd = "typo"  # type: ignore[attr-defined]

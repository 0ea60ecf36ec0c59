"""Bad input: one clear message naming the file, the key and what was expected; nothing runs."""

from __future__ import annotations

import pytest

from ..conftest import Cohort

pytestmark = pytest.mark.sandbox


def _usage_error(cohort: Cohort, spec_text: str, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    cohort.task("one")
    cohort.spec.write_text(spec_text)
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "Traceback" not in err + result.stdout.str()
    assert not (cohort.out / "attempts.jsonl").exists(), "no cell may run on a spec error"
    lines = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert len(lines) == 1, err
    return lines[0]


BASE = "name: t\ntasks: [{path: tasks}]\n"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            BASE + "subjects: [{name: a, kind: oracle}, {name: b, kind: robot}]\n",
            "cohort.yaml: subjects[1].kind: unknown subject kind 'robot'; expected one of: "
            "acp, aider, claude-code, codex, command, gemini-cli, mini-swe-agent, nop, opencode, oracle",
        ),
        (BASE + "subjects: [{name: a, kind: oracle, colour: red}]\n", "cohort.yaml: subjects[0].colour: unknown key"),
        (
            BASE + "subjects: [{name: a, kind: oracle}, {name: a, kind: nop}]\n",
            "cohort.yaml: subjects[1].name: duplicate subject name 'a'",
        ),
        (BASE + "subjects: [{name: a, kind: command}]\n", "cohort.yaml: subjects[0].command: missing required key"),
        (
            BASE + "subjects: [{name: a, kind: oracle}]\nrepetitons: 3\n",
            "cohort.yaml: repetitons: unknown key; expected one of: budgets, description, executor, name, policy, ",
        ),
        (
            BASE + "subjects: [{name: a, kind: oracle}]\nrepetitions: 0\n",
            "cohort.yaml: repetitions: Input should be greater than or equal to 1",
        ),
        (
            "name: t\ntasks: [{path: nowhere}]\nsubjects: [{name: a, kind: oracle}]\n",
            "cohort.yaml: tasks[0].path: no such file or directory",
        ),
        (
            "name: t\ntasks: [{path: tasks, include: ['zz*']}]\nsubjects: [{name: a, kind: oracle}]\n",
            "cohort.yaml: tasks[0].include[0]: 'zz*' matches no task in tasks",
        ),
        (
            "name: t\ntasks: [{path: tasks, format: swe-bonch}]\nsubjects: [{name: a, kind: oracle}]\n",
            "cohort.yaml: tasks[0].format: unknown format 'swe-bonch'; expected one of: harbor",
        ),
        (
            BASE + "subjects: [{name: a, kind: oracle}]\nexecutor: {kind: cloud}\n",
            "cohort.yaml: executor.kind: unknown executor kind 'cloud'; expected one of: ",
        ),
        (
            BASE + "subjects: [{name: a, kind: oracle}]\nexecutor: {kind: local, sandbox: maybe}\n",
            "cohort.yaml: executor.sandbox: Input should be 'bwrap' or 'none'",
        ),
        ("name: t\ntasks: [{path: tasks}\nsubjects: []\n", "cohort.yaml: line 3, column 1: invalid YAML"),
        ("- just a list\n", "cohort.yaml: expected a mapping with keys name, tasks, subjects"),
        (
            "name: t\ntasks: [{path: tasks}]\nsubjects: [subjects/missing.yaml]\n",
            "subjects/missing.yaml: subject file not found",
        ),
    ],
)
def test_spec_error_names_file_key_and_expectation(cohort: Cohort, spec: str, expected: str) -> None:
    line = _usage_error(cohort, spec)
    assert expected in line, line


def test_missing_host_variable_is_named(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKA_OK_VAR", "1")
    monkeypatch.delenv("MAKA_NOT_SET", raising=False)
    line = _usage_error(
        cohort, BASE + "subjects: [{name: a, kind: command, command: 'true', env: [MAKA_OK_VAR, MAKA_NOT_SET]}]\n"
    )
    assert "cohort.yaml: subjects[0].env[1]: host variable MAKA_NOT_SET is not set" in line


def test_invalid_task_directory_is_named(cohort: Cohort) -> None:
    cohort.task("good")
    bad = cohort.tasks / "bad"
    bad.mkdir()
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    (bad / "instruction.md").write_text("x")
    (bad / "tests").mkdir()
    (bad / "tests" / "test.sh").write_text("true")
    cohort.write()
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad/task.toml: agent.timeout_sec: expected a non-negative number (got 'soon')" in result.stderr.str()


def test_task_without_verifier_is_rejected(cohort: Cohort) -> None:
    task = cohort.task("noverifier")
    (task / "tests" / "test.sh").unlink()
    cohort.write()
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "noverifier: tests/test.sh: missing: the hidden verifier is required" in result.stderr.str()


def test_directory_that_is_not_a_task(cohort: Cohort) -> None:
    cohort.task("good")
    (cohort.tasks / "notes").mkdir()
    cohort.write()
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "tasks/notes: not a task directory: expected task.toml" in result.stderr.str()


def test_subject_file_errors_name_that_file(cohort: Cohort) -> None:
    (cohort.root / "subjects").mkdir()
    (cohort.root / "subjects" / "agent.yaml").write_text("name: agent\nkind: command\ncommand: x\ntimeout: 3\n")
    line = _usage_error(cohort, BASE + "subjects: [subjects/agent.yaml]\n")
    assert "subjects/agent.yaml: timeout: unknown key" in line


def test_bad_spec_loses_nothing_already_recorded(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.write()
    assert cohort.run().ret == 0
    before = (cohort.out / "attempts.jsonl").read_bytes()
    results_before = (cohort.out / "results.jsonl").read_bytes()
    cohort.spec.write_text(BASE + "subjects: [{name: a, kind: robot}]\n")
    assert cohort.run().ret == pytest.ExitCode.USAGE_ERROR
    assert (cohort.out / "attempts.jsonl").read_bytes() == before
    assert (cohort.out / "results.jsonl").read_bytes() == results_before

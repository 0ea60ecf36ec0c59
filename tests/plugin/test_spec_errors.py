"""Bad input: one clear message naming the file, the key and what was expected; nothing runs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Cohort, write_task

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
            "cohort.yaml: tasks[0].format: unknown format 'swe-bonch'; did you mean 'swe-bench'? "
            "expected one of: harbor",
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
    result = cohort.run("--maka-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad/task.toml: agent.timeout_sec: expected a number greater than 0 (got 'soon')" in result.stderr.str()


def test_task_without_verifier_is_rejected(cohort: Cohort) -> None:
    task = cohort.task("noverifier")
    (task / "tests" / "test.sh").unlink()
    cohort.write()
    result = cohort.run("--maka-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "noverifier: tests/test.sh: missing: the hidden verifier is required" in result.stderr.str()


def test_directory_that_is_not_a_task(cohort: Cohort) -> None:
    """A stray directory among the tasks (``notes/``; ``New Tasks/`` holding more tasks, as in a
    public repository) is skipped with the reason and a hint, and does not stop the others;
    ``exclude`` leaves it out; ``--maka-strict`` makes it the usage error it was before."""
    cohort.task("good")
    (cohort.tasks / "notes").mkdir()
    write_task(cohort.tasks / "New Tasks", "001. nested")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    out = result.stdout.str()
    assert "tasks/notes: not a task directory: expected task.toml (harbor layout); leave it out with exclude" in out
    assert "New Tasks: not a task directory: expected task.toml (harbor layout) (it holds 1 task directory:" in out
    strict = cohort.run("--maka-strict")
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    assert "tasks/New Tasks: not a task directory: expected task.toml" in strict.stderr.str()
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}], tasks=[{"path": "tasks", "exclude": ["notes", "New-*"]}]
    )
    cohort.run().assert_outcomes(passed=1)


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


def _one_error_line(cohort: Cohort) -> str:
    result = cohort.run("--collect-only", "--maka-strict")  # an invalid task is a usage error only then
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    lines = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(lines) == 1, out
    return lines[0]


def _nest(top: Path, levels: int) -> None:
    """``levels`` directories below ``top``, made relative to a dir fd (no path gets too long)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


@pytest.fixture
def deep_tree_cleanup(cohort: Cohort) -> Iterator[None]:
    """Remove what a test nested 1,000 deep: Python's rmtree (and pytest's) recurse and fail."""
    yield
    subprocess.run(["rm", "-rf", str(cohort.tasks)], check=True)


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [
        ("name", r"tests/x\xff: the file name is not valid UTF-8"),
        ("link", "tests/link: the symlink's target is not valid UTF-8"),
        ("deep", "tasks/one: directories nested more than 64 levels deep"),
    ],
)
def test_task_tree_that_cannot_be_named_or_walked(
    cohort: Cohort, deep_tree_cleanup: None, hostile: str, expected: str
) -> None:
    task = cohort.task("one")
    if hostile == "name":
        (task / "tests" / os.fsdecode(b"x\xff")).write_text("x")
    elif hostile == "link":
        os.symlink(os.fsdecode(b"/tmp/\xfe\xff"), task / "tests" / "link")
    else:
        _nest(task / "environment", 1000)
    cohort.write()
    assert expected in _one_error_line(cohort)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("timeout_sec = 30", "timeout_sec = 0"), "agent.timeout_sec: expected a number greater than 0 (got 0)"),
        (("timeout_sec = 30", "timeout_sec = nan"), "agent.timeout_sec: expected a finite number (got nan)"),
        (("timeout_sec = 30", "timeout_sec = -inf"), "agent.timeout_sec: expected a finite number (got -inf)"),
        (('workdir = "/app"', 'workdir = "/"'), "environment.workdir: the workdir cannot be /"),
        (('workdir = "/app"', 'workdir = "/logs"'), "environment.workdir: the workdir cannot be /logs"),
        (('workdir = "/app"', 'workdir = "/tests/x"'), "environment.workdir: the workdir cannot be /tests"),
        (('workdir = "/app"', 'workdir = "/app/../logs"'), "environment.workdir: expected a plain absolute path"),
        (('workdir = "/app"', "workdir = []"), "environment.workdir: Input should be a valid string"),
        (("[environment]", "[environment]\nmemory_mb = inf"), "environment.memory_mb: expected a finite number"),
        (("[environment]", "[environment]\nnetwork_mode = []"), "environment.network_mode: Input should be 'public'"),
        (("[environment]", "[environment]\ncpus = -1"), "environment.cpus: expected a number greater than 0"),
        (("[environment]", "[environment]\nenv = {A = 1}"), "environment.env.A: Input should be a valid string"),
        (("[agent]", "[agent]\nuser = 1.5"), "agent.user: Input should be a valid integer or a valid string (got 1.5)"),
        (
            ("[environment]", "[environment]\nstorage_mb = " + "9" * 3000),
            "environment.storage_mb: integer out of range",
        ),
    ],
)
def test_task_values_that_load_but_cannot_run(cohort: Cohort, change: tuple[str, str], expected: str) -> None:
    task = cohort.task("one")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace(*change, 1))
    cohort.write()
    line = _one_error_line(cohort)
    assert "one/task.toml: " + expected in line, line


def test_alias_bomb_in_a_legacy_task_is_refused(cohort: Cohort) -> None:
    """The 417-byte task.yaml that made 62 MB records: refused before anything is built."""
    task = cohort.tasks / "bomb"
    task.mkdir()
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdef", "bcdefg", strict=True):
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    (task / "task.yaml").write_text("\n".join(levels) + "\ninstruction: hi\ntags: [" + ",".join(["*g"] * 9) + "]\n")
    assert len((task / "task.yaml").read_bytes()) < 500
    (task / "run-tests.sh").write_text("true\n")
    (task / "Dockerfile").write_text("FROM debian\n")
    cohort.write()
    assert "bomb/task.yaml: YAML refused: its aliases expand to more than" in _one_error_line(cohort)
    assert not cohort.out.exists()


def test_bad_task_file_loses_nothing_already_recorded(cohort: Cohort) -> None:
    task = cohort.task("one")
    cohort.write()
    assert cohort.run().ret == 0
    before = {p.name: p.read_bytes() for p in cohort.out.iterdir() if p.is_file()}
    (task / "instruction.md").write_bytes(b"Do \xff it")
    assert "one/instruction.md: line 1: instruction is not valid UTF-8 (byte 0xff)" in _one_error_line(cohort)
    assert {p.name: p.read_bytes() for p in cohort.out.iterdir() if p.is_file()} == before

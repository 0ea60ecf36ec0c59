"""Harbor 0.25 ``[[steps]]`` in task.toml: a public multi-step task, the steps' errors, links out of
the task, and step dependencies (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.benchmarks import harbor
from pytest_maka.core.errors import TaskError

from .test_harbor_toml import FIXTURES, task_dir


def test_public_multi_step_task(tmp_path: Path) -> None:
    root = task_dir(tmp_path, (FIXTURES / "public" / "rego-active-learning-gates.task.toml").read_text())
    (root / "tests" / "helpers.py").write_text("shared = 1\n")
    for i in (1, 2, 3):
        step = root / "steps" / f"milestone_{i}"
        (step / "tests").mkdir(parents=True)
        (step / "instruction.md").write_text(f"milestone {i}")
        (step / "tests" / "test.sh").write_text(f"echo step {i}\n")
        (step / "tests" / "helpers.py").write_text(f"shared = {i * 10}\n")
    (root / "steps" / "milestone_1" / "solution").mkdir()
    (root / "steps" / "milestone_1" / "solution" / "solve.sh").write_text("true\n")
    (root / "steps" / "milestone_2" / "workdir").mkdir()
    (root / "steps" / "milestone_2" / "workdir" / "setup.sh").write_text("echo setup\n")
    task = harbor.load_task(root)
    assert [s.name for s in task.steps] == ["milestone_1", "milestone_2", "milestone_3"]
    first, second, _ = task.steps
    assert (first.agent_timeout_sec, first.verifier_timeout_sec) == (900.0, 450.0)
    assert first.solution_dir is not None and second.solution_dir is None
    assert second.setup_script == root / "steps" / "milestone_2" / "workdir" / "setup.sh"
    merged = second.tests_dir
    assert (merged / "test.sh").read_text() == "echo step 2\n", "the step's files win"
    assert (merged / "helpers.py").read_text() == "shared = 20\n"
    (root / "steps" / "milestone_3" / "tests" / "helpers.py").unlink()
    third = harbor.load_task(root).steps[2]
    assert (third.tests_dir / "helpers.py").read_text() == "shared = 1\n", "top-level tests/ merged under the step's"
    assert task.multi_step_reward_strategy == "mean" and task.network == "none"


def test_step_errors_name_the_step(tmp_path: Path) -> None:
    root = task_dir(tmp_path, '[[steps]]\nname = "one"\n')
    with pytest.raises(TaskError, match=r"steps\[0\].name: no directory steps/one/"):
        harbor.load_task(root)
    (root / "steps" / "one").mkdir(parents=True)
    with pytest.raises(TaskError, match=r"steps/one: instruction\.md: missing"):
        harbor.load_task(root)
    (root / "task.toml").write_text('[[steps]]\nname = "a/b"\n')
    with pytest.raises(TaskError, match=r"steps\[0\].name: expected a portable directory name"):
        harbor.load_task(root)
    (root / "task.toml").write_text('[[steps]]\nname = "one"\n[[steps]]\nname = "ONE"\n')
    with pytest.raises(TaskError, match="step names must be unique"):
        harbor.load_task(root)


def test_a_step_that_links_out_of_the_task_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "tests").mkdir(parents=True)
    (outside / "instruction.md").write_text("read me")
    (outside / "tests" / "secret.txt").write_text("host secret")
    root = task_dir(tmp_path, '[[steps]]\nname = "one"\n')
    (root / "steps").mkdir()
    (root / "steps" / "one").symlink_to(outside)
    with pytest.raises(TaskError, match="must stay inside the task directory"):
        harbor.load_task(root)
    (root / "steps" / "one").unlink()
    (root / "steps" / "one").mkdir()
    (root / "steps" / "one" / "instruction.md").write_text("step")
    (root / "steps" / "one" / "tests").symlink_to(outside / "tests")
    with pytest.raises(TaskError, match="must stay inside the task directory"):
        harbor.load_task(root)


def _steps_task(tmp_path: Path, toml: str) -> Path:
    root = task_dir(tmp_path, toml)
    for name in ("one", "two"):
        (root / "steps" / name).mkdir(parents=True)
        (root / "steps" / name / "instruction.md").write_text(name)
    return root


def test_a_step_dependency_on_an_earlier_step_is_honoured_by_the_order(tmp_path: Path) -> None:
    """``[[steps]] id`` / ``dependencies`` (published multi-step tasks): Harbor runs the steps in
    the order listed and ignores both; a dependency on an earlier step is what that order gives."""
    toml = '[[steps]]\nname = "one"\nid = "s1"\n[[steps]]\nname = "two"\nid = "s2"\ndependencies = ["s1"]\n'
    task = harbor.load_task(_steps_task(tmp_path, toml))
    assert task.unsupported is None and [s.name for s in task.steps] == ["one", "two"]
    assert task.metadata["ignored_keys"] == ["steps[0].id", "steps[1].id", "steps[1].dependencies"]
    assert task.metadata["ignored_values"]["steps[1].dependencies"] == ["s1"]


@pytest.mark.parametrize(
    ("deps", "why"),
    [('["two"]', "'two', which is not an earlier step"), ('["setup"]', "'setup', which is no step")],
)
def test_a_step_dependency_the_order_cannot_honour_skips_the_task(tmp_path: Path, deps: str, why: str) -> None:
    toml = f'[[steps]]\nname = "one"\ndependencies = {deps}\n[[steps]]\nname = "two"\n'
    task = harbor.load_task(_steps_task(tmp_path, toml))
    assert task.invalid is None
    assert task.unsupported is not None and task.unsupported.startswith(f"steps[0].dependencies names {why}")

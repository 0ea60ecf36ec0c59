"""Harbor 0.25 tasks this harness accepts but cannot run here: skipped with the feature, never
called invalid (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.benchmarks import harbor
from pytest_maka.core.errors import TaskError

from .test_harbor_toml import task_dir


@pytest.mark.parametrize(
    ("toml", "reason"),
    [
        ('[environment]\nos = "windows"\n', "windows environments (environment.os = 'windows') are not supported"),
        ('[environment.tpu]\ntype = "v6e"\ntopology = "2x4"\n', "TPU environments (environment.tpu) are not supported"),
        ("[environment]\ngpus = 2\n", "the task needs 2 GPU(s) (environment.gpus) and this machine has 0"),
    ],
)
def test_accepted_but_unsupported_skips_with_the_feature(tmp_path: Path, toml: str, reason: str) -> None:
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    assert harbor.load_task(task_dir(tmp_path, toml)).unsupported == reason


def test_a_windows_task_with_test_bat_loads_and_is_skipped_as_windows(tmp_path: Path) -> None:
    """Harbor's own examples (hello-world-bat, hello-multi-step-bat): the verifier is tests/test.bat.
    Such a task loads and is skipped for its OS, never called invalid for a missing test.sh."""
    root = task_dir(tmp_path, '[environment]\nos = "windows"\n')
    (root / "tests" / "test.sh").unlink()
    (root / "tests" / "test.bat").write_text("echo 1 > C:\\logs\\verifier\\reward.txt\n")
    reason = "windows environments (environment.os = 'windows') are not supported"
    assert harbor.load_task(root).unsupported == reason
    steps = tmp_path / "steps-task"
    (steps / "steps" / "one" / "tests").mkdir(parents=True)
    (steps / "steps" / "one" / "instruction.md").write_text("Do one.\n")
    (steps / "steps" / "one" / "tests" / "test.bat").write_text("exit 0\n")
    (steps / "task.toml").write_text('[environment]\nos = "windows"\n\n[[steps]]\nname = "one"\n')
    assert harbor.load_task(steps).unsupported == reason
    (steps / "task.toml").write_text('[[steps]]\nname = "one"\n')  # on Linux the step needs its test.sh
    with pytest.raises(TaskError, match=r"test\.sh"):
        harbor.load_task(steps)

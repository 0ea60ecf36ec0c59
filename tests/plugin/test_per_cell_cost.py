"""What was made cheaper per cell keeps its meaning: the collector's frozen objects are handed
back, sandbox paths map as before, artifacts are listed only when present, report paths are
cleaned as PurePosixPath would."""

from __future__ import annotations

import gc
import os
import stat
from pathlib import Path, PurePosixPath

import pytest

from pytest_maka.executors.hostfs import remove_path
from pytest_maka.executors.local import LocalOptions, LocalSandbox
from pytest_maka.executors.local.sandbox import sandbox_parts
from pytest_maka.report.artifacts import read_tail, safe_rel_path
from pytest_maka.run.work import ARTIFACT_FILES, AttemptWork
from pytest_maka.testing import make_task

from ..conftest import Cohort, needs_bwrap

FREEZE_PROBE = """
import gc
from pathlib import Path

def pytest_maka_phase(cell, phase):
    if phase == "agent":
        with open(Path(__file__).with_name("frozen.txt"), "a") as fh:
            fh.write(f"{gc.get_freeze_count()}\\n")
"""


@pytest.mark.sandbox
@needs_bwrap
def test_a_cohort_run_freezes_start_up_objects_and_the_next_session_hands_them_back(cohort: Cohort) -> None:
    for name in ("t0", "t1"):
        cohort.task(name)
    cohort.write()
    cohort.pytester.makeconftest(FREEZE_PROBE)
    gc.unfreeze()  # what an earlier in-process cohort run of this worker left frozen
    try:
        result = cohort.run("--maka-concurrency", "4")  # in-process: the same interpreter as this test
        result.assert_outcomes(passed=2, failed=2)
        counts = [int(n) for n in (cohort.root / "frozen.txt").read_text().split()]
        assert len(counts) == 4 and all(n > 0 for n in counts), "cells ran while start-up objects were frozen"
        assert gc.get_freeze_count() > 0, "left frozen: the end of the process skips them"
    finally:
        cohort.pytester.runpytest("--collect-only", "-p", "no:cacheprovider")  # any next session
    assert gc.get_freeze_count() == 0, "the next session handed the frozen objects back to the collector"


def test_collect_only_freezes_nothing(cohort: Cohort) -> None:
    cohort.task("t0")
    cohort.write()
    cohort.run("--collect-only")
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize(
    ("path", "parts"),
    [("/app", ("app",)), ("/logs/agent/x", ("logs", "agent", "x")), ("/a//b/./c/", ("a", "b", "c")), ("/", ())],
)
def test_sandbox_parts_are_those_of_pure_posix_path(path: str, parts: tuple[str, ...]) -> None:
    assert sandbox_parts(path) == parts == PurePosixPath(path).parts[1:]


@pytest.mark.parametrize("path", ["relative/x", "/app/../etc/shadow", "/..", ""])
def test_sandbox_parts_refuse_relative_and_dotdot(path: str) -> None:
    with pytest.raises(ValueError, match="absolute, without"):
        sandbox_parts(path)


@pytest.mark.parametrize("workdir", ["/app", "/srv/deep/work"])
def test_locate_maps_sandbox_paths_to_their_host_directories(tmp_path: Path, workdir: str) -> None:
    task = make_task(tmp_path / "task", workdir=workdir)
    sandbox = LocalSandbox(task, tmp_path / "scratch", LocalOptions())
    try:
        files = sandbox.files
        workspace, logs, mounts = files.workspace, files.logs, files.mounts
        assert files.locate(workdir) == (workspace, [])
        assert files.locate(f"{workdir}/src/a.py") == (workspace, ["src", "a.py"])
        assert files.locate("/logs/verifier/reward.txt") == (logs, ["verifier", "reward.txt"])
        assert files.locate("/tests/test.sh") == (mounts, ["tests", "test.sh"])
        for bad in ("/proc/x", "/usr/bin/sh", "/"):
            with pytest.raises(ValueError, match="cannot place files"):
                files.locate(bad)
    finally:
        sandbox.close()


def test_artifacts_lists_exactly_what_the_attempt_left(tmp_path: Path) -> None:
    attempt = tmp_path / "out" / "cells" / "c" / "attempt-1"
    (attempt / "agent").mkdir(parents=True)
    for name in ("instruction.md", "agent.stdout.txt", "verifier.stderr.txt", "agent/trajectory.json"):
        (attempt / name).write_text("x")
    (attempt / "verifier").mkdir()
    work = AttemptWork(
        cell=None,
        subject=None,
        verifier=None,
        executor=None,
        settings=None,
        attempt_dir=attempt,  # type: ignore[arg-type]
    )
    found = work.artifacts(tmp_path / "out")
    rel = "cells/c/attempt-1"
    assert found == {
        "dir": rel,
        "instruction": f"{rel}/instruction.md",
        "agent_log": f"{rel}/agent.stdout.txt",
        "agent_logs": f"{rel}/agent",
        "trajectory": f"{rel}/agent/trajectory.json",
        "verifier_stderr": f"{rel}/verifier.stderr.txt",
        "verifier_logs": f"{rel}/verifier",
    }
    (attempt / "agent" / "trajectory.json").unlink()
    assert "trajectory" not in work.artifacts(tmp_path / "out")
    assert set(ARTIFACT_FILES) >= set(found) - {"dir"}


@pytest.mark.parametrize("value", ["a/b", "a//b", "./a/./b/", "cells/x/attempt-1/agent.stdout.txt", ".", "a/.."])
def test_safe_rel_path_cleans_as_pure_posix_path(value: str) -> None:
    parts = PurePosixPath(value).parts
    expected = None if not parts or ".." in parts else PurePosixPath(*parts).as_posix()
    assert safe_rel_path(value) == expected


def test_read_tail_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "log.txt").write_text("hello\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_tail(tmp_path, "real/log.txt") == "hello\n"
    assert read_tail(tmp_path, "./real//log.txt") == "hello\n"
    assert read_tail(tmp_path, "link/log.txt") is None


def test_remove_path_takes_read_only_trees_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    for sub in ("a/b", "c", "d"):
        (tree / sub).mkdir(parents=True)
        (tree / sub / "f.txt").write_text("x")
    (tree / "a" / "link").symlink_to(outside)
    (tree / "a" / "b").chmod(0o500)  # no write bit: its file cannot be unlinked before a chmod
    (tree / "c").chmod(0o000)
    (tree / "a").chmod(0o300)
    remove_path(tree)
    assert not os.path.lexists(tree)
    assert (outside / "keep.txt").read_text() == "keep"
    assert stat.S_IMODE(outside.stat().st_mode) & 0o700 == 0o700

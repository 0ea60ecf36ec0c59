"""Shared helpers for the plugin's own tests: build Harbor-layout tasks and cohort specs."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_maka import hostcheck
from pytest_maka.core.hostreqs import COMPONENTS, install_line

#: Task fixtures carry their own test files (a Harbor task's tests/test_outputs.py): data, not our tests.
collect_ignore = ["fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """A suite started as a background job (``cmd &`` or ``nohup`` in a script, a CI runner without
    job control) inherits SIGINT *ignored*, and so does every run a test starts: a test that
    Ctrl-C's one (``os.killpg(pid, SIGINT)``) then waits for a run that never sees it. Ignored
    is not what any test means: take SIGINT back (in the controller and in each xdist worker)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "needs(*components): host components the test needs (keys of pytest_maka.core.hostreqs.COMPONENTS); "
        "skipped with the package to install where one is absent",
    )


#: What the host has, by component of ``pytest_maka.core.hostreqs`` (probed once per test process).
_FOUND: dict[str, bool] = {}
#: Markers that mean a host component: ``sandbox`` tests run bubblewrap, ``browser`` tests Chromium.
MARKER_NEEDS = {"sandbox": ("bwrap",), "browser": ("chromium",)}


def host_has(component: str) -> bool:
    """True when the host component (a key of ``COMPONENTS``) is here."""
    if component not in _FOUND:
        _FOUND[component] = hostcheck.present(component)
    return _FOUND[component]


def lacking(*components: str) -> str | None:
    """None when every component is here, else the skip reason: what is missing and what installs it."""
    absent = [COMPONENTS[c] for c in dict.fromkeys(components) if not host_has(c)]
    if not absent:
        return None
    return f"needs {', '.join(c.title for c in absent)}, not on this host: {install_line(absent)}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose host components (``needs`` marks, or a marker of MARKER_NEEDS) are absent."""
    wanted = [c for mark in item.iter_markers("needs") for c in mark.args]
    wanted += [c for marker, cs in MARKER_NEEDS.items() if item.get_closest_marker(marker) for c in cs]
    reason = lacking(*wanted)
    if reason:
        pytest.skip(reason)


HAS_BWRAP = host_has("bwrap")
needs_bwrap = pytest.mark.needs("bwrap")

PASS_TEST = (
    "mkdir -p /logs/verifier; if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


def write_task(
    root: Path,
    name: str,
    *,
    instruction: str = "Create /app/done.txt.",
    test: str = PASS_TEST,
    solve: str | None = "echo ok > /app/done.txt\n",
    workspace: dict[str, str] | None = None,
    agent_timeout: float = 30,
    verifier_timeout: float = 30,
    extra_toml: str = "",
) -> Path:
    """Write one Harbor-layout task directory and return it."""
    task = root / name
    (task / "tests").mkdir(parents=True, exist_ok=True)
    (task / "environment" / "workspace").mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        textwrap.dedent(
            f"""\
            version = "1.0"
            [metadata]
            difficulty = "easy"
            [agent]
            timeout_sec = {agent_timeout}
            [verifier]
            timeout_sec = {verifier_timeout}
            [environment]
            workdir = "/app"
            """
        )
        + extra_toml
    )
    (task / "instruction.md").write_text(instruction)
    (task / "tests" / "test.sh").write_text("#!/bin/sh\n" + test)
    if solve is not None:
        (task / "solution").mkdir(exist_ok=True)
        (task / "solution" / "solve.sh").write_text("#!/bin/sh\n" + solve)
    for rel, content in (workspace or {}).items():
        path = task / "environment" / "workspace" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return task


def write_spec(path: Path, **spec: Any) -> Path:
    """Write a cohort spec; defaults: tasks from ./tasks, oracle + nop, local executor."""
    data: dict[str, Any] = {
        "name": "t",
        "tasks": [{"path": "tasks"}],
        "subjects": [{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        "executor": {"kind": "local"},
    }
    data.update(spec)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def files_below(root: Path) -> dict[Path, bytes]:
    """The content of every file below ``root`` (or of ``root`` itself); fails on any symlink."""
    if root.is_file() and not root.is_symlink():
        return {root: root.read_bytes()}
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            assert not os.path.islink(os.path.join(dirpath, name)), f"a live link: {os.path.join(dirpath, name)}"
        for name in filenames:
            files[Path(dirpath, name)] = Path(dirpath, name).read_bytes()
    return files


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Cohort:
    """A cohort in a pytester directory: tasks/, cohort.yaml, out/."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.root = pytester.path
        self.tasks = self.root / "tasks"
        self.tasks.mkdir(exist_ok=True)
        self.spec = self.root / "cohort.yaml"
        self.out = self.root / "out"

    def task(self, name: str, **kw: Any) -> Path:
        return write_task(self.tasks, name, **kw)

    def write(self, **spec: Any) -> Path:
        return write_spec(self.spec, **spec)

    def args(self, *extra: str) -> list[str]:
        return [
            f"--maka-spec={self.spec}",
            f"--maka-out={self.out}",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
            *extra,
        ]

    def run(self, *extra: str) -> pytest.RunResult:
        return self.pytester.runpytest(*self.args(*extra))

    def run_subprocess(self, *extra: str, timeout: float = 120) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess(*self.args(*extra), timeout=timeout)

    def results(self) -> dict[str, dict[str, Any]]:
        return {r["cell_id"]: r for r in read_jsonl(self.out / "results.jsonl")}

    def attempts(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "attempts.jsonl")

    def status(self) -> dict[str, str]:
        return {cid: r["status"] for cid, r in self.results().items()}


@pytest.fixture
def cohort(pytester: pytest.Pytester) -> Cohort:
    return Cohort(pytester)


CohortFactory = Callable[..., Cohort]

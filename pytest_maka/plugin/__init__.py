"""pytest entry point: options, spec → items, hook wiring. Controller-side reporting lives in reporter.py."""

from __future__ import annotations

import os
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from .. import builtins, hookspecs, pid1
from ..core.interrupts import first_ctrl_c_only
from ..core.records import report_record
from ..core.taxonomy import HARNESS_SIDE
from ..engine.registry import ENTRY_POINT_GROUP
from . import cluster as cluster_plugin
from . import compat
from . import live as live_plugin
from . import scale as scale_plugin
from .collect import CellItem, CohortFile
from .fixtures import executor_lease, maka_cell, maka_session, maka_workspace  # noqa: F401
from .session import MAKA_KEY, MakaSession
from .strategy import ExecutionStrategy

_CTRL_C_KEY = pytest.StashKey[ExitStack]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pid1.main_guard()  # as a container's PID 1: a minimal init stays PID 1 and reaps orphans
    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(builtins, "maka-builtins")
    pluginmanager.register(scale_plugin, "maka-scale")
    pluginmanager.register(live_plugin, "maka-live-options")
    pluginmanager.register(cluster_plugin, "maka-cluster")
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        pluginmanager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if getattr(early_config.known_args_namespace, "maka_spec", None):
        compat.settle_rootdir(early_config)  # node ids must not depend on --maka-out DIR


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("maka", "pytest-maka: AI-agent evaluations")
    group.addoption("--maka-spec", metavar="PATH", help="cohort spec (YAML); its cells become the test items")
    group.addoption(
        "--maka-out", metavar="DIR", help="output directory (default: reports/<cohort name>); rerunning into it resumes"
    )
    group.addoption(
        "--maka-rerun",
        action="store_true",
        default=False,
        help="run the selected cells again although --maka-out already has their results: a new run of each "
        "cell, recorded beside the earlier ones (never replacing them); the new run's result stands",
    )
    group.addoption(
        "--maka-exit",
        choices=("harness", "pass", "never"),
        default=None,
        help="exit-code policy: 'harness' (default) exits 7 when a cell has no official result "
        "(infra, verifier or policy failure) and 9 when a selected cell was skipped or no cell ran; "
        "'pass' also exits 8 when any cell did not pass; 'never' keeps 0",
    )
    group.addoption(
        "--maka-strict",
        action="store_true",
        default=False,
        help="an invalid task in a task source is a usage error (default: it is reported and its cells skipped)",
    )
    parser.addini("maka_exit", "default for --maka-exit", default="harness")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    spec_option = config.getoption("maka_spec", None)
    if not spec_option:
        _hint_at_a_spec_given_as_a_path(config)
        return
    spec_path = (config.invocation_params.dir / spec_option).resolve()
    maka = MakaSession.create(
        config, spec_path, config.getoption("maka_out"), concurrency=lambda: scale_plugin.concurrency(config)
    )
    config.stash[MAKA_KEY] = maka
    config.stash[_CTRL_C_KEY] = stack = ExitStack()
    stack.enter_context(first_ctrl_c_only())  # a second Ctrl-C cannot cut what the first set off
    _point_collection_at(config, spec_path)
    maka.strategy = choose_strategy(config, maka)
    config.hook.pytest_maka_configure.call_historic(kwargs={"config": config, "cohort": maka.cohort})
    if not hasattr(config, "workerinput"):
        from .reporter import MakaReporter

        config.pluginmanager.register(MakaReporter(config, maka), "maka-reporter")
        from ..report.pytest_html_hooks import register as register_html_columns

        register_html_columns(config, maka.out_dir)


def choose_strategy(config: pytest.Config, maka: MakaSession) -> ExecutionStrategy:
    """How this process runs its cells: on a Dask cluster when one is named (the controller),
    else as ``scale.local_strategy`` says (xdist controller, in-process pool, serial)."""
    return cluster_plugin.dask_strategy(config, maka) or scale_plugin.local_strategy(config, maka)


_SPEC_KEYS = re.compile(rb"^(tasks|subjects)\s*:", re.MULTILINE)


def _hint_at_a_spec_given_as_a_path(config: pytest.Config) -> None:
    """``pytest cohort.yaml`` (no --maka-spec): a usage error that says how to run it, instead of
    pytest's "found no collectors" for a file it cannot collect."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return
    for arg in config.args:
        path = config.invocation_params.dir / arg.split("::", 1)[0]
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            continue
        try:
            with path.open("rb") as fh:
                head = fh.read(65536)
        except OSError:
            continue
        if len(set(m.group(1) for m in _SPEC_KEYS.finditer(head))) == 2:
            raise pytest.UsageError(
                f"{arg} looks like a pytest-maka cohort spec: run it with pytest --maka-spec={arg.split('::', 1)[0]}"
            )


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    maka = config.stash.get(MAKA_KEY, None)
    if maka is None:
        return None
    cohort, loaded = maka.cohort, maka.cohort.loaded
    sandbox = "isolated" if maka.executor.isolated else "NOT isolated"
    return [
        f"maka: cohort {cohort.name}: {len(cohort.cells)} cells = {len(cohort.tasks)} tasks x "
        f"{len(loaded.subjects)} subjects x {loaded.spec.repetitions} repetitions",
        f"maka: executor {loaded.executor.kind} ({sandbox}), output {maka.out_dir_display}",
        *(f"maka: invalid task skipped: {task.invalid}" for task in cohort.tasks if task.invalid),
    ]


def _point_collection_at(config: pytest.Config, spec_path: Path) -> None:
    """Collect the spec: instead of testpaths when no paths were given, else in addition."""
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if not explicit:
        config.args = [str(spec_path)]
        return
    base = config.invocation_params.dir
    if not any((base / arg.split("::", 1)[0]).resolve() == spec_path for arg in config.args):
        config.args = [*config.args, str(spec_path)]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    maka = parent.config.stash.get(MAKA_KEY, None)
    if maka is None or file_path.resolve() != maka.cohort.loaded.path:
        return None
    node = CohortFile.from_parent(parent, path=file_path)
    node.maka = maka
    return node


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if isinstance(item, CellItem) and call.when == "call" and item.maka_record is not None:
        record = item.maka_record
        report.maka = record.to_json()  # type: ignore[attr-defined]  # JSON: xdist ships report.__dict__
        item.user_properties.extend(
            [("maka_status", record.status.value), ("maka_score", record.score), ("maka_cell_key", record.cell_key)]
        )
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """Verifier, infra and policy failures show as errors: not the subject's fault."""
    record = report_record(report) if report.when == "call" and report.failed else None
    if record is not None and record.status in HARNESS_SIDE:
        return "error", "E", "ERROR"
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    maka = config.stash.get(MAKA_KEY, None)
    if maka is not None:
        maka.close()
    stack = config.stash.get(_CTRL_C_KEY, None)
    if stack is not None:
        stack.close()

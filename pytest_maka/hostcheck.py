"""Before any cell runs: is every host component the cohort needs here?

What each component is and which package provides it is ``core.hostreqs``; this module
probes for them (PATH, the Compose binary, the Docker engine) and asks the cohort's parts
what they need: the executor (``host_needs(tasks, egress_cells)``) and each subject
(``host_needs()``), both optional methods. A missing component stops the session with one
line naming it and the package to install, instead of three ``infra_failure`` attempts per cell.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping

from .core.cell import Cell
from .core.cohort import Cohort
from .core.hostreqs import COMPONENTS, Component, Need, missing_line
from .core.network import NETWORK_PHASES
from .core.spec import Policy
from .core.steps import step_views
from .core.task import Task
from .egress.plan import build_plan
from .executors.base import Executor
from .subjects.base import Subject

#: Whether a cell will run (not skipped as unsupported).
Runs = Callable[[Cell], bool]


def _command_found(name: str) -> bool:
    if os.path.isabs(name):
        return os.path.isfile(name) and os.access(name, os.X_OK)
    return shutil.which(name) is not None


def _compose_found() -> bool:
    from .executors.docker.compose_cli import compose_command

    return compose_command() is not None


def _engine_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, no answer: all mean "not here"
        return False


_PROBES: dict[str, Callable[[Component], bool]] = {
    "command": lambda c: any(_command_found(name) for name in c.finds),
    "compose": lambda c: _compose_found(),
    "engine": lambda c: _engine_answers(),
}


def present(component: Component | str) -> bool:
    """True when the component is on this host (probed now, nothing cached)."""
    c = COMPONENTS[component] if isinstance(component, str) else component
    return _PROBES[c.probe](c)


def missing(needs: Iterable[Need]) -> list[Need]:
    """The needs whose component is not on this host (each component probed once)."""
    found: dict[str, bool] = {}
    out = []
    for need in needs:
        if need.component not in found:
            found[need.component] = present(need.component)
        if not found[need.component]:
            out.append(need)
    return out


def egress_cells(cells: Iterable[Cell], subjects: Mapping[str, Subject], policy: Policy) -> int:
    """How many of ``cells`` have a phase (of any step) behind the egress proxy."""
    proxied: dict[tuple[str, str], bool] = {}  # (task, subject): the same for every repetition
    count = 0
    for cell in cells:
        pair = (cell.task.id, cell.subject.name)
        if pair not in proxied:
            subject = subjects[cell.subject.name]
            wanted = (*cell.subject.egress, *subject.egress())
            setup_hosts = tuple(subject.setup_egress())
            plans = [build_plan(view, policy, wanted, setup_hosts) for view in step_views(cell.task)]
            proxied[pair] = any(p.phase(name).mode == "allowlist" for p in plans for name in NETWORK_PHASES)
        count += proxied[pair]
    return count


def cohort_needs(cohort: Cohort, executor: Executor, subjects: Mapping[str, Subject], runs: Runs) -> list[Need]:
    """What the executor and the subjects of the cells that will run need from this host."""
    running = [cell for cell in cohort.cells if runs(cell)]
    tasks: list[Task] = list({id(c.task): c.task for c in running}.values())
    needs: list[Need] = []
    needs += executor.host_needs(tasks, egress_cells(running, subjects, cohort.loaded.spec.policy))
    for name in dict.fromkeys(cell.subject.name for cell in running):
        needs += subjects[name].host_needs()
    return needs


def check(cohort: Cohort, executor: Executor, subjects: Mapping[str, Subject], runs: Runs) -> str | None:
    """None when everything the cohort needs is here, else the one line that says what to install
    (or, for an agent not installed yet, that its pinned version does not exist)."""
    lacking = missing_line(missing(cohort_needs(cohort, executor, subjects, runs)))
    if lacking:
        return lacking
    for name in dict.fromkeys(cell.subject.name for cell in cohort.cells if runs(cell)):
        problem = subjects[name].version_problem()
        if problem:
            return problem
    return None

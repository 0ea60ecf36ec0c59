"""Harbor / Terminal-Bench 2 task sources, and the per-phase network facts on every record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..core.cell import Cell
from ..core.record_model import AttemptRecord
from ..core.spec import TaskSource
from ..core.task import Task
from . import detect, harbor


def pytest_maka_task_formats() -> list[str]:
    return [harbor.FORMAT]


@pytest.hookimpl(trylast=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    if not detect.claims_directory_source(harbor.FORMAT, source, path, spec_path, takes_options=True):
        return None
    return harbor.discover(path, harbor.parse_options(source.adapter_options, spec_path))


def pytest_maka_record(record: AttemptRecord, cell: Cell) -> dict[str, Any]:
    """State, per phase, the network the task declared beside the one the attempt had."""
    task = cell.task
    network = record.isolation.network if record.isolation is not None else None
    granted = network.to_json() if network is not None else {}
    declared = {"agent": task.network, "verifier": task.verifier_declared}
    phases = {
        phase: {"declared": declared[phase], "granted": granted.get(phase, "none" if granted else None)}
        for phase in ("agent", "verifier")
    }
    hosts = task.agent_allowed_hosts
    if hosts:
        phases["agent"]["allowed_hosts"] = list(hosts)
    keys: dict[str, Any] = {"network": phases}
    offered = _declared(task)
    if offered:
        keys["task_declares"] = offered
    return keys


def _declared(task: Task) -> dict[str, Any]:
    """What a Harbor task offers or asks beyond one container, recorded beside what it got."""
    out: dict[str, Any] = {}
    if task.schema_version:
        out["schema_version"] = task.schema_version
    if task.mcp_servers:
        out["mcp_servers"] = [{"name": m.name, "transport": m.transport} for m in task.mcp_servers]
    if task.skills_dir:
        out["skills_dir"] = task.skills_dir
    if task.artifacts:
        out["artifacts"] = [a.source for a in task.artifacts]
    if task.features:
        out["features"] = sorted(task.features)
    return out

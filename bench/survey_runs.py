"""The run side of bench/survey.py: oracle and nop in both harnesses, and where each run's wall time went."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from survey_tasks import TaskFacts

#: What a compose file written by ``harbor tasks migrate`` names that Harbor 0.25 no longer sets
#: (bench/RESULTS.md, "Compose recipes"): Harbor's own defaults, so the migrated task can run.
MIGRATED_ENV = {"CPUS": "1", "MEMORY": "2G", "TEST_DIR": "/tests"}
AGENTS = ("oracle", "nop")
#: Harbor 0.25's trial phases, as its ``result.json`` times them
HARBOR_PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")


@dataclass
class RunTime:
    """Where one run's wall time went: phase sums over its cells, and what no cell accounts for."""

    label: str
    wall_s: float
    workers: int
    cells: int = 0
    cell_s: float = 0.0
    phases: Counter[str] = field(default_factory=Counter)
    #: process start to the first cell's start, and the last cell's end to the process's end
    before_s: float = 0.0
    after_s: float = 0.0
    durations: list[float] = field(default_factory=list)

    def rows(self) -> list[tuple[str, float]]:
        """(what, worker-seconds): every phase, the cells' time in no phase, idle workers, before and after.

        They add up to the wall time times the workers (a worker is idle before the first cell and after the last).
        """
        out = list(self.phases.most_common())
        out.append(("in a cell, in no phase", max(self.cell_s - sum(self.phases.values()), 0.0)))
        span = max(self.wall_s - self.before_s - self.after_s, 0.0)
        out.append(("worker idle between the first and last cell", max(span * self.workers - self.cell_s, 0.0)))
        out.append(("before the first cell (collection, session start)", self.before_s * self.workers))
        out.append(("after the last cell (session end, reports)", self.after_s * self.workers))
        return out


def _at(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def run_time(label: str, cells: list[dict], started: float, ended: float, workers: int, phase_key: str) -> RunTime:
    """Sum ``cells``' phases (``phase_key``: ``timings`` of our records, or Harbor's per-phase spans)."""
    out = RunTime(label=label, wall_s=ended - started, workers=workers, cells=len(cells))
    starts, ends = [], []
    for cell in cells:
        begin, end = _at(cell.get("started_at")), _at(cell.get("finished_at"))
        if begin is None or end is None:
            continue
        starts.append(begin)
        ends.append(end)
        out.durations.append(end - begin)
        out.cell_s += end - begin
        if phase_key == "timings":
            out.phases.update({k: float(v) for k, v in (cell.get("timings") or {}).items()})
        else:
            for phase in HARBOR_PHASES:
                span = cell.get(phase) or {}
                b, e = _at(span.get("started_at")), _at(span.get("finished_at"))
                if b is not None and e is not None:
                    out.phases[phase] += e - b
    if starts:
        out.before_s, out.after_s = max(min(starts) - started, 0.0), max(ended - max(ends), 0.0)
    return out


def median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


Records = dict[str, dict[str, dict]]


def run_maka(dirs: list[Path], work: Path, out_name: str, workers: int = 2) -> tuple[Records, RunTime]:
    """Oracle and nop over every task dir on Docker: records by (task id, agent), and where the time went."""
    spec = work / "survey.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "survey",
                "tasks": [{"path": str(d)} for d in dirs],
                "subjects": [{"name": a, "kind": a} for a in AGENTS],
                "executor": {"kind": "docker"},
                "policy": {"verifier_network": True},  # Harbor gives the verifier the network too
            }
        )
    )
    out = work / out_name
    cmd = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-n", str(workers)]
    started = time.time()
    subprocess.run([*cmd, "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=work, timeout=6 * 3600)
    ended = time.time()
    records: Records = {}
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        record = json.loads(line)
        records.setdefault(record["task"], {})[record["subject"]] = record
    attempts = out / "attempts.jsonl"  # every attempt took wall time, not only the one that stands
    lines = attempts.read_text().splitlines() if attempts.is_file() else []
    cells = [json.loads(line) for line in lines] or [r for t in records.values() for r in t.values()]
    return records, run_time(f"pytest-maka {out_name}", cells, started, ended, workers, "timings")


def harbor_dir(harbor: str, task_dir: Path, work: Path) -> Path:
    """The task dir Harbor runs: itself, or its ``harbor tasks migrate`` output for a legacy task."""
    if (task_dir / "task.toml").is_file():
        return task_dir
    out = work / "harbor-migrated" / task_dir.name
    if not out.is_dir():
        subprocess.run([harbor, "tasks", "migrate", "-i", str(task_dir), "-o", str(out.parent)],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    return out


def run_harbor_cells(
    harbor: str, dirs: dict[str, tuple[TaskFacts, Path]], work: Path, jobs: str
) -> tuple[dict, RunTime]:
    """Every (task, agent) trial through Harbor, one at a time: results by (task id, agent), and the time."""
    from harbor_parity import run_harbor

    os.environ.update({k: v for k, v in MIGRATED_ENV.items() if k not in os.environ})
    out: dict[tuple[str, str], dict] = {}
    trials: list[dict] = []
    started = time.time()
    for task_id, (_, task_dir) in dirs.items():
        for agent in AGENTS:
            name = f"{task_id}-{agent}"
            out[(task_id, agent)] = run_harbor(harbor, harbor_dir(harbor, task_dir, work), agent, work / jobs, name)
            trials += [json.loads(p.read_text()) for p in sorted((work / jobs / name).glob("*/result.json"))]
    return out, run_time(f"Harbor 0.25 {jobs}", trials, started, time.time(), 1, "harbor")

"""Harness overhead per cell on the local executor, for trivial tasks.

Generates trivial Harbor tasks (the subject does nothing, the verifier writes reward 1),
runs the cohort with pytest at ``-n 1`` and ``-n 2`` (a fresh output directory each), and
reads ``attempts.jsonl`` to split each attempt's wall time into the subject's command, the
verifier's command and the rest (the harness):

    overhead per cell = duration_s - agent.duration_s - verifier.duration_s

It also estimates pytest's own cost per item outside the attempt:
``wall x workers / cells - median(duration_s)``.

    python bench/overhead.py [--cells 50] [--subjects oracle,command] [--keep]

Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Subjects a bench cohort can use: name -> spec entry.
SUBJECTS: dict[str, dict[str, Any]] = {
    "oracle": {"name": "oracle", "kind": "oracle"},
    "command": {"name": "noop", "kind": "command", "command": "true"},
    "nop": {"name": "nop", "kind": "nop"},
    "command2": {"name": "noop2", "kind": "command", "command": "true 2"},
}

TASK_TOML = """\
version = "1.0"

[metadata]
difficulty = "trivial"
category = "bench"

[agent]
timeout_sec = 60

[verifier]
timeout_sec = 30

[environment]
workdir = "/app"
"""


class BenchError(Exception):
    """A run that did not produce the figures; the message says why."""


def require_plugin() -> None:
    """Exit with a clear message when this interpreter cannot run the plugin."""
    try:
        import pytest_maka.plugin  # noqa: F401
    except ImportError as e:
        sys.exit(f"cannot import pytest_maka ({e}); use the project's venv: .venv/bin/python {sys.argv[0]}")


def write_trivial_tasks(root: Path, count: int) -> Path:
    """``count`` trivial Harbor tasks under ``root/tasks``: solve is a no-op, the verifier passes."""
    tasks = root / "tasks"
    for i in range(count):
        task = tasks / f"trivial-{i:05d}"
        for sub in ("environment/workspace", "tests", "solution"):
            (task / sub).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text(TASK_TOML)
        (task / "instruction.md").write_text(f"Trivial task {i}: there is nothing to do.\n")
        (task / "environment" / "Dockerfile").write_text(
            "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY workspace/ /app/\n"
        )
        (task / "environment" / "workspace" / "README.md").write_text("nothing to do\n")
        (task / "tests" / "test.sh").write_text(
            "#!/bin/sh\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\necho checked nothing\n"
        )
        (task / "solution" / "solve.sh").write_text("#!/bin/sh\ntrue\n")
    return tasks


def write_spec(root: Path, name: str, subjects: Sequence[str], repetitions: int = 1) -> Path:
    """A cohort spec over ``root/tasks`` (JSON is valid YAML, so no YAML writer is needed)."""
    spec = {
        "name": name,
        "tasks": [{"path": "tasks", "format": "harbor"}],
        "subjects": [SUBJECTS[s] for s in subjects],
        "repetitions": repetitions,
        "executor": {"kind": "local"},
        "policy": {"allow_unsandboxed": True},
    }
    path = root / f"{name}.yaml"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def run_pytest(args: Sequence[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``python -m pytest ARGS``; return (wall seconds, completed process)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def check_run(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """Raise BenchError with the tail of pytest's output when the run failed."""
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BenchError(f"{what} exited with code {proc.returncode}; last lines:\n{tail}")


def read_attempts(out: Path) -> list[dict[str, Any]]:
    path = out / "attempts.jsonl"
    if not path.is_file():
        raise BenchError(f"{path} was not written")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def summarise(label: str, workers: int, wall: float, records: list[dict[str, Any]], cells: int) -> float:
    """Print the figures of one configuration; return the median attempt duration."""
    bad = [r for r in records if r.get("status") != "agent_success"]
    if len(records) < cells or bad:
        statuses = sorted({r.get("status") for r in bad})
        raise BenchError(f"{label}: {len(records)} attempts for {cells} cells; other statuses: {statuses}")
    durations = [r["duration_s"] for r in records]
    agent = [r["agent"]["duration_s"] for r in records]
    verifier = [r["verifier"]["duration_s"] for r in records]
    overhead = [d - a - v for d, a, v in zip(durations, agent, verifier, strict=True)]
    phases: dict[str, list[float]] = {}
    for r in records:
        for phase, seconds in (r.get("timings") or {}).items():
            phases.setdefault(phase, []).append(seconds)

    print(f"\n== {label}: {cells} cells, {workers} worker{'s' if workers > 1 else ''}")
    print(f"  total wall time             {wall:8.2f} s   ({cells / wall:.1f} cells/s)")
    print(f"  attempt duration   median   {ms(statistics.median(durations))}   p90 {ms(pct(durations, 0.9))}")
    print(f"  subject command    median   {ms(statistics.median(agent))}")
    print(f"  verifier command   median   {ms(statistics.median(verifier))}")
    print(f"  harness overhead   median   {ms(statistics.median(overhead))}   p90 {ms(pct(overhead, 0.9))}")
    for phase, values in phases.items():
        print(f"    phase {phase:<20} median {ms(statistics.median(values))}")
    if "setup" in phases:
        print(f"  lease setup (phase setup)      median {ms(statistics.median(phases['setup']))}")
    # Each exec starts a fresh sandbox process: running `true` costs exactly that start.
    noop = [r["agent"]["duration_s"] for r in records if r.get("subject") == SUBJECTS["command"]["name"]]
    if noop:
        print(f"  sandbox exec start (`true`)    median {ms(statistics.median(noop))}")
    outside = wall * workers / cells - statistics.median(durations)
    print(f"  pytest per item outside the attempt (wall x workers / cells - median duration) {ms(outside)}")
    return statistics.median(durations)


def bench(cells: int, subjects: Sequence[str], root: Path, cwd: Path) -> None:
    """Generate the tasks, run both configurations and print their figures."""
    n_tasks = math.ceil(cells / len(subjects))
    cells = n_tasks * len(subjects)
    write_trivial_tasks(root, n_tasks)
    spec = write_spec(root, "bench-overhead", subjects)
    print(f"{n_tasks} trivial tasks x {len(subjects)} subjects ({', '.join(subjects)}) = {cells} cells")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, spec {spec}")

    collect_wall, proc = run_pytest(["--collect-only", "-q", f"--maka-spec={spec}"], cwd)
    check_run(proc, "pytest --collect-only")
    print(f"pytest start-up + collection alone: {collect_wall:.2f} s")

    for workers in (1, 2):
        out = root / f"out-n{workers}"
        args = [f"--maka-spec={spec}", f"--maka-out={out}", "-q"]
        if workers > 1:
            args += ["-n", str(workers)]
        wall, proc = run_pytest(args, cwd)
        check_run(proc, f"pytest -n {workers}")
        median_duration = summarise(f"-n {workers}", workers, wall, read_attempts(out), cells)
        per_item = (wall - collect_wall) * workers / cells - median_duration
        print(f"  same, after subtracting start-up + collection                            {ms(per_item)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=50, help="cells per configuration (min; default 50)")
    parser.add_argument("--subjects", default="oracle,command", help=f"comma-separated, from: {', '.join(SUBJECTS)}")
    parser.add_argument("--keep", action="store_true", help="keep the generated tasks and outputs")
    args = parser.parse_args(argv)
    subjects = [s.strip() for s in args.subjects.split(",") if s.strip()]
    unknown = [s for s in subjects if s not in SUBJECTS]
    if unknown or not subjects or args.cells < 1:
        parser.error(f"--subjects must name some of {', '.join(SUBJECTS)}; --cells must be >= 1")

    require_plugin()
    root = Path(tempfile.mkdtemp(prefix="maka-bench-overhead-"))
    try:
        bench(args.cells, subjects, root, root)
    except BenchError as e:
        print(f"\nbench/overhead.py: FAILED: {e}", file=sys.stderr)
        print(f"(inputs and outputs kept in {root})", file=sys.stderr)
        return 1
    if args.keep:
        print(f"\nkept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

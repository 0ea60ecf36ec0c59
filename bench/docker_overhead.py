"""Harness overhead of the Docker executor per cell, split by phase.

    python bench/docker_overhead.py                 # executor level: 40 cells at concurrency 1 and 4
    python bench/docker_overhead.py --pytest        # also through pytest -n 1 / -n 4 (2 s tasks)
    python bench/docker_overhead.py --skip-executor --harbor /tmp/harbor-venv/bin/harbor  # beside Harbor

Executor level: each cell goes through the lifecycle's executor calls for a trivial task
(lease, put instruction, subject ``true``, the lifecycle's restore step, the taint rule's
access watch, verifier, copy-out, release) and every
phase is timed; the table shows medians. Then cells whose subject sleeps 2 s run at
concurrency 1 and 4 and the throughputs are compared. ``--pytest`` runs a generated cohort
of 2 s tasks with ``executor: {kind: docker}`` under ``pytest -n 1`` and ``-n 4``.
``--harbor PATH`` runs the trivial parity task (``bench/harbor_parity_tasks/make-file``, oracle
and nop) ``--harbor-trials`` times through Harbor 0.25 and through pytest-maka, warm (images
built first) at concurrency 1, and prints each one's median wall time per trial / cell and the ratio.
Needs a Docker engine with python:3.11-slim (../shared/ci/provision-docker.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import inspect  # noqa: E402

from pytest_maka.core.task import Task, digest_tree  # noqa: E402
from pytest_maka.executors.base import LeaseRequest  # noqa: E402
from pytest_maka.executors.docker import DockerExecutor, DockerOptions  # noqa: E402
from pytest_maka.run.restore import restore_for_verification  # noqa: E402
from pytest_maka.testing.conformance import make_cell  # noqa: E402

try:  # the access watch of the taint rule (absent from trees before it)
    from pytest_maka.run.taint import arm
except ImportError:
    arm = None

PHASES = ("start", "copy-in", "subject", "stop", "restore", "verify", "taint", "copy-out", "remove")
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def make_task(root: Path) -> Task:
    (root / "environment" / "workspace").mkdir(parents=True, exist_ok=True)
    (root / "environment" / "workspace" / "input.txt").write_text("hello\n")
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    return Task(
        id="bench-task",
        path=root,
        instruction="do nothing",
        digest=digest_tree(root),
        environment_dir=root / "environment",
        workspace_dir=root / "environment" / "workspace",
        tests_dir=root / "tests",
    )


def one_cell(executor: DockerExecutor, task: Task, work: Path, n: int, subject: str) -> dict[str, float]:
    """The executor calls of one attempt, in lifecycle order, each phase timed."""
    d = work / f"cell-{n}"
    (d / "scratch").mkdir(parents=True)
    (d / "instruction.md").write_text(task.instruction)
    (d / "empty").mkdir()
    req = LeaseRequest(cell=make_cell(task, work), attempt=1, attempt_dir=d, scratch_dir=d / "scratch")
    t: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        t[phase] = t.get(phase, 0.0) + now - mark
        mark = now

    lease = executor.lease(req)
    sandbox = lease.__enter__()
    try:
        lap("start")
        sandbox.put(d / "instruction.md", "/logs/agent/instruction.md")
        lap("copy-in")
        res = sandbox.exec(subject, env=ENV, timeout_sec=60, stdout_path=d / "a.out", stderr_path=d / "a.err")
        lap("subject")
        t["subject"] -= sandbox.last_stop_s
        t["stop"] = sandbox.last_stop_s
        t["subject_cmd"] = res.duration_s
        sandbox.get("/logs/agent", d / "agent")
        sandbox.workspace_snapshot(d / "workspace-after")
        sandbox.baseline_workspace()
        lap("copy-out")
        # the lifecycle's own restore step (tests in fresh; before fidelity-first it also put
        # the protected paths back), then the taint rule's watch where the tree has it
        params = inspect.signature(restore_for_verification).parameters
        extra = {"task_format": task.format} if "task_format" in params else {}
        restore_for_verification(sandbox, task.tests_dir, d / "scratch", **extra)
        armed = arm(sandbox) if arm is not None else None
        lap("restore")
        res = sandbox.exec(
            "sh /tests/test.sh", env=ENV, timeout_sec=60, stdout_path=d / "v.out", stderr_path=d / "v.err"
        )
        assert res.exit_code == 0, (d / "v.err").read_text()
        lap("verify")
        t["stop"] += sandbox.last_stop_s
        t["verify"] -= sandbox.last_stop_s
        if armed is not None and armed.watched:
            sandbox.accessed()
        lap("taint")
        assert sandbox.get("/logs/verifier", d / "verifier")
        sandbox.get("/logs/artifacts", d / "artifacts")
        lap("copy-out")
    finally:
        lease.__exit__(None, None, None)
    lap("remove")
    return t


def run_cells(
    task: Task, work: Path, *, cells: int, concurrency: int, subject: str, state: Path
) -> tuple[list[dict[str, float]], float]:
    executor = DockerExecutor(DockerOptions(slots_per_engine=concurrency, state_dir=state))
    one_cell(executor, task, work / f"warm-{concurrency}-{subject[:5]}", 0, "true")  # warm image and baseline
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        rows = list(
            pool.map(
                lambda n: one_cell(executor, task, work / f"c{concurrency}-{subject[:5]}", n, subject), range(cells)
            )
        )
    wall = time.perf_counter() - started
    executor.close()
    return rows, wall


def table(label: str, rows: list[dict[str, float]], wall: float, subject_s: float) -> float:
    med = {p: statistics.median(r.get(p, 0.0) for r in rows) for p in PHASES}
    totals = [sum(r.get(p, 0.0) for p in PHASES) - subject_s for r in rows]
    print(f"\n{label}: {len(rows)} cells, wall {wall:.1f} s, throughput {len(rows) / wall:.2f} cells/s")
    print("  " + "  ".join(f"{p:>8}" for p in PHASES) + "  overhead/cell")
    print("  " + "  ".join(f"{med[p]:8.3f}" for p in PHASES) + f"  {statistics.median(totals):8.3f} s (median)")
    return len(rows) / wall


def executor_level(args: argparse.Namespace, work: Path) -> None:
    task = make_task(work / "task")
    state = work / "state"
    print(
        "Executor level (medians in seconds; 'subject' and 'verify' exclude the command's own run time"
        " only for the sleep runs)"
    )
    for c in args.concurrency:
        rows, wall = run_cells(task, work, cells=args.cells, concurrency=c, subject="true", state=state)
        table(f"trivial cells, concurrency {c}", rows, wall, 0.0)
    rates = {}
    for c, cells in ((1, args.sleep_cells), (4, args.sleep_cells * 2)):
        rows, wall = run_cells(task, work, cells=cells, concurrency=c, subject="sleep 2", state=state)
        for r in rows:
            r["subject"] -= 2.0
        rates[c] = table(f"2 s cells, concurrency {c} (subject column: time beyond the 2 s)", rows, wall, 0.0)
    print(f"\nthroughput concurrency 4 / concurrency 1 for 2 s cells: {rates[4] / rates[1]:.2f}x (target >= 3x)")


def pytest_level(args: argparse.Namespace, work: Path) -> None:
    tasks = work / "cohort" / "tasks"
    for i in range(args.pytest_cells):
        t = tasks / f"sleep-{i:02d}"
        (t / "tests").mkdir(parents=True)
        (t / "environment" / "workspace").mkdir(parents=True)
        (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n')
        (t / "instruction.md").write_text("sleep\n")
        (t / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    spec = work / "cohort" / "cohort.yaml"
    spec.write_text(
        textwrap.dedent("""\
        name: bench
        tasks: [{path: tasks}]
        subjects: [{name: sleeper, kind: command, command: "sleep 2"}]
        executor: {kind: docker}
        """)
    )
    print("\nThrough pytest (cells whose subject sleeps 2 s; overhead = cell duration - agent time)")
    rates = {}
    for n in (1, 4):
        out = work / f"out-n{n}"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--maka-spec={spec}",
            f"--maka-out={out}",
            "-n",
            str(n),
        ]
        if args.plugin:
            cmd[3:3] = ["-p", args.plugin]
        started = time.perf_counter()
        proc = subprocess.run(
            cmd,
            cwd=work / "cohort",
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            },
        )
        wall = time.perf_counter() - started
        rows = (
            [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
            if (out / "attempts.jsonl").exists()
            else []
        )
        if proc.returncode != 0 or len(rows) != args.pytest_cells:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            raise SystemExit(f"pytest -n {n} failed (exit {proc.returncode})")
        overhead = [r["duration_s"] - r["timings"].get("agent", 0.0) for r in rows]
        span = (
            max(datetime.fromisoformat(r["finished_at"]) for r in rows)
            - min(datetime.fromisoformat(r["started_at"]) for r in rows)
        ).total_seconds()
        rates[n] = len(rows) / span
        print(
            f"  -n {n}: {len(rows)} cells, wall {wall:.1f} s with pytest start-up, {span:.1f} s from first cell "
            f"start to last cell end: {len(rows) / wall:.2f} / {rates[n]:.2f} cells/s; "
            f"overhead per cell median {statistics.median(overhead):.3f} s (+ exec overhead inside 'agent')"
        )
        keys = sorted({k for r in rows for k in r["timings"]})
        print(
            "        kernel phases (median s): "
            + ", ".join(f"{k} {statistics.median(r['timings'].get(k, 0.0) for r in rows):.3f}" for k in keys)
        )
    print(f"  throughput -n 4 / -n 1 (cells running): {rates[4] / rates[1]:.2f}x (target >= 3x)")


def beside_harbor(args: argparse.Namespace, work: Path) -> None:
    """The trivial task, warm, at concurrency 1: Harbor's wall time per trial against ours per cell."""
    sys.path.insert(0, str(ROOT / "bench"))
    from harbor_parity import AGENTS, maka_verdict, run_harbor, run_maka

    task = ROOT / "bench" / "harbor_parity_tasks" / "make-file"
    n = args.harbor_trials
    print(f"\nBeside Harbor: {task.name}, oracle and nop, {n} warm trials / cells each, concurrency 1")
    print(f"  load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    run_maka([task], work, "parity-cold")  # builds the image
    maka, _ = run_maka([task], work, "parity-warm", n)
    run_harbor(args.harbor, task, "nop", work / "jobs", "cold")  # builds the image
    theirs = {a: run_harbor(args.harbor, task, a, work / "jobs", f"warm-{a}", n) for a in AGENTS}
    print(f"  load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ours_all: list[float] = []
    theirs_all: list[float] = []
    for agent in AGENTS:
        cells = maka.get((task.name, agent), [])
        ours = [c["duration_s"] for c in cells if c.get("duration_s") is not None]
        h = theirs[agent]
        ours_all += ours
        theirs_all += h["trials_s"]
        verdicts = {maka_verdict(c) for c in cells}
        print(
            f"  {agent:<6} Harbor 0.25: {h['verdict']}, median {_median(h['trials_s'])} s per trial "
            f"({len(h['trials_s'])} trials) | pytest-maka: {'/'.join(sorted(verdicts))}, "
            f"median {_median(ours)} s per cell ({len(ours)} cells)"
        )
    if ours_all and theirs_all:
        ratio = statistics.median(theirs_all) / statistics.median(ours_all)
        print(f"  Harbor trial / pytest-maka cell (medians over both agents): {ratio:.1f}x")


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--sleep-cells", type=int, default=8)
    parser.add_argument("--pytest", action="store_true", help="also run cohorts through pytest -n 1 / -n 4")
    parser.add_argument("--pytest-cells", type=int, default=16)
    parser.add_argument("--plugin", default=None, help="extra -p plugin for pytest (e.g. one registering docker)")
    parser.add_argument("--skip-executor", action="store_true")
    parser.add_argument("--harbor", default=None, help="the harbor executable: also time the trivial task beside it")
    parser.add_argument("--harbor-trials", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="maka-bench-") as tmp:
        work = Path(tmp)
        if not args.skip_executor:
            executor_level(args, work)
        if args.pytest:
            pytest_level(args, work)
        if args.harbor:
            beside_harbor(args, work)


if __name__ == "__main__":
    main()

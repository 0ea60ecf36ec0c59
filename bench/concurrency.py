"""Wall time and peak harness memory: many cells per process (--maka-concurrency) against -n.

Generates CELLS trivial Harbor tasks whose subject sleeps SLEEP seconds (the stand-in for
an agent waiting on a model), runs the cohort on the local executor once per configuration
(a fresh output directory each) and prints, per configuration:

    wall      seconds from start to exit of the pytest command
    ideal     SLEEP x CELLS / (processes x concurrency): the wall time of perfect overlap
    ratio     wall / ideal
    start s   the same command with --collect-only (interpreter, plugins, spec, collection):
              the start-up that the issue's target ("1.5x the ideal plus start-up") adds
    run/ideal (wall - start) / ideal: the target is 1.5
    cpu s     CPU seconds (user + system) of the whole run: the harness processes, the
              sandboxes and the subjects
    cpu/cell  (cpu s - the start-up's CPU) / cells, in ms: what each cell costs the machine
    peak MB   the largest sum of RSS over the pytest processes (controller and xdist
              workers; the sandboxes and the subjects' own processes are not the harness)

    python bench/concurrency.py [--cells 200] [--sleep 5] [--configs 1x1,1x8,1x50,1x200,8x1,50x1]
                                [--scratch DIR]

``--scratch DIR`` runs pytest with TMPDIR=DIR: the sandboxes' scratch directories (workspace,
/logs, uploads) are made there, e.g. on a tmpfs (/dev/shm); the output directory stays where
the bench puts it.

A configuration ``PxC`` is ``-n P`` (1: no xdist) with ``--maka-concurrency C``; each
configuration of the list runs into an output directory of its own (``1x200,1x200`` runs
the same configuration twice, both from scratch).
Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

TASK_TOML = """\
version = "1.0"
[agent]
timeout_sec = 600
[verifier]
timeout_sec = 60
[environment]
workdir = "/app"
"""
#: The runs' environment: bytecode caches on, as in an ordinary install (a shell that sets
#: PYTHONDONTWRITEBYTECODE would otherwise recompile every module at every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
TEST = "#!/bin/sh\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"


def make_cohort(root: Path, cells: int, sleep: float) -> Path:
    for i in range(cells):
        task = root / "tasks" / f"t{i:04d}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(TASK_TOML)
        (task / "instruction.md").write_text("Wait.")
        (task / "tests" / "test.sh").write_text(TEST)
    spec = {
        "name": "bench-concurrency",
        "tasks": [{"path": "tasks"}],
        "subjects": [{"name": "sleeper", "kind": "command", "command": f"sleep {sleep}"}],
        "executor": {"kind": "local"},
    }
    path = root / "cohort.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _rss_of_tree(root_pid: int) -> int:
    """Sum of RSS (bytes) of ``root_pid`` and its Python descendants (the harness processes).

    A child caught between its fork and its exec (every sandbox's start) still shows its parent's
    name, command line and memory: it is not counted (it was, before 2026-12-03, inflating the
    peak at high concurrency by whatever forks were under way at the sample)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    cmdlines: dict[int, bytes] = {}
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        pid = int(entry.name)
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        parents[pid] = int(rest[1])
        children.setdefault(parents[pid], []).append(pid)
        names[pid] = name
        cmdlines[pid] = cmdline
        rss[pid] = int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        forked = pid != root_pid and cmdlines.get(pid) == cmdlines.get(parents.get(pid, 0))
        if pid == root_pid or (names.get(pid, "").startswith("python") and not forked):
            total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run(
    spec: Path, out: Path, processes: int, concurrency: int, extra: Sequence[str] = (), env: dict[str, str] = ENV
) -> tuple[float, int, int, float]:
    """(wall seconds, peak harness bytes, exit code, CPU seconds of the process tree) of one pytest run."""
    argv = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-p", "no:cacheprovider"]
    argv += ["--maka-live", "off", "--maka-concurrency", str(concurrency), *extra]
    if processes > 1:
        argv += ["-n", str(processes)]
    peak = 0
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=spec.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, _rss_of_tree(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    return wall, peak, proc.returncode, usage.ru_utime + usage.ru_stime


def startup(spec: Path, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the same pytest command with --collect-only (nothing runs)."""
    argv = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-p", "no:cacheprovider"]
    started = time.monotonic()
    argv += ["--collect-only"]
    proc = subprocess.Popen(argv, cwd=spec.parent, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime


def run_dirs(root: Path, configs: Sequence[tuple[int, int]]) -> list[tuple[Path, Path]]:
    """(start-up output, run output) directory per configuration, distinct for every entry:
    a configuration listed twice runs twice from scratch, never resuming the first run."""
    return [(root / f"out-{n}-collect", root / f"out-{n}-{p}x{c}") for n, (p, c) in enumerate(configs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--configs", default="1x1,1x8,1x50,1x200,8x1,50x1", help="comma-separated PxC")
    parser.add_argument("--keep", action="store_true", help="keep the generated cohort and outputs")
    parser.add_argument("--scratch", help="TMPDIR for the runs (where the sandboxes' scratch directories go)")
    args = parser.parse_args()
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    root = Path(tempfile.mkdtemp(prefix="maka-bench-conc-"))
    try:
        spec = make_cohort(root, args.cells, args.sleep)
        env = {**ENV, "TMPDIR": args.scratch} if args.scratch else ENV
        where = f", scratch in {args.scratch}" if args.scratch else ""
        print(f"{args.cells} cells, subject sleeps {args.sleep:g} s, local executor, {os.cpu_count()} cpus{where}")
        head = ["wall s", "ideal s", "ratio", "start s", "run/ideal", "cpu s", "cpu/cell", "peak MB"]
        print(f"{'config':>16}  " + "  ".join(f"{h:>9}" for h in head) + "  exit  load")
        for (processes, concurrency), (collect_out, out) in zip(configs, run_dirs(root, configs), strict=True):
            load = os.getloadavg()[0]
            start, start_cpu = startup(spec, collect_out)
            wall, peak, code, cpu = run(spec, out, processes, concurrency, env=env)
            ideal = args.sleep * args.cells / min(args.cells, processes * concurrency)
            label = f"-n {processes} --mc {concurrency}"
            per_cell = 1000 * (cpu - start_cpu * processes) / args.cells
            values = [wall, ideal, wall / ideal, start, (wall - start) / ideal, cpu, per_cell]
            figures = "  ".join(f"{v:9.2f}" for v in values) + f"  {peak / 2**20:9.0f}"
            print(f"{label:>16}  {figures}  {code:>4}  {load:4.1f}", flush=True)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

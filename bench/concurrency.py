"""Wall time and peak harness memory: many cells per process (--maka-concurrency) against -n.

Generates CELLS trivial Harbor tasks whose subject sleeps SLEEP seconds (the stand-in for
an agent waiting on a model), runs the cohort on the local executor once per configuration
(a fresh output directory each) and prints, per configuration:

    wall      seconds from start to exit of the pytest command
    ideal     SLEEP x CELLS / (processes x concurrency): the wall time of perfect overlap
    ratio     wall / ideal
    peak MB   the largest sum of RSS over the pytest processes (controller and xdist
              workers; the sandboxes and the subjects' own processes are not the harness)

    python bench/concurrency.py [--cells 200] [--sleep 5] [--configs 1x1,1x8,1x50,1x200,8x1,50x1]

A configuration ``PxC`` is ``-n P`` (1: no xdist) with ``--maka-concurrency C``.
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
    """Sum of RSS (bytes) of ``root_pid`` and its Python descendants (the harness processes)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue
        pid = int(entry.name)
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(rest[1]), []).append(pid)
        names[pid] = name
        rss[pid] = int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        if names.get(pid, "").startswith("python") or pid == root_pid:
            total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run(spec: Path, out: Path, processes: int, concurrency: int, extra: Sequence[str] = ()) -> tuple[float, int, int]:
    """(wall seconds, peak harness bytes, exit code) of one pytest run."""
    argv = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-p", "no:cacheprovider"]
    argv += ["--maka-live", "off", "--maka-concurrency", str(concurrency), *extra]
    if processes > 1:
        argv += ["-n", str(processes)]
    peak = 0
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=spec.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, _rss_of_tree(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    return wall, peak, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--configs", default="1x1,1x8,1x50,1x200,8x1,50x1", help="comma-separated PxC")
    parser.add_argument("--keep", action="store_true", help="keep the generated cohort and outputs")
    args = parser.parse_args()
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    root = Path(tempfile.mkdtemp(prefix="maka-bench-conc-"))
    try:
        spec = make_cohort(root, args.cells, args.sleep)
        print(f"{args.cells} cells, subject sleeps {args.sleep:g} s, local executor, {os.cpu_count()} cpus")
        print(f"{'config':>16}  {'wall s':>8}  {'ideal s':>8}  {'ratio':>6}  {'peak MB':>8}  exit")
        for processes, concurrency in configs:
            wall, peak, code = run(spec, root / f"out-{processes}x{concurrency}", processes, concurrency)
            ideal = args.sleep * args.cells / min(args.cells, processes * concurrency)
            label = f"-n {processes} --mc {concurrency}"
            figures = f"{wall:8.1f}  {ideal:8.1f}  {wall / ideal:6.2f}  {peak / 2**20:8.0f}"
            print(f"{label:>16}  {figures}  {code}", flush=True)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Collection cost of a large cohort: ``pytest --collect-only`` over 10,000 cells.

Generates trivial Harbor tasks (default 500 tasks x 4 subjects x 5 repetitions), then
times, in a subprocess, ``pytest --collect-only -q --maka-spec=SPEC`` for that cohort and
for a one-cell cohort (pytest's fixed start-up cost), and, in this process, the spec load,
the task loading and the cohort build that the plugin performs during configuration.

    python bench/collection.py [--tasks 500] [--repetitions 5] [--keep]

Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from overhead import BenchError, check_run, require_plugin, run_pytest, write_spec, write_trivial_tasks

COLLECTION_SUBJECTS = ("oracle", "nop", "command", "command2")


def collect(spec: Path, cwd: Path, expected: int) -> float:
    """Time ``pytest --collect-only -q`` for ``spec``; check that ``expected`` items were collected."""
    wall, proc = run_pytest(["--collect-only", "-q", f"--maka-spec={spec}"], cwd)
    check_run(proc, f"pytest --collect-only ({spec.name})")
    found = re.search(r"(\d+) tests? collected", proc.stdout)
    if found is None or int(found.group(1)) != expected:
        shown = found.group(0) if found else "no 'N tests collected' line"
        raise BenchError(f"expected {expected} cells collected from {spec.name}, got: {shown}")
    return wall


def in_process(spec: Path, repeats: int = 3) -> None:
    """Time spec load, task discovery, cohort build and cell keys without pytest (best of ``repeats``)."""
    try:
        from pytest_maka import builtins
        from pytest_maka.benchmarks import harbor
        from pytest_maka.core.cohort import build_cohort
        from pytest_maka.core.spec import load_spec
    except ImportError as e:
        print(f"  in-process timing skipped: {e}")
        return
    subject_kinds = {k: cls.Options for k, cls in builtins.pytest_maka_subject_kinds().items()}
    executor_kinds = {k: cls.Options for k, cls in builtins.pytest_maka_executor_kinds().items()}
    best: dict[str, float] = {}
    cells = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        loaded = load_spec(spec, subject_kinds, executor_kinds)
        t1 = time.perf_counter()
        per_source = [harbor.discover(loaded.source_path(source)) for source in loaded.spec.tasks]
        t2 = time.perf_counter()
        cohort = build_cohort(loaded, per_source)
        t3 = time.perf_counter()
        keys = {cell.key for cell in cohort.cells} | {cell.id for cell in cohort.cells}
        t4 = time.perf_counter()
        cells = len(cohort.cells)
        if len(keys) != 2 * cells:
            raise BenchError("cell ids and keys are not unique")
        for name, seconds in (
            ("load_spec", t1 - t0),
            ("load tasks (harbor.discover)", t2 - t1),
            ("build_cohort", t3 - t2),
            ("cell ids + keys", t4 - t3),
        ):
            best[name] = min(best.get(name, seconds), seconds)
    total = sum(best.values())
    print(f"  in process, best of {repeats}, {cells} cells:")
    for name, seconds in best.items():
        print(f"    {name:<30} {seconds:8.3f} s")
    print(f"    {'total':<30} {total:8.3f} s   ({cells / total:,.0f} cells/s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="generated tasks (default 500)")
    parser.add_argument("--repetitions", type=int, default=5, help="repetitions per cell (default 5)")
    parser.add_argument("--keep", action="store_true", help="keep the generated tasks")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.repetitions < 1:
        parser.error("--tasks and --repetitions must be >= 1")
    require_plugin()

    root = Path(tempfile.mkdtemp(prefix="maka-bench-collection-"))
    cells = args.tasks * len(COLLECTION_SUBJECTS) * args.repetitions
    try:
        t0 = time.perf_counter()
        write_trivial_tasks(root, args.tasks)
        spec = write_spec(root, "bench-collection", COLLECTION_SUBJECTS, args.repetitions)
        print(
            f"{args.tasks} tasks x {len(COLLECTION_SUBJECTS)} subjects x {args.repetitions} repetitions "
            f"= {cells} cells (generated in {time.perf_counter() - t0:.2f} s)"
        )

        small_root = root / "small"
        write_trivial_tasks(small_root, 1)
        small = write_spec(small_root, "bench-collection-small", ["oracle"])
        base = collect(small, root, 1)
        wall = collect(spec, root, cells)
        print(f"  pytest --collect-only, 1 cell:      {base:8.2f} s   (start-up)")
        print(f"  pytest --collect-only, {cells} cells: {wall:8.2f} s   ({cells / wall:,.0f} cells/s)")
        extra = max(wall - base, 1e-9)
        print(
            f"  marginal cost per cell:             {extra / max(cells - 1, 1) * 1e6:8.1f} us"
            f"   ({max(cells - 1, 1) / extra:,.0f} cells/s beyond start-up)"
        )
        in_process(spec)
    except BenchError as e:
        print(f"\nbench/collection.py: FAILED: {e}", file=sys.stderr)
        print(f"(generated files kept in {root})", file=sys.stderr)
        return 1
    if args.keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

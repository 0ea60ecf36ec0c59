"""Cost of the restore step (protected paths back before verification) per executor.

Times ``restore_protected()`` of a leased sandbox after a subject command, for an honest
subject (nothing outside the workdir), for one that plants fake ``sh``/``bash``/``python3``
earlier on PATH and for one that rewrites the real ``python3`` keeping its size and mtime
(``caught``: the rewrite was found and put back), on the local executor (bwrap) and, when an
engine answers, on Docker with ``protected_check: changes`` (the default) and ``content``.

    python bench/restore.py [--repeats 5] [--no-docker]

Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pytest_maka.executors.base import Executor, LeaseRequest
from pytest_maka.executors.local import LocalExecutor, LocalOptions
from pytest_maka.testing.conformance import make_cell, make_task
from pytest_maka.testing.conformance.tamper import PLANT_TOOLS, SAME_SIZE_REWRITE

SUBJECTS = {"honest": "echo done > done.txt", "path-hijack": PLANT_TOOLS, "same-size": SAME_SIZE_REWRITE}


def measure(executor: Executor, root: Path, command: str, repeats: int) -> tuple[list[float], dict]:
    task = make_task(root / "task")
    executor.prepare([task])
    times, report = [], {}
    for n in range(repeats):
        request = LeaseRequest(
            cell=make_cell(task, root), attempt=1, attempt_dir=root / f"a{n}", scratch_dir=root / f"s{n}"
        )
        with executor.lease(request) as sandbox:
            sandbox.exec(
                command, env={"PATH": "/usr/bin:/bin"}, timeout_sec=60, stdout_path=root / "o", stderr_path=root / "e"
            )
            started = time.perf_counter()
            report = sandbox.restore_protected(root / f"s{n}")  # type: ignore[attr-defined]
            times.append(time.perf_counter() - started)
    return times, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    executors: list[tuple[str, Executor]] = [("local (bwrap)", LocalExecutor(LocalOptions()))]
    if not args.no_docker:
        from pytest_maka.executors.docker import DockerExecutor, DockerOptions

        with tempfile.TemporaryDirectory() as state:
            docker = DockerExecutor(DockerOptions(state_dir=Path(state)))
            content = DockerExecutor(DockerOptions(state_dir=Path(state), protected_check="content"))
            try:
                docker.check()
                executors += [("docker", docker), ("docker content", content)]
            except Exception as exc:  # no engine here: report local only
                print(f"docker: skipped ({exc})")
            run(executors, args.repeats)
            docker.close()
            content.close()
    else:
        run(executors, args.repeats)


def run(executors: list[tuple[str, Executor]], repeats: int) -> None:
    print(f"{'executor':<16}{'subject':<14}{'median s':>10}{'max s':>9}  restored  caught")
    for name, executor in executors:
        for subject, command in SUBJECTS.items():
            with tempfile.TemporaryDirectory() as tmp:
                times, report = measure(executor, Path(tmp), command, repeats)
            restored = report.get("restored_count", len(report.get("restored", [])))
            caught = any("/python3." in p for p in report.get("restored", [])) if subject == "same-size" else "-"
            median, worst = statistics.median(times), max(times)
            print(f"{name:<16}{subject:<14}{median:>10.3f}{worst:>9.3f}  {restored:>8}  {caught}")


if __name__ == "__main__":
    main()

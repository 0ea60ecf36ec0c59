"""Cost of one trivial verifier command (``true``) on Docker: through the private verdict channel
(``executors/docker/verdict.py``: the helper, the namespaces, the confinement, the cgroup) and
through ``docker exec`` (the same sandbox with no channel open).

    python bench/verdict_overhead.py [--repeats 30]

Prints the median and the spread of each, in seconds; figures only, nothing asserts on timing.
Needs a local engine and root (else the channel is the shared one and both rows time ``docker exec``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.docker import DockerExecutor, DockerOptions
from pytest_maka.testing.conformance import make_cell, make_task

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _time(sandbox, root: Path, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for n in range(repeats + 1):
        started = time.perf_counter()
        result = sandbox.exec(
            "true", env={"PATH": PATH}, timeout_sec=60, stdout_path=root / "o", stderr_path=root / "e"
        )
        if n:  # the first one warms the engine's and the kernel's caches
            times.append(time.perf_counter() - started)
        assert result.exit_code == 0, result
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        executor = DockerExecutor(DockerOptions(state_dir=Path(state), slots_per_engine=2))
        try:
            executor.check()
            task = make_task(root / "task")
            executor.prepare([task])
            scratch = root / "scratch"
            scratch.mkdir()
            request = LeaseRequest(
                cell=make_cell(task, root), attempt=1, attempt_dir=root / "attempt", scratch_dir=scratch
            )
            with executor.lease(request) as sandbox:
                plain = _time(sandbox, root, args.repeats)
                sandbox.open_verdict(None, scratch)  # type: ignore[attr-defined]
                private = _time(sandbox, root, args.repeats)
                channel = sandbox.verdict_channel().split(":")[0]  # type: ignore[attr-defined]
                sandbox.close_verdict()  # type: ignore[attr-defined]
        finally:
            executor.close()
    for name, times in (("docker exec", plain), (f"verdict channel ({channel})", private)):
        q = statistics.quantiles(times, n=10)
        print(f"{name:32s} median {statistics.median(times):.3f} s  p10 {q[0]:.3f}  p90 {q[-1]:.3f}  (n={len(times)})")


if __name__ == "__main__":
    main()

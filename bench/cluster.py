"""The same cohort on a local Dask cluster of two workers, against one process.

Starts ``dask scheduler`` and two ``maka worker --cells C`` (Dask workers) on
127.0.0.1, runs CELLS cells whose subject sleeps SLEEP seconds with ``--maka-cluster``, then
the same cohort in one process with ``--maka-concurrency 2C``, and prints wall time, the
ideal (perfect overlap of 2C cells) and the controller's peak RSS for both. On one machine
the cluster only adds overhead (task shipping, an engine per worker, artifacts
packed and unpacked); the figure says how much. ``cpu s`` is the controller's process tree
only (the workers' CPU is not counted); ``load`` is the load average when the run started.

    python bench/cluster.py [--cells 40] [--sleep 5] [--per-worker 10]

Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from concurrency import make_cohort, run


def start_cluster(per_worker: int, logs: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).with_name("dask"))
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            stdout=(logs / "scheduler.log").open("wb"), stderr=subprocess.STDOUT,
        )
    ]  # fmt: skip
    maka = str(Path(sys.executable).with_name("maka"))
    for name in ("w1", "w2"):
        argv = [maka, "worker", address, "--host", "127.0.0.1", "--name", name, "--cells", str(per_worker)]
        procs.append(subprocess.Popen(argv, stdout=(logs / f"{name}.log").open("wb"), stderr=subprocess.STDOUT))
    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=120)
    return address, procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--per-worker", type=int, default=10, help="cells each Dask worker runs at once")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="maka-bench-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        spec = make_cohort(root, args.cells, args.sleep)
        slots = 2 * args.per_worker
        ideal = args.sleep * args.cells / min(args.cells, slots)
        started = time.monotonic()
        address, procs = start_cluster(args.per_worker, root)
        print(f"{args.cells} cells, subject sleeps {args.sleep:g} s; cluster of 2 workers x {args.per_worker} cells")
        print(f"(cluster start-up {time.monotonic() - started:.1f} s, not counted)")
        print(f"{'run':>28}  {'wall s':>8}  {'ideal s':>8}  {'ratio':>6}  {'peak MB':>8}  {'cpu s':>6}  exit  load")
        runs = [
            # as many in flight as the workers take (an explicit --maka-concurrency 1 would keep one)
            (f"--maka-cluster (2 workers) --mc {slots}", (1, slots, ["--maka-cluster", address]), root / "out-cluster"),
            (f"one process --mc {slots}", (1, slots, []), root / "out-local"),
        ]
        for label, (processes, concurrency, extra), out in runs:
            load = os.getloadavg()[0]
            wall, peak, code, cpu = run(spec, out, processes, concurrency, extra)
            figures = f"{wall:8.1f}  {ideal:8.1f}  {wall / ideal:6.2f}  {peak / 2**20:8.0f}  {cpu:6.1f}"
            print(f"{label:>28}  {figures}  {code:>4}  {load:4.1f}", flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

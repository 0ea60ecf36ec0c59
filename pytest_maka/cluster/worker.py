"""``maka worker SCHEDULER``: a Dask worker with the settings pytest-maka needs.

It runs ``dask worker`` (the process is replaced by it: signals, logs and exit codes are
Dask's own) with ``--resources cells=N`` (a cell is only ever sent to a worker that has
the ``cells`` resource), ``--nthreads`` at least N (a cell holds its thread for its whole
run), pytest-maka's preload (checks the settings, closes the worker's cohort engines at
its end), no nanny, and no dashboard unless asked for: nothing listens beyond the worker's
own port, on the host the user names. Flags after ``--`` go to ``dask worker`` unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..core.spec import cluster_address

PRELOAD = "pytest_maka.cluster.preload"


class WorkerUsageError(ValueError):
    """A bad ``maka worker`` argument: one line for the user."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``maka worker`` options (the CLI registers the subcommand)."""
    parser.add_argument("scheduler", metavar="SCHEDULER", help="the Dask scheduler's address, e.g. tcp://HOST:8786")
    parser.add_argument("--cells", type=int, default=4, metavar="N", help="cells this worker runs at once (default 4)")
    parser.add_argument(
        "--threads", type=int, default=None, metavar="T", help="worker threads (default: N; at least N)"
    )
    parser.add_argument(
        "--host", metavar="HOST", help="the address to listen on and advertise (default: Dask's choice)"
    )
    parser.add_argument("--port", type=int, default=None, metavar="PORT", help="the worker's port (default: any free)")
    parser.add_argument("--name", metavar="NAME", help="the worker's name in the scheduler (default: its address)")
    parser.add_argument(
        "--local-directory", metavar="DIR", help="where the worker keeps its files, attempts included (default: TMPDIR)"
    )
    parser.add_argument("--dashboard", metavar="ADDRESS", help="serve the worker's dashboard here (default: none)")
    parser.add_argument("--nanny", action="store_true", help="run the worker under a Dask nanny (restarts it)")
    parser.add_argument("--dry-run", action="store_true", help="print the dask worker command, do not run it")
    parser.set_defaults(dask_args=[])  # what follows "--" on the command line, for `dask worker` unchanged


def command(args: argparse.Namespace) -> list[str]:
    """The ``dask worker`` command line for ``args`` (a WorkerUsageError names a bad one)."""
    try:
        scheduler = cluster_address(args.scheduler)
    except ValueError as exc:
        raise WorkerUsageError(f"SCHEDULER: {exc}") from None
    if args.cells < 1:
        raise WorkerUsageError(f"--cells: expected a whole number of cells >= 1, got {args.cells}")
    threads = args.cells if args.threads is None else args.threads
    if threads < args.cells:
        raise WorkerUsageError(
            f"--threads: {threads} is fewer than --cells {args.cells}: a cell holds its thread for its whole run"
        )
    if args.port is not None and not 0 < args.port < 65536:
        raise WorkerUsageError(f"--port: expected a port number 1-65535, got {args.port}")
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler]
    cmd += ["--nthreads", str(threads), "--resources", f"cells={args.cells}", "--preload", PRELOAD]
    cmd += ["--nanny"] if args.nanny else ["--no-nanny"]
    cmd += ["--dashboard", "--dashboard-address", args.dashboard] if args.dashboard else ["--no-dashboard"]
    if args.host:
        cmd += ["--host", args.host]
    if args.port is not None:
        cmd += ["--worker-port", str(args.port)]
    if args.name:
        cmd += ["--name", args.name]
    if args.local_directory:
        cmd += ["--local-directory", args.local_directory]
    return cmd + list(args.dask_args)


def run(args: argparse.Namespace) -> int:
    """Check the settings, then become ``dask worker`` (returns only for --dry-run)."""
    cmd = command(args)
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise WorkerUsageError(
            "needs Dask distributed, which is not installed: pip install 'pytest-maka[dask]'"
        ) from None
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    print(f"maka worker: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)
    return 1  # not reached

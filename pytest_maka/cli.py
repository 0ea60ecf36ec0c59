"""The ``maka`` command: tools that work on an output directory after (or without) a pytest run.

    maka report DIR             rebuild results.jsonl, report.html and summary.md from DIR/attempts.jsonl
    maka compare DIR_A DIR_B    paired changes per subject and task between two runs of one cohort
    maka agents install|list|prune   the agent install cache
    maka worker SCHEDULER       a Dask worker for --maka-cluster (cells resource, threads, preload)

A cohort itself is run by pytest (``pytest --maka-spec=cohort.yaml``), as ``maka --help`` says.

Each subcommand is one ``_cmd_*`` function registered in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from . import pid1
from .core.record_model import AttemptRecord
from .core.records import cells_of
from .store.ledger import ATTEMPTS_FILE, write_results
from .store.lock import last_run
from .store.reading import LedgerError, read_ledger

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


RUN_A_COHORT = """\
to run a cohort (a spec YAML: tasks x subjects x repetitions), use pytest:
  pytest --maka-spec=cohort.yaml                 run every cell; results in reports/<cohort name>/
  pytest --maka-spec=cohort.yaml -n 4            on 4 xdist workers
  pytest --maka-spec=cohort.yaml -k "hello and oracle"   a few cells
  pytest --maka-spec=cohort.yaml --maka-out=DIR  into DIR (a second run into DIR resumes;
                                                 --maka-rerun runs the selected cells again)
  pytest --help                                  every --maka-* option
then: maka report DIR, maka compare DIR_A DIR_B"""


class CliError(Exception):
    """A problem worth one line on stderr, with the exit code to use."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def _cohort_name(records: Sequence[AttemptRecord], out_dir: Path) -> str:
    """The cohort named by most records, else the directory's name."""
    names = Counter(r.cohort for r in records if r.cohort)
    return names.most_common(1)[0][0] if names else out_dir.resolve().name


def _records(out_dir: Path) -> list[AttemptRecord]:
    """The cell records of an output directory's ledger (a usage error if there are none)."""
    if not (out_dir / ATTEMPTS_FILE).is_file():
        raise CliError(f"no {ATTEMPTS_FILE} in {out_dir} (is it a pytest-maka output directory?)", EXIT_USAGE)
    try:
        attempts = read_ledger(out_dir / ATTEMPTS_FILE)
    except LedgerError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    records = cells_of(attempts)
    if not records:
        raise CliError(f"{out_dir / ATTEMPTS_FILE} holds no complete attempt", EXIT_USAGE)
    return records


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import terminal_lines, write_views
    from .report.terminal import rerun_summary

    out_dir = Path(args.dir)
    records = _records(out_dir)
    cohort = args.cohort or _cohort_name(records, out_dir)
    details, why_not = last_run(out_dir)
    meta = details.model_dump(exclude_none=True) if details is not None else {}
    if why_not:
        print(f"maka: note: {why_not}", file=sys.stderr)
    try:
        paths = {"results": write_results(out_dir, records)}
        paths.update(write_views(out_dir, records, cohort=cohort, meta=meta))
    except ValueError as e:  # e.g. a record with an unknown taxonomy status
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot write to {out_dir}: {e.strerror or e}") from None
    for path in paths.values():
        print(f"wrote {path}")
    print()
    print(f"cohort {cohort}: {len(records)} cells")
    for line in terminal_lines(records):
        print(line)
    rerun = rerun_summary(records)
    if rerun:
        print(rerun)
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from .report import write_atomic
    from .report.compare import compare_lines, compare_runs, render_compare_html, render_compare_markdown

    dir_a, dir_b = Path(args.dir_a), Path(args.dir_b)
    labels = (args.label_a or dir_a.resolve().name, args.label_b or dir_b.resolve().name)
    if labels[0] == labels[1]:
        labels = (f"A:{labels[0]}", f"B:{labels[1]}")
    try:
        result = compare_runs(_records(dir_a), _records(dir_b), labels=labels)
    except ValueError as e:
        raise CliError(str(e)) from None
    out = Path(args.out) if args.out else dir_b
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = [
            write_atomic(out / "compare.html", render_compare_html(result)),
            write_atomic(out / "compare.md", render_compare_markdown(result)),
        ]
    except OSError as e:
        raise CliError(f"cannot write to {out}: {e.strerror or e}") from None
    for line in compare_lines(result):
        print(line)
    print()
    for path in paths:
        print(f"wrote {path}")
    return EXIT_OK


def _cmd_worker(args: argparse.Namespace) -> int:
    from .cluster.worker import WorkerUsageError, run

    try:
        return run(args)
    except WorkerUsageError as e:
        raise CliError(f"maka worker: {e}", EXIT_USAGE) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; a new subcommand is one ``add_parser`` block here."""
    parser = argparse.ArgumentParser(
        prog="maka",
        description="pytest-maka: work with an experiment's output directory. A cohort itself is run by "
        "pytest, not by maka (see below).",
        epilog=RUN_A_COHORT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    report = commands.add_parser(
        "report",
        help="rebuild results.jsonl, report.html and summary.md from DIR/attempts.jsonl",
        description="Rebuild results.jsonl (earliest valid attempt per cell), report.html and summary.md "
        "from the attempts ledger in DIR.",
    )
    report.add_argument("dir", metavar="DIR", help="the output directory of a run (--maka-out)")
    report.add_argument("--cohort", help="cohort name for the report header (default: from the records)")
    report.set_defaults(func=_cmd_report)

    compare = commands.add_parser(
        "compare",
        help="paired differences per subject and task between two runs of the same cohort",
        description="Compare two output directories of the same cohort (e.g. before and after a prompt change): "
        "subjects matched by name, tasks by id; the change B - A is paired by task. Prints a table and writes "
        "compare.html and compare.md (into DIR_B unless --out is given).",
    )
    compare.add_argument("dir_a", metavar="DIR_A", help="the baseline run's output directory")
    compare.add_argument("dir_b", metavar="DIR_B", help="the candidate run's output directory")
    compare.add_argument("--out", metavar="DIR", help="where to write compare.html and compare.md (default: DIR_B)")
    compare.add_argument("--label-a", help="name of run A in the output (default: DIR_A's name)")
    compare.add_argument("--label-b", help="name of run B in the output (default: DIR_B's name)")
    compare.set_defaults(func=_cmd_compare)

    worker = commands.add_parser(
        "worker",
        help="start a Dask worker for --maka-cluster (cells resource, threads, pytest-maka's preload)",
        description="Start `dask worker` joined to SCHEDULER with the settings pytest-maka needs: "
        "--resources cells=N, at least N threads, pytest-maka's preload, no nanny, no dashboard unless asked. "
        "Flags after -- go to dask worker unchanged.",
    )
    from .cluster.worker import add_arguments as worker_arguments

    worker_arguments(worker)
    worker.set_defaults(func=_cmd_worker)

    cleanup = commands.add_parser(
        "docker-cleanup",
        add_help=False,
        help="remove containers (and with --images, images) that dead runs left on Docker engines",
    )
    cleanup.set_defaults(func=None)  # its own parser: see main()
    agents = commands.add_parser("agents", add_help=False, help="install, list and prune agent CLIs (the cache)")
    agents.set_defaults(func=None)  # its own parser: see main()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``maka`` console script; returns the exit code."""
    pid1.main_guard()  # as a container's PID 1 (e.g. ``maka worker``): a minimal init reaps orphans
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["docker-cleanup"]:
        from .executors.docker.cleanup import main as cleanup_main

        return cleanup_main(argv[1:])
    if argv[:1] == ["agents"]:
        from .subjects.install.cli import main as agents_main
        from .subjects.presets import PRESETS

        return agents_main(argv[1:], PRESETS)
    if not argv:
        build_parser().print_help(sys.stderr)
        return EXIT_USAGE
    if argv[0].endswith((".yaml", ".yml")):
        print(f"maka: error: maka does not run cohorts; run it with: pytest --maka-spec={argv[0]}", file=sys.stderr)
        return EXIT_USAGE
    passed_on: list[str] = []
    if argv[:1] == ["worker"] and "--" in argv:  # argparse mishandles "--" after a subcommand
        passed_on, argv = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    args = build_parser().parse_args(argv)
    if passed_on:
        args.dask_args = passed_on
    try:
        return args.func(args)
    except CliError as e:
        print(f"maka: error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())

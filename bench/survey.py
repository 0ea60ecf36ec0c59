"""Survey public task repositories: how many task dirs load, run, and agree, here and in Harbor 0.25.

    python bench/survey.py                                  # bench/survey_repos.yaml, loading only
    python bench/survey.py --harbor /tmp/harbor-venv/bin/harbor         # + Harbor 0.25's load columns
    python bench/survey.py --run                            # + oracle and nop on Docker (-n 2)
    python bench/survey.py --run --harbor /tmp/harbor-venv/bin/harbor   # + Harbor 0.25, same cells

The repositories are named at pinned commits in ``bench/survey_repos.yaml``; the user fetches
them first (a bare mirror ``MIRRORS/OWNER+NAME/repo``, as the session's ``fetch`` makes, or a
clone ``MIRRORS/OWNER+NAME`` with ``.git``); nothing is downloaded here. Each repository's path
at its commit is extracted with ``git archive`` under ``--work`` and its task directories (a
``task.toml`` or a ``task.yaml``) are loaded by pytest-maka's adapters and, with ``--harbor``,
by Harbor 0.25's own task model (``bench/survey_harbor.py``, run by the interpreter of Harbor's
venv; a legacy ``task.yaml`` dir through Harbor's ``harbor tasks migrate`` mapper first):

- loadable: the task dir loads (here: our adapter; Harbor: ``Task(dir)``);
- runnable: it loads and nothing refuses it on the Docker executor (here: a feature, a parser, a
  key; Harbor: ``Trial.create`` of an oracle trial on its Docker environment, nothing started);
- ran / agreeing (``--run``): its oracle and nop cells got a verdict here, and the same verdict
  as Harbor's trial (``--harbor``), under the same network (the verifier's network granted).

One row per repository (``here/Harbor`` in the load columns), then the totals, then every task
dir the two harnesses load differently, with both reasons; ``--json`` writes every task's facts.

    python bench/survey.py --run --harbor /tmp/harbor-venv/bin/harbor --match '*flood*' --match '*kmeans*' \
        --base-image ghcr.io/laude-institute/t-bench/python-3-13:20250620=python:3.11-slim --timings

``--match`` (a glob on the task dir's path or on ``OWNER/NAME/PATH``, repeatable) and ``--only N``
pick the task dirs that run; ``--base-image PUBLIC=LOCAL`` puts a local image in the ``FROM`` lines of the extracted
copies (both harnesses run the same copy; each substitution is recorded and printed), and
``--public-network`` makes their ``task.toml`` networks public (Harbor 0.25 refuses ``no-network``
on Docker where its egress-control probe image cannot be pulled);
``--timings`` runs each side twice (cold: images built; warm). Every run prints where its wall
time went: the sum of each phase over its cells (our records' ``timings``; Harbor's
``result.json`` spans), the cells' time in no phase, idle worker time, and the time before the
first and after the last cell. With ``--run`` one row per task gives both harnesses' verdicts
and pytest-maka's reason for a non-verdict. A legacy ``task.yaml`` task runs in Harbor through
``harbor tasks migrate``, with the variables its migrated compose file still names (``MIGRATED_ENV``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
MANIFEST = ROOT / "bench" / "survey_repos.yaml"

from survey_runs import AGENTS, RunTime, median, run_harbor_cells, run_maka  # noqa: E402
from survey_tasks import (  # noqa: E402
    TaskFacts,
    extract,
    git_dir,
    harbor_load,
    harbor_python,
    load,
    substitute_bases,
    substitute_network,
    task_dirs,
)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest", nargs="?", type=Path, default=MANIFEST)
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="the fetched repositories")
    parser.add_argument("--work", type=Path, help="where to extract them (default: a temporary directory)")
    parser.add_argument("--repo", action="append", default=[], help="survey only this OWNER/NAME of the manifest")
    parser.add_argument("--run", action="store_true", help="run oracle and nop on Docker")
    parser.add_argument("--harbor", help="the harbor executable: Harbor 0.25's load columns, and its trials with --run")
    parser.add_argument("--json", type=Path, help="write every task's facts here")
    parser.add_argument("--match", action="append", default=[], help="run only task dirs whose path matches (glob)")
    parser.add_argument("--only", type=int, help="run at most this many task dirs")
    parser.add_argument("--base-image", action="append", default=[], metavar="PUBLIC=LOCAL",
                        help="a local image for a public base image (FROM lines of the extracted copies)")  # fmt: skip
    parser.add_argument("--public-network", action="store_true",
                        help="make the picked tasks' networks public (task.toml of the extracted copies)")  # fmt: skip
    parser.add_argument("--timings", action="store_true", help="run each side twice (cold, warm)")
    return parser.parse_args()


def _pair(here: int, harbor: int | None) -> str:
    return str(here) if harbor is None else f"{here}/{harbor}"


def _counts(mine: list[TaskFacts]) -> Counter[str]:
    return Counter(
        dirs=len(mine),
        loadable=sum(f.loadable for f in mine),
        runnable=sum(f.runnable for f in mine),
        h_loadable=sum(bool(f.harbor_loadable) for f in mine),
        h_runnable=sum(bool(f.harbor_runnable) for f in mine),
        ran=sum(len([v for v in f.verdicts.values() if v in ("pass", "fail")]) for f in mine),
        agreeing=sum(sum(f.harbor.get(a) == v for a, v in f.verdicts.items()) for f in mine),
    )


def print_summary(facts: list[TaskFacts], ran: bool, harbor: bool) -> None:
    head = "here/Harbor" if harbor else "here"
    print(f"{'repository':<46} {'dirs':>5} {'loadable':>11} {'runnable':>11} {'ran':>5} {'agreeing':>8}   ({head})")
    rows = [(repo, _counts([f for f in facts if f.repo == repo])) for repo in dict.fromkeys(f.repo for f in facts)]
    for repo, row in [*rows, ("total", _counts(facts))]:
        load_col = _pair(row["loadable"], row["h_loadable"] if harbor else None)
        run_col = _pair(row["runnable"], row["h_runnable"] if harbor else None)
        ran_col = str(row["ran"]) if ran else "-"
        agree = str(row["agreeing"]) if ran and harbor else "-"
        print(f"{repo:<46} {row['dirs']:>5} {load_col:>11} {run_col:>11} {ran_col:>5} {agree:>8}")


#: What varies from one task to the next inside one reason (a line number, a name): counted as one reason
_VARIES = (
    (re.compile(r"\(at line \d+, column \d+\)"), "(at line L, column C)"),
    (re.compile(r"\(got '[^']*'\)"), "(got '...')"),
    (re.compile(r"(Package name must be in 'org/name' format).*"), r"\1 ..."),
    (re.compile(r"(Environment variable) '[^']*'"), r"\1 '...'"),
)


def reason(why: str) -> str:
    """``why`` without what varies from task to task, cut to one line."""
    for pattern, replacement in _VARIES:
        why = pattern.sub(replacement, why)
    return why[:150]


def print_reasons(facts: list[TaskFacts], harbor: bool) -> None:
    for why, n in Counter(reason(f.why) for f in facts if not f.runnable).most_common():
        print(f"  not runnable here x{n}: {why}")
    if harbor:
        for why, n in Counter(reason(f.harbor_why) for f in facts if not f.harbor_runnable).most_common():
            print(f"  not runnable in Harbor x{n}: {why}")
        differ = [f for f in facts if (f.loadable, f.runnable) != (f.harbor_loadable, f.harbor_runnable)]
        if differ:
            print(f"\n{len(differ)} task dirs the two harnesses load differently (loadable/runnable here; Harbor):")
        for f in differ:
            here = f"{int(f.loadable)}/{int(f.runnable)}"
            theirs = f"{int(bool(f.harbor_loadable))}/{int(bool(f.harbor_runnable))}"
            print(f"  {f.repo} {f.path}: here {here} {f.why[:110]!r}; Harbor {theirs} {f.harbor_why[:110]!r}")
    ignored = Counter(k for f in facts for k in f.ignored_keys)
    if ignored:
        print("  ignored keys (loaded anyway): " + ", ".join(f"{k} x{n}" for k, n in ignored.most_common()))
    for b in sorted({b for f in facts for b in f.substituted}):
        network = b.startswith(("network_mode", "allow_internet"))
        what = "network substituted" if network else "base image substituted"
        print(f"  {what}: {b} ({sum(b in f.substituted for f in facts)} task dirs)")


def print_times(times: list[RunTime]) -> None:
    for t in times:
        shown = "-" if median(t.durations) is None else f"{median(t.durations):.1f} s"
        total = t.wall_s * t.workers
        print(f"\n{t.label}: {t.cells} cells in {t.wall_s:.0f} s wall on {t.workers} worker(s) = {total:.0f} worker-s, "
              f"median cell {shown}")  # fmt: skip
        for what, seconds in t.rows():
            print(f"  {what:<52} {seconds:>8.0f} s  {100 * seconds / total if total else 0:>5.1f}%")


def main() -> int:
    args = _arguments()
    if args.harbor and not harbor_python(args.harbor).is_file():
        raise SystemExit(f"--harbor {args.harbor}: expected the harbor executable of a venv, with its python beside it")
    bases = dict(b.split("=", 1) for b in args.base_image if "=" in b)
    from pytest_maka.core.task import task_id_for
    from pytest_maka.executors.docker.compose import compose_command
    from pytest_maka.executors.docker.executor import DockerExecutor

    features = DockerExecutor.capabilities.features - ({"compose"} if not compose_command() else set())
    entries = yaml.safe_load(args.manifest.read_text())["repositories"]
    entries = [e for e in entries if e["repo"] in args.repo or not args.repo]
    work = args.work or Path(tempfile.mkdtemp(prefix="maka-survey-"))
    facts: list[tuple[TaskFacts, Path]] = []
    dirs_by_id: dict[str, tuple[TaskFacts, Path]] = {}
    missing: list[str] = []
    for entry in entries:
        repo, commit, path = entry["repo"], entry["commit"], entry.get("path", "")
        git = git_dir(args.mirrors, repo)
        if git is None:
            missing.append(f"{repo} @ {commit}")
            continue
        # under the repository's name: a task at its root gets that name as its task id
        root, absent = extract(git, commit, path, work / repo.replace("/", "+") / commit[:12] / repo.split("/")[-1])
        if absent:
            missing.append(f"{repo} @ {commit}: {absent} files listed but absent from the mirror (the rest surveyed)")
        for task_dir in task_dirs(root):
            relative = str(task_dir.relative_to(root))
            named = (relative, f"{repo}/{relative}".removesuffix("/."))  # a glob may name the repository too
            chosen = not args.match or any(fnmatch.fnmatch(n, m) for n in named for m in args.match)
            substituted = substitute_bases(task_dir, bases) if bases and chosen else []
            substituted += substitute_network(task_dir) if args.public_network and chosen else []
            one = load(repo, task_dir, root, features)
            one.substituted = substituted
            facts.append((one, task_dir))
            if one.runnable and chosen and (args.only is None or len(dirs_by_id) < args.only):
                dirs_by_id[task_id_for(task_dir.name)] = (one, task_dir)
    if args.harbor:
        harbor_load(harbor_python(args.harbor), facts)
    times: list[RunTime] = []
    if args.run and dirs_by_id:
        from harbor_parity import maka_verdict

        runs = ("cold", "warm") if args.timings else ("warm",)
        records: dict[str, dict[str, dict]] = {}
        for run in runs:
            records, spent = run_maka([d for _, d in dirs_by_id.values()], work, f"maka-{run}")
            times.append(spent)
        for task_id, (one, _) in dirs_by_id.items():
            for agent, record in records.get(task_id, {}).items():
                one.verdicts[agent] = maka_verdict(record)
                if one.verdicts[agent] != "pass":
                    one.why_not[agent] = ((record.get("error") or {}).get("message") or "")[:160]
        if args.harbor:
            theirs: dict = {}
            for run in runs:
                theirs, spent = run_harbor_cells(args.harbor, dirs_by_id, work, f"harbor-{run}")
                times.append(spent)
            for (task_id, agent), h in theirs.items():
                dirs_by_id[task_id][0].harbor[agent] = h["verdict"] + (f" ({h['note']})" if h.get("note") else "")
    only = [f for f, _ in facts]
    print_summary(only, args.run, bool(args.harbor))
    print_reasons(only, bool(args.harbor))
    if args.run and dirs_by_id:
        print(f"\n{'task':<44} {'agent':<6} {'pytest-maka':<16} {'Harbor 0.25':<24} why not a pass here")
        for one, _ in dirs_by_id.values():
            name = one.repo if one.path == "." else f"{one.repo}/{one.path}"  # a task id may be a commit
            for agent in AGENTS:
                mine, theirs_v = one.verdicts.get(agent, "missing"), one.harbor.get(agent, "-")
                print(f"{name[-44:]:<44} {agent:<6} {mine:<16} {theirs_v[:24]:<24} {one.why_not.get(agent, '')[:80]}")
    print_times(times)
    for line in missing:
        print(f"  not fetched: {line}" + ("" if ": " in line else f" (fetch it into {args.mirrors} first)"))
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in only], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

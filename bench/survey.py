"""Survey public task repositories: how many task dirs load, run, and agree with Harbor.

    python bench/survey.py                                  # bench/survey_repos.yaml, loading only
    python bench/survey.py --run                            # + oracle and nop on Docker (-n 2)
    python bench/survey.py --run --harbor /tmp/harbor-venv/bin/harbor   # + Harbor 0.25, same cells

The repositories are named at pinned commits in ``bench/survey_repos.yaml``; the user fetches
them first (a bare mirror ``MIRRORS/OWNER+NAME/repo``, as the session's ``fetch`` makes, or a
clone ``MIRRORS/OWNER+NAME`` with ``.git``); nothing is downloaded here. Each repository's path
at its commit is extracted with ``git archive`` under ``--work`` and its task directories (a
``task.toml`` or a ``task.yaml``) are loaded by pytest-maka's adapters:

- loadable: the task dir loads (an invalid one is counted with its first line);
- runnable: it loads and nothing skips it on the Docker executor (a feature, a parser, a key);
- ran / agreeing (``--run``): its oracle and nop cells got a verdict here, and the same verdict
  as Harbor's trial (``--harbor``), under the same network (the verifier's network granted).

One row per repository, then the totals; ``--json`` also writes every task's facts.

    python bench/survey.py --run --harbor /tmp/harbor-venv/bin/harbor --match '*flood*' --match '*kmeans*' \
        --base-image ghcr.io/laude-institute/t-bench/python-3-13:20250620=python:3.11-slim --timings

``--match`` (a glob on the task dir's path, repeatable) and ``--only N`` pick the task dirs that
run; ``--base-image PUBLIC=LOCAL`` puts a local image in the ``FROM`` lines of the extracted
copies (both harnesses run the same copy; each substitution is recorded and printed);
``--timings`` runs each side twice (cold: images built; warm) and prints the wall times, and
with ``--run`` one row per task: both harnesses' verdicts and pytest-maka's reason for a
non-verdict. A legacy ``task.yaml`` task goes to Harbor through ``harbor tasks migrate``, run
with the variables its migrated compose file still names (``MIGRATED_ENV``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
MANIFEST = ROOT / "bench" / "survey_repos.yaml"
MARKERS = ("task.toml", "task.yaml")


@dataclass
class TaskFacts:
    repo: str
    path: str
    loadable: bool = False
    runnable: bool = False
    why: str = ""
    ignored_keys: list[str] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)  # agent -> pass / fail / class
    harbor: dict[str, str] = field(default_factory=dict)
    #: agent -> pytest-maka's one-line reason for a non-pass
    why_not: dict[str, str] = field(default_factory=dict)
    #: PUBLIC=LOCAL base images put in this task's Dockerfiles
    substituted: list[str] = field(default_factory=list)


#: What a compose file written by ``harbor tasks migrate`` names that Harbor 0.25 no longer sets
#: (bench/RESULTS.md, "Compose recipes"): Harbor's own defaults, so the migrated task can run.
MIGRATED_ENV = {"CPUS": "1", "MEMORY": "2G", "TEST_DIR": "/tests"}


def git_dir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base / ".git", base):
        if (candidate / "HEAD").is_file():
            return candidate
    return None


def extract(git: Path, commit: str, path: str, dest: Path) -> Path:
    """The repository's ``path`` at ``commit``, extracted under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", f"--git-dir={git}", "archive", "--format=tar", commit, *([path] if path not in ("", ".") else [])],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / path if path not in ("", ".") else dest


def task_dirs(root: Path) -> list[Path]:
    """Every directory holding a task file (a task dir inside another is one too, as in Harbor)."""
    return sorted({p.parent for marker in MARKERS for p in root.rglob(marker)})


def substitute_bases(task_dir: Path, bases: dict[str, str]) -> list[str]:
    """Put the local image in place of each public one in the task's Dockerfiles' ``FROM`` lines."""
    done: list[str] = []
    for dockerfile in sorted(task_dir.rglob("Dockerfile*")):
        text = dockerfile.read_text(errors="replace")
        new = text
        for public, local in bases.items():
            new = re.sub(rf"(?im)^(FROM\s+(?:--\S+\s+)*){re.escape(public)}(?=\s|$)", rf"\g<1>{local}", new)
        if new != text:
            dockerfile.write_text(new)
            done += [f"{p}={new_}" for p, new_ in bases.items() if p in text and f"{p}={new_}" not in done]
    return done


def harbor_dir(harbor: str, task_dir: Path, work: Path) -> Path:
    """The task dir Harbor runs: itself, or its ``harbor tasks migrate`` output for a legacy task."""
    if (task_dir / "task.toml").is_file():
        return task_dir
    out = work / "harbor-migrated" / task_dir.name
    if not out.is_dir():
        subprocess.run([harbor, "tasks", "migrate", "-i", str(task_dir), "-o", str(out.parent)],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    return out


def load(repo: str, task_dir: Path, root: Path, features: frozenset[str]) -> TaskFacts:
    from pytest_maka.benchmarks import harbor, terminal_bench
    from pytest_maka.core.errors import TaskError
    from pytest_maka.verifiers import parsers

    facts = TaskFacts(repo=repo, path=str(task_dir.relative_to(root)))
    loader = harbor.load_task if (task_dir / "task.toml").is_file() else terminal_bench.load_task
    try:
        task = loader(task_dir)
    except TaskError as exc:
        facts.why = f"invalid: {exc}".replace(str(task_dir), "TASK")
        return facts
    facts.loadable = True
    facts.ignored_keys = list(task.metadata.get("ignored_keys") or [])
    missing = sorted(task.features - features)
    parser = task.grading_options.get("parser")
    if task.unsupported:
        facts.why = task.unsupported.replace(str(task_dir), "TASK").replace(task.id, "TASK")
    elif missing:
        facts.why = f"needs {', '.join(missing)}"
    elif parser and parsers.get(parser) is None:
        facts.why = f"no parser {parser!r}"
    else:
        facts.runnable = True
    return facts


def run_maka(dirs: list[Path], work: Path, out_name: str = "maka-out") -> tuple[dict[str, dict[str, dict]], float]:
    """Oracle and nop over every runnable task dir on Docker: records by (task id, agent), and the wall time."""
    spec = work / "survey.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "survey",
                "tasks": [{"path": str(d)} for d in dirs],
                "subjects": [{"name": a, "kind": a} for a in ("oracle", "nop")],
                "executor": {"kind": "docker"},
                "policy": {"verifier_network": True},  # Harbor gives the verifier the network too
            }
        )
    )
    out = work / out_name
    cmd = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-n", "2"]
    started = time.monotonic()
    subprocess.run([*cmd, "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=work, timeout=6 * 3600)
    wall = time.monotonic() - started
    records: dict[str, dict[str, dict]] = {}
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        record = json.loads(line)
        records.setdefault(record["task"], {})[record["subject"]] = record
    return records, wall


def run_harbor_cells(harbor: str, dirs: dict[str, tuple[TaskFacts, Path]], work: Path, jobs: str) -> tuple[dict, float]:
    """Every (task, agent) trial through Harbor, one at a time: results by (task id, agent), and the wall time."""
    from harbor_parity import run_harbor

    os.environ.update({k: v for k, v in MIGRATED_ENV.items() if k not in os.environ})
    out: dict[tuple[str, str], dict] = {}
    started = time.monotonic()
    for task_id, (_, task_dir) in dirs.items():
        for agent in ("oracle", "nop"):
            out[(task_id, agent)] = run_harbor(harbor, harbor_dir(harbor, task_dir, work), agent, work / jobs,
                                               f"{task_id}-{agent}")  # fmt: skip
    return out, time.monotonic() - started


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest", nargs="?", type=Path, default=MANIFEST)
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="the fetched repositories")
    parser.add_argument("--work", type=Path, help="where to extract them (default: a temporary directory)")
    parser.add_argument("--run", action="store_true", help="run oracle and nop on Docker")
    parser.add_argument("--harbor", help="the harbor executable: run the same cells through Harbor 0.25")
    parser.add_argument("--json", type=Path, help="write every task's facts here")
    parser.add_argument("--match", action="append", default=[], help="run only task dirs whose path matches (glob)")
    parser.add_argument("--only", type=int, help="run at most this many task dirs")
    parser.add_argument("--base-image", action="append", default=[], metavar="PUBLIC=LOCAL",
                        help="a local image for a public base image (FROM lines of the extracted copies)")  # fmt: skip
    parser.add_argument("--timings", action="store_true", help="run each side twice (cold, warm); print wall times")
    args = parser.parse_args()
    bases = dict(b.split("=", 1) for b in args.base_image if "=" in b)
    from pytest_maka.executors.docker.compose import compose_command
    from pytest_maka.executors.docker.executor import DockerExecutor

    features = DockerExecutor.capabilities.features - ({"compose"} if not compose_command() else set())
    entries = yaml.safe_load(args.manifest.read_text())["repositories"]
    work = args.work or Path(tempfile.mkdtemp(prefix="maka-survey-"))
    facts: list[TaskFacts] = []
    dirs_by_id: dict[str, tuple[TaskFacts, Path]] = {}
    missing: list[str] = []
    for entry in entries:
        repo, commit, path = entry["repo"], entry["commit"], entry.get("path", "")
        git = git_dir(args.mirrors, repo)
        if git is None:
            missing.append(f"{repo} @ {commit}")
            continue
        root = extract(git, commit, path, work / repo.replace("/", "+") / commit[:12])
        for task_dir in task_dirs(root):
            relative = str(task_dir.relative_to(root))
            chosen = not args.match or any(fnmatch.fnmatch(relative, m) for m in args.match)
            substituted = substitute_bases(task_dir, bases) if bases and chosen else []
            one = load(repo, task_dir, root, features)
            one.substituted = substituted
            facts.append(one)
            if one.runnable and chosen and (args.only is None or len(dirs_by_id) < args.only):
                from pytest_maka.core.task import task_id_for

                dirs_by_id[task_id_for(task_dir.name)] = (one, task_dir)
    walls: dict[str, float] = {}
    cells: dict[str, list[float]] = {}
    if args.run and dirs_by_id:
        from harbor_parity import maka_verdict

        runs = ("cold", "warm") if args.timings else ("warm",)
        records: dict[str, dict[str, dict]] = {}
        for run in runs:
            records, walls[f"pytest-maka {run}"] = run_maka([d for _, d in dirs_by_id.values()], work, f"maka-{run}")
            cells[f"pytest-maka {run}"] = [r.get("duration_s") for t in records.values() for r in t.values()]
        for task_id, (one, _) in dirs_by_id.items():
            for agent, record in records.get(task_id, {}).items():
                one.verdicts[agent] = maka_verdict(record)
                if one.verdicts[agent] != "pass":
                    one.why_not[agent] = ((record.get("error") or {}).get("message") or "")[:160]
        if args.harbor:
            theirs: dict = {}
            for run in runs:
                theirs, walls[f"Harbor 0.25 {run}"] = run_harbor_cells(args.harbor, dirs_by_id, work, f"harbor-{run}")
                cells[f"Harbor 0.25 {run}"] = [h["trial_s"] for h in theirs.values()]
            for (task_id, agent), h in theirs.items():
                dirs_by_id[task_id][0].harbor[agent] = h["verdict"] + (f" ({h['note']})" if h.get("note") else "")
    print(f"{'repository':<46} {'dirs':>5} {'loadable':>8} {'runnable':>8} {'ran':>5} {'agreeing':>8}")
    totals: Counter[str] = Counter()
    for repo in dict.fromkeys(f.repo for f in facts):
        mine = [f for f in facts if f.repo == repo]
        row = Counter(
            dirs=len(mine),
            loadable=sum(f.loadable for f in mine),
            runnable=sum(f.runnable for f in mine),
            ran=sum(len([v for v in f.verdicts.values() if v in ("pass", "fail")]) for f in mine),
            agreeing=sum(sum(f.harbor.get(a) == v for a, v in f.verdicts.items()) for f in mine),
        )
        totals.update(row)
        agree = str(row["agreeing"]) if args.harbor else "-"
        ran = str(row["ran"]) if args.run else "-"
        print(f"{repo:<46} {row['dirs']:>5} {row['loadable']:>8} {row['runnable']:>8} {ran:>5} {agree:>8}")
    agree = str(totals["agreeing"]) if args.harbor else "-"
    ran = str(totals["ran"]) if args.run else "-"
    print(f"{'total':<46} {totals['dirs']:>5} {totals['loadable']:>8} {totals['runnable']:>8} {ran:>5} {agree:>8}")
    reasons = Counter(f.why for f in facts if not f.runnable)
    for why, n in reasons.most_common():
        print(f"  not runnable x{n}: {why[:150]}")
    ignored = Counter(k for f in facts for k in f.ignored_keys)
    if ignored:
        print("  ignored keys (loaded anyway): " + ", ".join(f"{k} x{n}" for k, n in ignored.most_common()))
    for b in sorted({b for f in facts for b in f.substituted}):
        print(f"  base image substituted: {b} ({sum(b in f.substituted for f in facts)} task dirs)")
    if args.run and dirs_by_id:
        print(f"\n{'task':<44} {'agent':<6} {'pytest-maka':<16} {'Harbor 0.25':<12} why not a pass here")
        for task_id, (one, _) in dirs_by_id.items():
            for agent in ("oracle", "nop"):
                mine, theirs_v = one.verdicts.get(agent, "missing"), one.harbor.get(agent, "-")
                print(f"{task_id[:44]:<44} {agent:<6} {mine:<16} {theirs_v[:12]:<12} {one.why_not.get(agent, '')[:90]}")
    for run, wall in walls.items():
        median = _median(cells.get(run, []))
        shown = "-" if median is None else f"{median:.1f} s"
        print(f"  {run}: {len(cells.get(run, []))} cells in {wall:.0f} s, median cell {shown}")
    for line in missing:
        print(f"  not fetched: {line} (fetch it into {args.mirrors} first)")
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in facts], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

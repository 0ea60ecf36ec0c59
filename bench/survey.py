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
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
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


def run_maka(dirs: list[Path], work: Path) -> dict[str, dict[str, str]]:
    """Oracle and nop over every runnable task dir on Docker; verdict by (task id, agent)."""
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
    out = work / "maka-out"
    cmd = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-n", "2"]
    subprocess.run([*cmd, "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=work, timeout=6 * 3600)
    from harbor_parity import maka_verdict

    verdicts: dict[str, dict[str, str]] = {}
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        record = json.loads(line)
        verdicts.setdefault(record["task"], {})[record["subject"]] = maka_verdict(record)
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest", nargs="?", type=Path, default=MANIFEST)
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="the fetched repositories")
    parser.add_argument("--work", type=Path, help="where to extract them (default: a temporary directory)")
    parser.add_argument("--run", action="store_true", help="run oracle and nop on Docker")
    parser.add_argument("--harbor", help="the harbor executable: run the same cells through Harbor 0.25")
    parser.add_argument("--json", type=Path, help="write every task's facts here")
    args = parser.parse_args()
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
            one = load(repo, task_dir, root, features)
            facts.append(one)
            if one.runnable:
                from pytest_maka.core.task import task_id_for

                dirs_by_id[task_id_for(task_dir.name)] = (one, task_dir)
    if args.run and dirs_by_id:
        verdicts = run_maka([d for _, d in dirs_by_id.values()], work)
        for task_id, (one, task_dir) in dirs_by_id.items():
            one.verdicts = verdicts.get(task_id, {})
            if args.harbor:
                from harbor_parity import run_harbor

                for agent in ("oracle", "nop"):
                    name = f"{task_id}-{agent}"
                    one.harbor[agent] = run_harbor(args.harbor, task_dir, agent, work / "harbor-jobs", name)["verdict"]
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
    for line in missing:
        print(f"  not fetched: {line} (fetch it into {args.mirrors} first)")
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in facts], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

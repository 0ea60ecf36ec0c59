"""The task side of bench/survey.py: extract the pinned repositories, load every task dir in both harnesses."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("task.toml", "task.yaml")
#: Harbor's side of the load columns, run by Harbor's own interpreter (it imports nothing of ours)
HARBOR_SIDE = ROOT / "bench" / "survey_harbor.py"


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
    #: Harbor 0.25's load columns (``--harbor``): None when not asked
    harbor_loadable: bool | None = None
    harbor_runnable: bool | None = None
    harbor_why: str = ""


def git_dir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base / ".git", base):
        if (candidate / "HEAD").is_file():
            return candidate
    return None


def extract(git: Path, commit: str, path: str, dest: Path) -> tuple[Path, int]:
    """The repository's ``path`` at ``commit``, extracted under ``dest``, and how many files its mirror lacks.

    A snapshot may list its largest files without holding them: then ``git archive`` fails, and every
    file the mirror holds is written one by one (the absent ones counted, and named by the caller).
    """
    dest.mkdir(parents=True, exist_ok=True)
    where = [path] if path not in ("", ".") else []
    archive = subprocess.run(["git", f"--git-dir={git}", "archive", commit, *where], capture_output=True)
    root = dest / path if where else dest
    if archive.returncode == 0:
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return root, 0
    listing = subprocess.run(["git", f"--git-dir={git}", "ls-tree", "-r", "-z", commit, "--", *where],
                             capture_output=True, check=True).stdout.decode()  # fmt: skip
    entries = [line.split("\t", 1) for line in listing.split("\0") if line]
    blobs = [(head.split()[0], head.split()[2], name) for head, name in entries if head.split()[1] == "blob"]
    batch = subprocess.run(["git", f"--git-dir={git}", "cat-file", "--batch"], capture_output=True, check=True,
                           input="".join(f"{oid}\n" for _, oid, _ in blobs).encode()).stdout  # fmt: skip
    missing, at = 0, 0
    for mode, _, name in blobs:
        end = batch.index(b"\n", at)
        head = batch[at:end].split()
        if head[-1] == b"missing":
            missing, at = missing + 1, end + 1
            continue
        size = int(head[2])
        body, at = batch[end + 1 : end + 1 + size], end + 2 + size
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.unlink(missing_ok=True)
            target.symlink_to(body.decode())
        else:
            target.write_bytes(body)
            target.chmod(0o755 if mode == "100755" else 0o644)
    return root, missing


def task_dirs(root: Path) -> list[Path]:
    """Every directory holding a task file (a task dir inside another is one too, as in Harbor)."""
    return sorted({p.parent for marker in MARKERS for p in root.rglob(marker)})


def _own(task_dir: Path, pattern: str) -> list[Path]:
    """The files matching ``pattern`` in the task dir, not in a task dir nested inside it."""
    nested = {d for d in task_dirs(task_dir) if d != task_dir}
    return sorted(p for p in task_dir.rglob(pattern) if not any(n in p.parents for n in nested))


def substitute_bases(task_dir: Path, bases: dict[str, str]) -> list[str]:
    """Put the local image in place of each public one in the task's Dockerfiles' ``FROM`` lines."""
    done: list[str] = []
    for dockerfile in _own(task_dir, "Dockerfile*"):
        text = dockerfile.read_text(errors="replace")
        new = text
        for public, local in bases.items():
            new = re.sub(rf"(?im)^(FROM\s+(?:--\S+\s+)*){re.escape(public)}(?=\s|$)", rf"\g<1>{local}", new)
        if new != text:
            dockerfile.write_text(new)
            done += [f"{p}={new_}" for p, new_ in bases.items() if p in text and f"{p}={new_}" not in done]
    return done


#: ``--public-network``: what makes a task's network public in its ``task.toml`` (Harbor 0.25 cannot
#: run a ``no-network`` task on Docker here: its egress control probes the kernel with an image it pulls)
NETWORK_KEYS = (
    (r'(?m)^(\s*network_mode\s*=\s*)"(?:no-network|allowlist)"', r'\g<1>"public"', "network_mode=public"),
    (r"(?m)^(\s*allow_internet\s*=\s*)false\b", r"\g<1>true", "allow_internet=true"),
)


def substitute_network(task_dir: Path) -> list[str]:
    """Make every network a ``task.toml`` of the task declares public; what was changed."""
    done: list[str] = []
    for toml in _own(task_dir, "task.toml"):
        text = new = toml.read_text(errors="replace")
        for pattern, replacement, label in NETWORK_KEYS:
            new, n = re.subn(pattern, replacement, new)
            done += [label] if n and label not in done else []
        if new != text:
            toml.write_text(new)
    return done


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


def harbor_python(harbor: str) -> Path:
    """The interpreter of the venv that holds the ``harbor`` executable."""
    return Path(harbor).parent / "python"


def harbor_load(python: Path, facts: list[tuple[TaskFacts, Path]]) -> None:
    """Fill Harbor 0.25's load columns of every task dir: one subprocess of ``survey_harbor.py`` for all."""
    if not facts:
        return
    with tempfile.TemporaryDirectory(prefix="maka-survey-harbor-") as scratch:
        out, listed = Path(scratch) / "harbor.jsonl", Path(scratch) / "dirs.txt"
        listed.write_text("".join(f"{d}\n" for _, d in facts))
        done = subprocess.run([str(python), str(HARBOR_SIDE), str(out), str(listed)],
                              capture_output=True, text=True, timeout=3 * 3600)  # fmt: skip
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    by_dir = {row["dir"]: row for row in rows}
    failed = (done.stderr.strip().splitlines() or ["no output"])[-1]
    for one, task_dir in facts:
        row = by_dir.get(str(task_dir))
        if row is None:
            one.harbor_loadable = one.harbor_runnable = False
            one.harbor_why = f"survey_harbor.py gave no answer (exit {done.returncode}: {failed[:120]})"
            continue
        one.harbor_loadable, one.harbor_runnable, one.harbor_why = row["loadable"], row["runnable"], row["why"]

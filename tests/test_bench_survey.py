"""bench/survey.py on a real git repository of two legacy tasks: --match, --only and --base-image."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "survey.py"


def _task(root: Path, name: str) -> None:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text("instruction: write hello to /app/out.txt\n")
    (task / "Dockerfile").write_text("FROM ghcr.io/example/base:1 AS builder\nWORKDIR /app\n")
    (task / "run-tests.sh").write_text("pytest $TEST_DIR/test_outputs.py -rA\n")
    (task / "tests" / "test_outputs.py").write_text("def test_it():\n    assert True\n")


def test_the_survey_substitutes_the_base_images_of_the_tasks_it_picks(tmp_path: Path) -> None:
    repo = tmp_path / "mirrors" / "someone+tasks"
    for name in ("alpha-task", "beta-task"):
        _task(repo, name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tasks"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    manifest = tmp_path / "repos.yaml"
    manifest.write_text(f'repositories:\n  - {{repo: someone/tasks, commit: {commit}, path: ""}}\n')
    work = tmp_path / "work"
    cmd = [sys.executable, str(SCRIPT), str(manifest), "--mirrors", str(tmp_path / "mirrors"), "--work", str(work)]
    cmd += ["--match", "beta-*", "--base-image", "ghcr.io/example/base:1=debian:bookworm-slim"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "base image substituted: ghcr.io/example/base:1=debian:bookworm-slim (1 task dirs)" in done.stdout
    extracted = work / "someone+tasks" / commit[:12]
    assert (extracted / "beta-task" / "Dockerfile").read_text().startswith("FROM debian:bookworm-slim AS builder\n")
    untouched = (extracted / "alpha-task" / "Dockerfile").read_text()
    assert untouched.startswith("FROM ghcr.io/example/base:1 "), "a task dir not picked keeps its image"
    row = next(line for line in done.stdout.splitlines() if line.startswith("someone/tasks"))
    assert row.split()[1:4] == ["2", "2", "2"], row

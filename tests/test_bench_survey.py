"""bench/survey.py on real git repositories of tasks: --match, --base-image, Harbor's load columns, phase sums."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

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
    manifest, commit = _repo(tmp_path, ("alpha-task", "beta-task"))
    work = tmp_path / "work"
    cmd = [sys.executable, str(SCRIPT), str(manifest), "--mirrors", str(tmp_path / "mirrors"), "--work", str(work)]
    cmd += ["--match", "beta-*", "--base-image", "ghcr.io/example/base:1=debian:bookworm-slim"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "base image substituted: ghcr.io/example/base:1=debian:bookworm-slim (1 task dirs)" in done.stdout
    extracted = work / "someone+tasks" / commit[:12] / "tasks"
    assert (extracted / "beta-task" / "Dockerfile").read_text().startswith("FROM debian:bookworm-slim AS builder\n")
    untouched = (extracted / "alpha-task" / "Dockerfile").read_text()
    assert untouched.startswith("FROM ghcr.io/example/base:1 "), "a task dir not picked keeps its image"
    row = next(line for line in done.stdout.splitlines() if line.startswith("someone/tasks"))
    assert row.split()[1:4] == ["2", "2", "2"], row


HARBOR = Path("/tmp/harbor-venv/bin/harbor")


def _repo(tmp_path: Path, names: tuple[str, ...]) -> tuple[Path, str]:
    """A git repository of legacy tasks under ``tmp_path/mirrors``, and a manifest naming it at its commit."""
    repo = tmp_path / "mirrors" / "someone+tasks"
    for name in names:
        _task(repo, name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tasks"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    manifest = tmp_path / "repos.yaml"
    manifest.write_text(f'repositories:\n  - {{repo: someone/tasks, commit: {commit}, path: ""}}\n')
    return manifest, commit


@pytest.mark.skipif(not HARBOR.is_file(), reason=f"needs Harbor 0.25 installed at {HARBOR} (its venv's python)")
def test_harbor_load_columns_come_from_harbors_own_task_model(tmp_path: Path) -> None:
    """Harbor's columns: its Task model (legacy dirs through its migrate mapper) and Trial.create on Docker."""
    repo = tmp_path / "mirrors" / "someone+tasks"
    _task(repo, "alpha-task")  # no docker-compose.yaml: its Dockerfile here; Harbor's migrate needs the file
    _task(repo, "composed")
    (repo / "composed" / "docker-compose.yaml").write_text("services:\n  client:\n    build: {context: .}\n")
    _task(repo, "numeric-difficulty")  # loads here (metadata); Harbor's migrate refuses difficulty: 4
    (repo / "numeric-difficulty" / "task.yaml").write_text("instruction: write hello\ndifficulty: 4\n")
    org_less = repo / "org-less"  # Harbor and pytest-maka both refuse a package name without an org
    (org_less / "tests").mkdir(parents=True)
    (org_less / "environment").mkdir()
    (org_less / "task.toml").write_text('[task]\nname = "no-org"\n')
    (org_less / "instruction.md").write_text("do it\n")
    (org_less / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (org_less / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    offline = repo / "offline"  # both load it; Harbor 0.25 cannot run no-network on Docker without its sidecar
    (offline / "tests").mkdir(parents=True)
    (offline / "environment").mkdir()
    (offline / "task.toml").write_text('[environment]\nnetwork_mode = "no-network"\n')
    (offline / "instruction.md").write_text("do it\n")
    (offline / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (offline / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    manifest, _ = _repo(tmp_path, ())
    cmd = [sys.executable, str(SCRIPT), str(manifest), "--mirrors", str(tmp_path / "mirrors")]
    done = subprocess.run([*cmd, "--work", str(tmp_path / "work"), "--harbor", str(HARBOR)], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("someone/tasks"))
    assert row.split()[1:4] == ["5", "4/2", "4/1"], done.stdout
    assert "(here/Harbor)" in done.stdout
    differ = [line for line in done.stdout.splitlines() if line.startswith("  someone/tasks ")]
    assert len(differ) == 3, done.stdout
    assert any("alpha-task: here 1/1" in d and "Harbor 0/0" in d and "compose.yaml not found" in d for d in differ)
    assert any("numeric-difficulty: here 1/1" in d and "Harbor 0/0" in d and "difficulty" in d for d in differ)
    assert any("offline: here 1/1" in d and "Harbor 1/0" in d and "no-network" in d for d in differ)
    assert "not runnable in Harbor x1: ValidationError: task.name:" in done.stdout


def test_phase_sums_account_for_every_second_of_a_run() -> None:
    """Two cells on two workers: the phases, the time in no phase, idle workers, before and after add up."""
    sys.path.insert(0, str(ROOT / "bench"))
    from survey_runs import run_time

    cells = [
        {"started_at": "2026-12-04T10:00:10Z", "finished_at": "2026-12-04T10:00:40Z",
         "timings": {"setup": 12.0, "agent": 10.0, "verify": 5.0}},
        {"started_at": "2026-12-04T10:00:10Z", "finished_at": "2026-12-04T10:00:20Z",
         "timings": {"slot_wait": 4.0, "setup": 2.0, "verify": 3.0}},
    ]  # fmt: skip
    start = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC).timestamp()
    spent = run_time("here", cells, start, start + 45, 2, "timings")
    rows = dict(spent.rows())
    assert spent.cells == 2 and spent.cell_s == 40.0
    assert (rows["setup"], rows["agent"], rows["verify"], rows["slot_wait"]) == (14.0, 10.0, 8.0, 4.0)
    assert rows["in a cell, in no phase"] == 4.0
    assert rows["before the first cell (collection, session start)"] == 20.0  # 10 s x 2 workers
    assert rows["after the last cell (session end, reports)"] == 10.0
    assert rows["worker idle between the first and last cell"] == 20.0  # 30 s span x 2 workers - 40 s of cells
    assert sum(rows.values()) == 45.0 * 2, "every worker-second of the run is in one row"

    harbor_trial = {
        "started_at": "2026-12-04T10:00:00.000000Z", "finished_at": "2026-12-04T10:01:00.000000Z",
        "environment_setup": {"started_at": "2026-12-04T10:00:01Z", "finished_at": "2026-12-04T10:00:31Z"},
        "agent_execution": {"started_at": "2026-12-04T10:00:31Z", "finished_at": "2026-12-04T10:00:41Z"},
        "verifier": {"started_at": "2026-12-04T10:00:41Z", "finished_at": "2026-12-04T10:00:59Z"},
    }  # fmt: skip
    theirs = run_time("Harbor", [harbor_trial], start, start + 62, 1, "harbor")
    assert dict(theirs.rows())["environment_setup"] == 30.0 and theirs.phases["verifier"] == 18.0
    assert dict(theirs.rows())["in a cell, in no phase"] == 2.0


def test_a_mirror_lacking_some_files_is_surveyed_from_the_files_it_holds(tmp_path: Path) -> None:
    """A snapshot that lists a file without holding it: the rest is extracted and loaded, the gap is named."""
    manifest, commit = _repo(tmp_path, ("alpha-task", "beta-task"))
    repo = tmp_path / "mirrors" / "someone+tasks"
    (repo / "beta-task" / "big.bin").write_bytes(b"\x00" * 4096)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a large file"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    oid = subprocess.run([*git[:3], "rev-parse", "HEAD:beta-task/big.bin"], capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    (repo / ".git" / "objects" / oid[:2] / oid[2:]).unlink()  # loose, as a fresh commit leaves it
    manifest.write_text(
        f'repositories:\n  - {{repo: someone/tasks, commit: {commit}, path: ""}}\n'
        f'  - {{repo: someone/elsewhere, commit: {commit}, path: ""}}\n'
    )
    work = tmp_path / "work"
    cmd = [sys.executable, str(SCRIPT), str(manifest), "--mirrors", str(tmp_path / "mirrors"), "--work", str(work)]
    done = subprocess.run([*cmd, "--repo", "someone/tasks"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("someone/tasks"))
    assert row.split()[1:4] == ["2", "2", "2"], done.stdout
    assert f"someone/tasks @ {commit}: 1 files listed but absent from the mirror" in done.stdout
    assert "someone/elsewhere" not in done.stdout, "--repo leaves the other repositories out, unfetched or not"
    extracted = work / "someone+tasks" / commit[:12] / "tasks"
    assert (extracted / "beta-task" / "task.yaml").read_text().startswith("instruction:")
    assert not (extracted / "beta-task" / "big.bin").exists()


def test_public_network_rewrites_only_the_picked_tasks(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from survey_tasks import substitute_network

    task = tmp_path / "offline"
    task.mkdir()
    (task / "task.toml").write_text(
        '[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = "no-network"\n'
        '[agent]\nnetwork_mode = "public"\n'
    )
    assert substitute_network(task) == ["network_mode=public", "allow_internet=true"]
    text = (task / "task.toml").read_text()
    assert "allow_internet = true" in text and 'network_mode = "no-network"' not in text
    assert substitute_network(task) == [], "a second pass finds nothing left to change"
    nested = task / "inner"  # a task dir inside the picked one is another task: left as it is
    nested.mkdir()
    (nested / "task.toml").write_text("[environment]\nallow_internet = false\n")
    (task / "task.toml").write_text("[environment]\nallow_internet = false\n")
    assert substitute_network(task) == ["allow_internet=true"]
    assert (nested / "task.toml").read_text() == "[environment]\nallow_internet = false\n"


def test_a_harbor_path_without_its_venv_is_one_clear_message(tmp_path: Path) -> None:
    manifest, _ = _repo(tmp_path, ("alpha-task",))
    cmd = [sys.executable, str(SCRIPT), str(manifest), "--mirrors", str(tmp_path / "mirrors")]
    done = subprocess.run([*cmd, "--harbor", str(tmp_path / "nowhere" / "harbor")], capture_output=True, text=True)
    assert done.returncode == 1
    expected = "expected the harbor executable of a venv, with its python beside it"
    assert done.stderr.strip() == f"--harbor {tmp_path}/nowhere/harbor: {expected}"

"""The same Harbor task directories through Harbor 0.25 and through pytest-maka, oracle and nop.

    python bench/harbor_parity.py                        # bench/harbor_parity_tasks/*
    python bench/harbor_parity.py TASK_DIR... --harbor ~/.venvs/harbor/bin/harbor

Prints one row per (task, agent): Harbor's reward and wall time per trial, pytest-maka's
taxonomy class, score and wall time per cell, and whether the verdicts agree. Each side
runs twice at concurrency 1; the second (warm: images built) run is the one timed. Harbor
needs Python >= 3.12; without it (or ``--harbor``) only pytest-maka runs and the script
prints how to install it. Both use the local Docker engine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "bench" / "harbor_parity_tasks"
AGENTS = ("oracle", "nop")
HOW_TO_GET_HARBOR = (
    "Harbor is not available. It needs Python >= 3.12, e.g.:\n"
    "  ~/.pyenv/versions/3.12.1/bin/python -m venv /tmp/harbor-venv\n"
    "  /tmp/harbor-venv/bin/pip install 'harbor==0.25.*'\n"
    "then: python bench/harbor_parity.py --harbor /tmp/harbor-venv/bin/harbor"
)


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def run_harbor(harbor: str, task: Path, agent: str, jobs: Path, name: str) -> dict[str, Any]:
    """One Harbor trial: its reward (None on an exception), trial and process wall times."""
    started = time.monotonic()
    cmd = [harbor, "run", "-p", str(task), "-a", agent, "-e", "docker", "-o", str(jobs), "--job-name", name, "-y", "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    results = sorted((jobs / name).glob("*/result.json"))
    if not results:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return {"verdict": "error", "reward": None, "trial_s": None, "wall_s": wall, "note": tail[0][:80]}
    trial = json.loads(results[0].read_text())
    rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
    reward = rewards.get("reward", next(iter(rewards.values()), None)) if rewards else None
    exception = trial.get("exception_info")
    verdict = "error" if exception or reward is None else ("pass" if reward == 1 else "fail")
    note = (exception or {}).get("exception_type", "") if exception else ""
    return {
        "verdict": verdict,
        "reward": reward,
        "rewards": rewards,
        "trial_s": _seconds(trial["started_at"], trial["finished_at"]),
        "wall_s": wall,
        "note": note,
    }


def run_maka(tasks: list[Path], work: Path, out_name: str) -> tuple[dict[tuple[str, str], dict[str, Any]], float]:
    """One pytest-maka run of every task x (oracle, nop) at concurrency 1; its records and wall time."""
    spec = work / "cohort.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "harbor-parity",
                "tasks": [{"path": str(t)} for t in tasks],
                "subjects": [{"name": a, "kind": a} for a in AGENTS],
                "executor": {"kind": "docker"},
                "policy": {"verifier_network": True},  # Harbor gives the verifier the network too
            }
        )
    )
    out = work / out_name
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=3600)
    wall = time.monotonic() - started
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        r = json.loads(line)
        rows[(r["task"], r["subject"])] = r
    skipped = json.loads((out / "lock.json").read_text())["runs"][-1].get("skipped", {}) if out.is_dir() else {}
    for cell_id, why in skipped.items():
        task, _, rest = cell_id.partition("[")
        rows[(task, rest.rsplit("-r", 1)[0])] = {"status": "skipped", "score": None, "duration_s": None, "why": why}
    if not rows:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    return rows, wall


def maka_verdict(record: dict[str, Any] | None) -> str:
    if record is None:
        return "missing"
    return {"agent_success": "pass", "agent_failure": "fail", "agent_incomplete": "fail"}.get(
        record["status"], record["status"]
    )


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", type=Path, help="Harbor task dirs (default: bench/harbor_parity_tasks/*)")
    parser.add_argument("--harbor", help="the harbor executable (default: `harbor` on PATH)")
    parser.add_argument("--cold", action="store_true", help="time the first run too")
    args = parser.parse_args()
    tasks = [t.resolve() for t in args.tasks] or sorted(p for p in TASKS.iterdir() if (p / "task.toml").is_file())
    harbor = args.harbor or shutil.which("harbor")
    if harbor is None:
        print(HOW_TO_GET_HARBOR)
    with tempfile.TemporaryDirectory(prefix="maka-parity-") as tmp:
        work = Path(tmp)
        run_maka(tasks, work, "cold")  # builds the images
        maka, maka_wall = run_maka(tasks, work, "warm")
        theirs: dict[tuple[str, str], dict[str, Any]] = {}
        if harbor:
            for task in tasks:
                for agent in AGENTS:
                    run_harbor(harbor, task, agent, work / "jobs", f"cold-{task.name}-{agent}")
                    theirs[(task.name, agent)] = run_harbor(harbor, task, agent, work / "jobs", f"{task.name}-{agent}")
    print(
        f"\n{'task':<20} {'agent':<7} {'harbor':<8} {'reward':>6} {'trial s':>8} {'proc s':>7} | "
        f"{'pytest-maka':<16} {'score':>5} {'cell s':>7} | same"
    )
    agree = ran = 0
    harbor_trial: list[float] = []
    maka_cell: list[float] = []
    for task in tasks:
        for agent in AGENTS:
            h = theirs.get((task.name, agent))
            m = maka.get((task.name, agent))
            mv = maka_verdict(m)
            same = "-"
            if h is not None:
                ran += 1
                same = "yes" if h["verdict"] == mv else "NO"
                agree += same == "yes"
                if h["trial_s"] is not None:
                    harbor_trial.append(h["trial_s"])
            if m is not None and m.get("duration_s") is not None:
                maka_cell.append(m["duration_s"])
            hcols = (
                f"{h['verdict']:<8} {_fmt(h['reward'], 2):>6} {_fmt(h['trial_s']):>8} {_fmt(h['wall_s']):>7}"
                if h
                else f"{'-':<8} {'-':>6} {'-':>8} {'-':>7}"
            )
            score, cell_s = (m.get("score"), m.get("duration_s")) if m else (None, None)
            mcols = f"{mv:<16} {_fmt(score, 2):>5} {_fmt(cell_s, 2):>7}"
            print(f"{task.name:<20} {agent:<7} {hcols} | {mcols} | {same}")
            if m and m.get("why"):
                print(f"{'':<28}pytest-maka skipped: {m['why']}")
    print(f"\npytest-maka warm run: {len(maka)} cells in {maka_wall:.1f} s (one pytest process, concurrency 1)")
    if maka_cell:
        print(f"pytest-maka per cell (warm): median {sorted(maka_cell)[len(maka_cell) // 2]:.2f} s")
    if harbor_trial:
        h_med = sorted(harbor_trial)[len(harbor_trial) // 2]
        print(f"Harbor per trial (warm): median {h_med:.2f} s; same verdict on {agree} of {ran} (task, agent) pairs")
        if maka_cell:
            print(f"speed-up per trivial cell: {h_med / sorted(maka_cell)[len(maka_cell) // 2]:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

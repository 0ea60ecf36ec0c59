"""The same Harbor task directories through Harbor 0.25 and through pytest-maka, oracle and nop.

    python bench/harbor_parity.py --harbor /tmp/harbor-venv/bin/harbor   # the whole parity set
    python bench/harbor_parity.py TASK_DIR... --harbor ~/.venvs/harbor/bin/harbor
    python bench/harbor_parity.py bench/harbor_parity_tasks/make-file --repeat 5 --harbor ...

The parity set is every task directory of ``bench/harbor_parity_tasks/`` (harness features:
an image ``ENV PATH``, a multi-key reward, a separate verifier) and of
``tests/docker/honest_tasks/`` (honest solutions that leave the environment changed: a service
left running, files in ``/etc``, in HOME, ``/usr/local/bin``, the system site-packages; the
Docker tests assert their verdicts here too).

Prints one row per (task, agent): Harbor's reward and wall time per trial, pytest-maka's
taxonomy class, score and wall time per cell, and whether the verdicts agree. Each side
runs at concurrency 1, first once to build the images (Harbor: one trial per task), then
``--repeat`` times warm; the warm runs are timed (medians). Harbor needs Python >= 3.12;
without it (or ``--harbor``) only pytest-maka runs and the script prints how to install it.
Both use the local Docker engine. ``--markdown`` prints the table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: The parity set: every task directory below these folders (one home per task).
TASK_DIRS = (ROOT / "bench" / "harbor_parity_tasks", ROOT / "tests" / "docker" / "honest_tasks")
AGENTS = ("oracle", "nop")
HOW_TO_GET_HARBOR = (
    "Harbor is not available. It needs Python >= 3.12, e.g.:\n"
    "  ~/.pyenv/versions/3.12.1/bin/python -m venv /tmp/harbor-venv\n"
    "  /tmp/harbor-venv/bin/pip install 'harbor==0.25.*'\n"
    "then: python bench/harbor_parity.py --harbor /tmp/harbor-venv/bin/harbor"
)


def parity_set() -> list[Path]:
    """The task directories of the parity set, sorted by folder then name."""
    return [p for d in TASK_DIRS for p in sorted(d.iterdir()) if (p / "task.toml").is_file()]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def run_harbor(harbor: str, task: Path, agent: str, jobs: Path, name: str, attempts: int = 1) -> dict[str, Any]:
    """``attempts`` Harbor trials one at a time: the verdict (``mixed`` when they differ), reward, times."""
    started = time.monotonic()
    cmd = [harbor, "run", "-p", str(task), "-a", agent, "-e", "docker", "-o", str(jobs), "--job-name", name, "-y", "-q"]
    cmd += ["-k", str(attempts), "-n", "1"]
    # LiteLLM (imported by Harbor) otherwise fetches a price list from GitHub at every start
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800 * attempts, env=env)
    wall = time.monotonic() - started
    results = sorted((jobs / name).glob("*/result.json"))
    if not results:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        note = tail[0][:80]
        return {"verdict": "error", "reward": None, "trial_s": None, "trials_s": [], "wall_s": wall, "note": note}
    verdicts, times, notes = set(), [], set()
    reward: float | None = None
    rewards: dict[str, Any] = {}
    for path in results:
        trial = json.loads(path.read_text())
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        reward = rewards.get("reward", next(iter(rewards.values()), None)) if rewards else None
        exception = trial.get("exception_info")
        verdicts.add("error" if exception or reward is None else ("pass" if reward == 1 else "fail"))
        notes.add((exception or {}).get("exception_type", "") if exception else "")
        times.append(_seconds(trial["started_at"], trial["finished_at"]))
    return {
        "verdict": verdicts.pop() if len(verdicts) == 1 else "mixed",
        "reward": reward,
        "rewards": rewards,
        "trial_s": statistics.median(times),
        "trials_s": times,
        "wall_s": wall,
        "note": " ".join(sorted(n for n in notes if n)),
    }


def run_maka(
    tasks: list[Path], work: Path, out_name: str, repetitions: int = 1
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], float]:
    """One pytest-maka run of every task x (oracle, nop) x repetitions at concurrency 1; records and wall time."""
    spec = work / "cohort.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "harbor-parity",
                "tasks": [{"path": str(t)} for t in tasks],
                "subjects": [{"name": a, "kind": a} for a in AGENTS],
                "repetitions": repetitions,
                "executor": {"kind": "docker"},
                "policy": {"verifier_network": True},  # Harbor gives the verifier the network too
            }
        )
    )
    out = work / out_name
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=3600 * repetitions)
    wall = time.monotonic() - started
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        r = json.loads(line)
        rows.setdefault((r["task"], r["subject"]), []).append(r)
    skipped = json.loads((out / "lock.json").read_text())["runs"][-1].get("skipped", {}) if out.is_dir() else {}
    for cell_id, why in skipped.items():
        task, _, rest = cell_id.partition("[")
        skip = {"status": "skipped", "score": None, "duration_s": None, "why": why}
        rows.setdefault((task, rest.rsplit("-r", 1)[0]), []).append(skip)
    if not rows:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    return rows, wall


def maka_verdict(record: dict[str, Any] | None) -> str:
    if record is None:
        return "missing"
    return {"agent_success": "pass", "agent_failure": "fail", "agent_incomplete": "fail"}.get(
        record["status"], record["status"]
    )


def _verdict(records: list[dict[str, Any]]) -> str:
    """The verdict of a (task, agent)'s cells: one class, or ``mixed``."""
    verdicts = {maka_verdict(r) for r in records} or {"missing"}
    return verdicts.pop() if len(verdicts) == 1 else "mixed"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", type=Path, help="Harbor task dirs (default: the parity set)")
    parser.add_argument("--harbor", help="the harbor executable (default: `harbor` on PATH)")
    parser.add_argument("--repeat", type=int, default=1, help="warm trials / cells per (task, agent), timed")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args()
    tasks = [t.resolve() for t in args.tasks] or parity_set()
    harbor = args.harbor or shutil.which("harbor")
    if harbor is None:
        print(HOW_TO_GET_HARBOR)
    print(f"{len(tasks)} tasks; load average at start {_load()}")
    with tempfile.TemporaryDirectory(prefix="maka-parity-") as tmp:
        work = Path(tmp)
        run_maka(tasks, work, "cold")  # builds the images
        maka, maka_wall = run_maka(tasks, work, "warm", args.repeat)
        print(f"pytest-maka done; load average {_load()}")
        theirs: dict[tuple[str, str], dict[str, Any]] = {}
        if harbor:
            for task in tasks:
                run_harbor(harbor, task, "nop", work / "jobs", f"cold-{task.name}")  # builds the image
                for agent in AGENTS:
                    name = f"{task.name}-{agent}"
                    theirs[(task.name, agent)] = run_harbor(harbor, task, agent, work / "jobs", name, args.repeat)
            print(f"Harbor done; load average {_load()}")
    print(
        f"\n{'task':<32} {'agent':<7} {'harbor':<8} {'reward':>6} {'trial s':>8} {'proc s':>7} | "
        f"{'pytest-maka':<16} {'score':>5} {'cell s':>7} | same"
    )
    agree = ran = 0
    harbor_trial: list[float] = []
    maka_cell: list[float] = []
    lines = ["| task | agent | Harbor 0.25 reward | pytest-maka class | agree | Harbor trial s | pytest-maka cell s |"]
    lines.append("|---|---|---|---|---|---|---|")
    for task in tasks:
        for agent in AGENTS:
            h = theirs.get((task.name, agent))
            ms = maka.get((task.name, agent), [])
            mv = _verdict(ms)
            same = "-"
            if h is not None:
                ran += 1
                same = "yes" if h["verdict"] == mv else "NO"
                agree += same == "yes"
                harbor_trial += h["trials_s"]
            cells = [m["duration_s"] for m in ms if m.get("duration_s") is not None]
            maka_cell += cells
            cell_s = statistics.median(cells) if cells else None
            hcols = (
                f"{h['verdict']:<8} {_fmt(h['reward'], 2):>6} {_fmt(h['trial_s']):>8} {_fmt(h['wall_s']):>7}"
                if h
                else f"{'-':<8} {'-':>6} {'-':>8} {'-':>7}"
            )
            scores = {m.get("score") for m in ms}
            score = scores.pop() if len(scores) == 1 else None
            print(f"{task.name:<32} {agent:<7} {hcols} | {mv:<16} {_fmt(score, 2):>5} {_fmt(cell_s, 2):>7} | {same}")
            for m in ms:
                if m.get("why"):
                    print(f"{'':<40}pytest-maka skipped: {m['why']}")
                elif m.get("error") and m["status"] not in ("agent_success", "agent_failure"):
                    print(f"{'':<40}pytest-maka: {str(m['error'].get('message', ''))[:120]}")
            classes = "/".join(sorted({m["status"] for m in ms})) or "missing"
            reward = _fmt(h["reward"], 2) if h else "-"
            harbor_cell = f"{reward} ({h['verdict']})" if h else "-"
            trial = _fmt(h["trial_s"]) if h else "-"
            lines.append(
                f"| {task.name} | {agent} | {harbor_cell} | {classes} | {same} | {trial} | {_fmt(cell_s, 2)} |"
            )
    n_cells = sum(map(len, maka.values()))
    print(f"\npytest-maka warm run: {n_cells} cells in {maka_wall:.1f} s (one pytest process, concurrency 1)")
    if maka_cell:
        print(f"pytest-maka per cell (warm): median {statistics.median(maka_cell):.2f} s")
    if harbor_trial:
        h_med = statistics.median(harbor_trial)
        print(f"Harbor per trial (warm): median {h_med:.2f} s; same verdict on {agree} of {ran} (task, agent) pairs")
        if maka_cell:
            print(f"Harbor trial / pytest-maka cell (medians): {h_med / statistics.median(maka_cell):.1f}x")
    print(f"load average at end {_load()}")
    if args.markdown:
        print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

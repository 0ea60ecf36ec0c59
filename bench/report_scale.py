"""Report at scale: ``maka report DIR`` over a generated 10,000-cell output directory.

Generates (default) 4 subjects x 500 tasks x 5 repetitions with realistic artifacts on disk
(attempts.jsonl with some infra retries; per attempt: instruction, subject stdout/stderr, an
ATIF-like trajectory, usage, claim, workspace diff, verifier output), then runs
``maka report DIR`` in a child process and prints its wall time, the child's peak memory
(``getrusage`` max RSS) and the size of report.html; then, when /usr/bin/chromium and
Playwright are present, the time until the page is interactive in headless Chromium
(navigation start to the page's ready mark) and the time a filter takes.

    python bench/report_scale.py [--subjects 4] [--tasks 500] [--repetitions 5] [--keep] [--no-browser]

Targets (issue 5): <= 5 s, <= 500 MB, <= 15 MB, interactive <= 3 s. Figures only: no assertion.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
TARGETS = {"time_s": 5.0, "peak_mb": 500.0, "html_mb": 15.0, "interactive_s": 3.0}
T0 = 1_760_000_000.0

SUBJECT_SKILL = {"agent-alpha": 0.75, "agent-beta": 0.6, "agent-gamma": 0.45, "agent-delta": 0.3}


def _subjects(n: int, references: bool) -> list[tuple[str, str, float]]:
    names = list(SUBJECT_SKILL) + [f"agent-{i}" for i in range(len(SUBJECT_SKILL), n)]
    out = [(name, "command", SUBJECT_SKILL.get(name, 0.5)) for name in names[:n]]
    if references:
        out += [("oracle", "oracle", 1.0), ("nop", "nop", 0.0)]
    return out


def _trajectory(rng: random.Random, task: str, passed: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": f"Solve {task}."}]
    for i in range(2, rng.randint(4, 14)):
        cmd = rng.choice(["ls -la", "cat main.py", "pytest -q", "sed -i 's/a/b/' main.py", "git diff"])
        steps.append(
            {
                "step_id": i,
                "source": "agent",
                "message": f"Step {i}: running `{cmd}` to make progress.",
                "tool_calls": [{"tool_call_id": f"c{i}", "function_name": "bash", "arguments": {"command": cmd}}],
                "observation": {
                    "results": [{"source_call_id": f"c{i}", "content": f"output of {cmd}\n" * rng.randint(1, 4)}]
                },
                "metrics": {"prompt_tokens": 900 + 300 * i, "completion_tokens": 60},
            }
        )
    steps.append(
        {
            "step_id": len(steps) + 1,
            "source": "agent",
            "message": "Done: all tests pass." if passed else "I believe the task is complete.",
        }
    )
    return {"schema_version": "ATIF-v1.2", "session_id": task, "steps": steps}


def _write_attempt(out: Path, rel: str, rng: random.Random, task: str, status: str, usage: dict[str, Any]) -> dict:
    base = out / rel
    (base / "agent").mkdir(parents=True, exist_ok=True)
    passed = status == "agent_success"
    (base / "instruction.md").write_text(f"# {task}\n\nMake the tests in /app pass without editing them.\n" * 3)
    (base / "agent.stdout.txt").write_text("".join(f"[agent] step {i}: working on {task}\n" for i in range(30)))
    (base / "agent.stderr.txt").write_text("warning: something mildly odd\n" if rng.random() < 0.3 else "")
    (base / "agent" / "trajectory.json").write_text(json.dumps(_trajectory(rng, task, passed)))
    (base / "agent" / "usage.json").write_text(json.dumps(usage))
    (base / "agent" / "claim.json").write_text(json.dumps({"status": "complete"}))
    (base / "workspace.diff").write_text(
        "--- a/main.py\n+++ b/main.py\n@@ -1,3 +1,3 @@\n def f(x):\n-    return x\n+    return x + 1\n"
    )
    verdict = "5 passed" if passed else "3 passed, 2 failed\nFAILED test_main.py::test_edge - AssertionError"
    (base / "verifier.stdout.txt").write_text(f"============ test session starts ============\n{verdict}\n")
    return {
        "dir": rel,
        "instruction": f"{rel}/instruction.md",
        "agent_log": f"{rel}/agent.stdout.txt",
        "agent_stderr": f"{rel}/agent.stderr.txt",
        "trajectory": f"{rel}/agent/trajectory.json",
        "diff": f"{rel}/workspace.diff",
        "verifier_output": f"{rel}/verifier.stdout.txt",
    }


def generate(
    out: Path, *, subjects: int = 4, tasks: int = 500, repetitions: int = 5, seed: int = 0, references: bool = False
) -> int:
    """Write attempts.jsonl and cell artifacts for a synthetic cohort into ``out``; return the cell count."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    difficulty = [rng.betavariate(2, 2) for _ in range(tasks)]
    lines: list[str] = []
    cells = 0
    for t in range(tasks):
        task = f"task-{t:04d}"
        for name, kind, skill in _subjects(subjects, references):
            for rep in range(repetitions):
                cells += 1
                key = f"{task}__{name}__r{rep}-{hashlib.sha256(f'{task}{name}'.encode()).hexdigest()[:12]}"
                p = skill if kind != "command" else max(0.02, min(0.98, skill + 0.6 * (0.5 - difficulty[t])))
                roll = rng.random()
                status = (
                    "agent_success"
                    if roll < p
                    else "agent_incomplete"
                    if roll > 0.97
                    else "verifier_failure"
                    if roll > 0.96
                    else "agent_failure"
                )
                attempts = ["infra_failure", status] if rng.random() < 0.02 else [status]
                for n, st in enumerate(attempts, start=1):
                    usage = (
                        {
                            "input_tokens": rng.randint(2_000, 60_000),
                            "output_tokens": rng.randint(100, 4_000),
                            "cost_usd": round(rng.uniform(0.01, 0.4), 4),
                        }
                        if kind == "command"
                        else {"input_tokens": None, "output_tokens": None, "cost_usd": None}
                    )
                    rel = f"cells/{key}/attempt-{n}"
                    artifacts = (
                        {"dir": rel} if st == "infra_failure" else _write_attempt(out, rel, rng, task, st, usage)
                    )
                    start = T0 + cells * 3.0
                    dur = round(rng.lognormvariate(3.5, 0.6), 3)
                    lines.append(
                        json.dumps(
                            {
                                "schema": "pytest-maka/result/1",
                                "cohort": "scale",
                                "cell_id": f"{task}[{name}-r{rep}]",
                                "cell_key": key,
                                "task": task,
                                "subject": name,
                                "subject_kind": kind,
                                "repetition": rep,
                                "attempt": n,
                                "attempt_count": n,
                                "status": st,
                                "passed": st == "agent_success",
                                "official": st in ("agent_success", "agent_failure", "agent_incomplete"),
                                "score": (1.0 if st == "agent_success" else 0.0)
                                if st in ("agent_success", "agent_failure")
                                else None,
                                "duration_s": dur,
                                "started_at": _iso(start),
                                "finished_at": _iso(start + dur),
                                "usage": usage,
                                "agent": {"exit_code": 0 if st != "agent_incomplete" else 137},
                                "verifier": {"exit_code": 0, "reward": 1.0 if st == "agent_success" else 0.0},
                                "subject_claim": {"status": "complete"} if kind == "command" else None,
                                "isolation": {"executor": "local"},
                                "budget": {},
                                "artifacts": artifacts,
                                "error": {"type": "infra_failure", "message": "container exited (137) during setup"}
                                if st == "infra_failure"
                                else None,
                            }
                        )
                    )
    (out / "attempts.jsonl").write_text("\n".join(lines) + "\n")
    return cells


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def run_report(out: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of ``maka report out`` in a child process."""
    maka = Path(sys.executable).with_name("maka")
    cmd = [str(maka)] if maka.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    start = time.perf_counter()
    proc = subprocess.Popen([*cmd, "report", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"maka report failed ({proc.returncode}): {err}")
    return wall, usage.ru_maxrss / 1024


def browser_timings(html: Path) -> tuple[float, float, float] | None:
    """(seconds from goto to ready, page's own ready mark in s, seconds for one filter) or None without Chromium."""
    if not Path(CHROMIUM).exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        start = time.perf_counter()
        page.goto(html.as_uri())
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)
        wall = time.perf_counter() - start
        mark = page.evaluate("window.makaReady") / 1000
        start = time.perf_counter()
        page.select_option("#f-class", "agent_failure")
        page.wait_for_function("() => document.getElementById('shown').textContent.indexOf(' of ') > 0")
        filt = time.perf_counter() - start
        browser.close()
    return wall, mark, filt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subjects", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--out", type=Path, help="output directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the generated directory")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="maka-report-scale-"))
    try:
        t = time.perf_counter()
        cells = generate(out, subjects=args.subjects, tasks=args.tasks, repetitions=args.repetitions)
        print(f"generated {cells} cells in {time.perf_counter() - t:.1f}s: {out}")
        wall, peak = run_report(out)
        size = (out / "report.html").stat().st_size / 1e6
        print(f"maka report: {wall:.2f} s (target <= {TARGETS['time_s']:g} s)")
        print(f"peak memory: {peak:.0f} MB (target <= {TARGETS['peak_mb']:g} MB)")
        print(f"report.html: {size:.2f} MB (target <= {TARGETS['html_mb']:g} MB)")
        timings = None if args.no_browser else browser_timings(out / "report.html")
        if timings is None:
            print("interactive: not measured (no /usr/bin/chromium or Playwright, or --no-browser)")
        else:
            print(
                f"interactive in Chromium: {timings[0]:.2f} s from navigation (page ready mark {timings[1]:.2f} s; "
                f"target <= {TARGETS['interactive_s']:g} s); one class filter: {1000 * timings[2]:.0f} ms"
            )
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``maka report DIR`` end to end, through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.core.cell import Cell
from pytest_maka.core.record_model import AttemptRecord
from pytest_maka.core.records import attempt_record
from pytest_maka.core.taxonomy import Status
from pytest_maka.store.ledger import Ledger

from .builders import make_cell

S = Status
T0 = 1_700_000_000.0


def _maka() -> list[str]:
    script = Path(sys.executable).with_name("maka")
    if script.exists():
        return [str(script)]
    found = shutil.which("maka")
    return [found] if found else [sys.executable, "-m", "pytest_maka.cli"]


def run_maka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_maka(), *args], capture_output=True, text=True, timeout=120)


def attempt(cell: Cell, n: int, status: Status, offset: float = 0.0) -> AttemptRecord:
    return attempt_record(
        cell,
        cohort="nightly",
        attempt=n,
        status=status,
        started=T0 + offset,
        finished=T0 + offset + 5.0,
        error={"type": "DockerError", "message": "engine went away"} if status is S.INFRA_FAILURE else None,
    )


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """A ledger as a run would leave it: retries, a rerun, several subjects."""
    ledger = Ledger(tmp_path)
    retried = make_cell("fix-perms", "claude")
    rerun = make_cell("parse-log", "claude")
    for record in [
        attempt(retried, 1, S.INFRA_FAILURE),
        attempt(retried, 2, S.AGENT_SUCCESS, 10),
        attempt(rerun, 1, S.AGENT_FAILURE),
        attempt(rerun, 2, S.AGENT_SUCCESS, 20),  # a lucky rerun must not replace the first verdict
        attempt(make_cell("fix-perms", "oracle", "oracle"), 1, S.AGENT_SUCCESS),
        attempt(make_cell("parse-log", "oracle", "oracle"), 1, S.AGENT_SUCCESS),
        attempt(make_cell("fix-perms", "nop", "nop"), 1, S.AGENT_SUCCESS),
    ]:
        ledger.append(record)
    with (tmp_path / "attempts.jsonl").open("a") as fh:
        fh.write('{"torn": ')  # a crash mid-write leaves a partial last line
    return tmp_path


def test_report_rebuilds_results_and_views(out_dir: Path) -> None:
    proc = run_maka("report", str(out_dir))
    assert proc.returncode == 0, proc.stderr
    for name in ("results.jsonl", "report.html", "summary.md"):
        assert (out_dir / name).is_file()
        assert f"wrote {out_dir / name}" in proc.stdout

    results = {r["cell_id"]: r for r in map(json.loads, (out_dir / "results.jsonl").read_text().splitlines())}
    assert len(results) == 5
    assert results["fix-perms[claude-r1]"]["status"] == "agent_success"
    assert results["fix-perms[claude-r1]"]["attempt_count"] == 2
    assert results["parse-log[claude-r1]"]["status"] == "agent_failure"  # earliest valid attempt wins

    # terminal table: one row per subject with written-out denominators
    lines = proc.stdout.splitlines()
    assert "cohort nightly: 5 cells" in proc.stdout
    claude = next(line for line in lines if line.startswith("claude"))
    assert "1/2 = 50.0%" in claude
    assert any(line.startswith("oracle") and "2/2 = 100.0%" in line for line in lines)
    assert "broken: passes with nop" in proc.stdout

    html = (out_dir / "report.html").read_text(encoding="utf-8")
    assert "<h1>nightly</h1>" in html and "1/2 = 50.0%" in html
    assert "engine went away" in html  # the retried cell's history is in its drill-down
    assert not list(out_dir.glob("*.tmp")) and not list(out_dir.glob(".*.tmp"))


def test_report_cohort_override(out_dir: Path) -> None:
    proc = run_maka("report", str(out_dir), "--cohort", "renamed")
    assert proc.returncode == 0, proc.stderr
    assert "<h1>renamed</h1>" in (out_dir / "report.html").read_text(encoding="utf-8")


def test_report_without_ledger_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = run_maka("report", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "attempts.jsonl" in proc.stderr and str(tmp_path) in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "report.html").exists()


def test_report_with_empty_ledger_exits_2(tmp_path: Path) -> None:
    (tmp_path / "attempts.jsonl").write_text("")
    proc = run_maka("report", str(tmp_path))
    assert proc.returncode == 2
    assert "no complete attempt" in proc.stderr


def test_usage_errors_exit_2() -> None:
    assert run_maka().returncode == 2
    assert run_maka("frobnicate").returncode == 2
    help_text = run_maka("report", "--help")
    assert help_text.returncode == 0 and "DIR" in help_text.stdout


def _run_dir(path: Path, outcomes: dict[tuple[str, str], list[Status]]) -> Path:
    ledger = Ledger(path)
    for (task, subject), statuses in outcomes.items():
        for rep, status in enumerate(statuses):
            ledger.append(attempt(make_cell(task, subject, rep=rep), 1, status, rep))
    return path


def test_compare_two_runs_pairs_by_subject_and_task(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(12)]
    before = _run_dir(
        tmp_path / "before",
        {
            **{(t, "claude"): [S.AGENT_FAILURE] for t in tasks},
            **{(t, "gpt"): [S.AGENT_SUCCESS] for t in tasks[:6]},
            ("t0", "old-only"): [S.AGENT_SUCCESS],
        },
    )
    after = _run_dir(
        tmp_path / "after",
        {
            **{(t, "claude"): [S.AGENT_SUCCESS if i < 10 else S.AGENT_FAILURE] for i, t in enumerate(tasks)},
            **{(t, "gpt"): [S.AGENT_SUCCESS] for t in tasks[:6]},
        },
    )
    proc = run_maka("compare", str(before), str(after))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    claude = next(line for line in lines if line.startswith("claude"))
    # 10 tasks flipped to pass, none the other way: McNemar exact p = 2 * 0.5**10
    assert "0/12 = 0.0%" in claude and "10/12 = 83.3%" in claude and "+83.3 pp" in claude
    assert "p = 0.002" in claude and "10/0/2" in claude
    gpt = next(line for line in lines if line.startswith("gpt"))
    assert "+0.0 pp" in gpt and "p = 1.00" in gpt
    assert "only in before: old-only" in proc.stdout
    md = (after / "compare.md").read_text()
    assert "### claude: 10 tasks changed" in md and "| t0 | 0.0% | 100.0% | +100.0 pp |" in md
    html = (after / "compare.html").read_text()
    assert "before → after" in html and "http" not in html.replace("http-equiv", "")


def test_compare_writes_to_out_and_rejects_missing_ledgers(tmp_path: Path, out_dir: Path) -> None:
    proc = run_maka("compare", str(out_dir), str(out_dir), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cmp" / "compare.html").is_file() and (tmp_path / "cmp" / "compare.md").is_file()
    missing = run_maka("compare", str(out_dir), str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no attempts.jsonl" in missing.stderr

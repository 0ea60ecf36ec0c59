"""``maka report`` / ``maka compare`` on a ledger that is not theirs, through the console script.

Each ledger of the corpus (missing field, other schema, not JSON, not UTF-8, ...) gets one
line naming the file, the line and the field, exit 2, and leaves the directory as it was.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .targets import LEDGER

CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus" / "attempts.jsonl"
LEDGERS = sorted(CORPUS.iterdir())


def _maka(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("maka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def _run_dir(root: Path, name: str, ledger: bytes) -> Path:
    out = root / name
    out.mkdir()
    (out / "attempts.jsonl").write_bytes(ledger)
    return out


def _assert_one_line(proc: subprocess.CompletedProcess[str], ledger: Path) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"maka: error: {ledger}: line "), lines[0]
    return lines[0]


@pytest.mark.parametrize("case", LEDGERS, ids=lambda p: p.name)
def test_report_names_file_line_and_field(case: Path, tmp_path: Path) -> None:
    out = _run_dir(tmp_path, "run", case.read_bytes())
    line = _assert_one_line(_maka("report", str(out)), out / "attempts.jsonl")
    assert re.search(r": line \d+: ", line)
    assert sorted(p.name for p in out.iterdir()) == ["attempts.jsonl"], "nothing written beside a foreign ledger"
    assert (out / "attempts.jsonl").read_bytes() == case.read_bytes()


@pytest.mark.parametrize("case", LEDGERS[:3], ids=lambda p: p.name)
def test_compare_names_the_foreign_side(case: Path, tmp_path: Path) -> None:
    good = _run_dir(tmp_path, "good", LEDGER)
    bad = _run_dir(tmp_path, "bad", case.read_bytes())
    _assert_one_line(_maka("compare", str(good), str(bad)), bad / "attempts.jsonl")
    _assert_one_line(_maka("compare", str(bad), str(good)), bad / "attempts.jsonl")
    assert not (good / "compare.html").exists() and not (bad / "compare.html").exists()


def test_missing_field_is_named(tmp_path: Path) -> None:
    out = _run_dir(tmp_path, "run", (CORPUS / "missing-field.jsonl").read_bytes())
    line = _assert_one_line(_maka("report", str(out)), out / "attempts.jsonl")
    assert line.endswith("attempts.jsonl: line 2: cell_id: missing required key (+4 more problems)"), line


def test_torn_last_line_is_skipped_not_refused(tmp_path: Path) -> None:
    out = _run_dir(tmp_path, "run", LEDGER + b'{"schema": "pytest-maka/res')
    proc = _maka("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "results.jsonl").is_file()


def test_good_ledger_still_reports(tmp_path: Path) -> None:
    """The checks refuse only what the views cannot use: the fuzz seed (4 attempts, 2 cells) reports."""
    out = _run_dir(tmp_path, "run", LEDGER)
    proc = _maka("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 2

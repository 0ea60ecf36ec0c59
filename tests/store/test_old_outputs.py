"""Output directories written by earlier versions (tests/store/data) are read by today's views."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.core.records import SCHEMA, SCHEMA_VERSION, cells_of
from pytest_maka.report import write_views
from pytest_maka.store.lock import last_run
from pytest_maka.store.reading import LedgerError, read_ledger

DATA = Path(__file__).parent / "data"
OLD = sorted(p.name for p in DATA.glob("out-*"))


def _maka(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("maka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(DATA / name, out)
    return out


def test_there_are_outputs_of_three_earlier_versions() -> None:
    assert OLD == ["out-29adc97", "out-5751625", "out-88997ad"]


@pytest.mark.parametrize("name", OLD)
def test_maka_report_reads_an_earlier_versions_output_and_keeps_its_run_details(name: str, tmp_path: Path) -> None:
    out = _copy(name, tmp_path)
    original = {r["cell_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    proc = _maka("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "cohort example: 15 cells" in proc.stdout
    assert any(line.startswith("oracle") and "5/5 = 100.0%" in line for line in proc.stdout.splitlines())
    rebuilt = {r["cell_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {k: r["status"] for k, r in rebuilt.items()} == {k: r["status"] for k, r in original.items()}
    for record in rebuilt.values():
        assert record["schema"] == SCHEMA and record["run"] == 1
        phases = record["isolation"]["network"]["phases"]
        assert all(isinstance(detail, dict) and detail["mode"] == "none" for detail in phases.values()), phases
    lock = json.loads((out / "lock.json").read_text())["runs"][-1]
    html = (out / "report.html").read_text(encoding="utf-8")
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert lock["spec"] in html and " ".join(lock["argv"]) in html, "the original run's details are kept"
    assert lock["versions"]["python"] in html and "local" in html
    assert "15" in summary


def test_maka_compare_reads_the_oldest_and_the_newest_earlier_outputs(tmp_path: Path) -> None:
    a, b = _copy("out-88997ad", tmp_path), _copy("out-5751625", tmp_path)
    proc = _maka("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cmp" / "compare.html").is_file() and (tmp_path / "cmp" / "compare.md").is_file()
    assert "oracle" in proc.stdout and "naive-agent" in proc.stdout


@pytest.mark.parametrize("name", OLD)
def test_every_view_builds_from_the_upgraded_records(name: str, tmp_path: Path) -> None:
    attempts = read_ledger(DATA / name / "attempts.jsonl")
    assert len(attempts) == 15
    records = cells_of(attempts)
    details, why_not = last_run(DATA / name)
    assert why_not is None and details is not None and details.executor == "local"
    paths = write_views(tmp_path, records, cohort="example", meta=details.model_dump(exclude_none=True))
    assert paths["html"].stat().st_size > 0


def test_a_record_of_a_newer_schema_is_one_line_saying_so(tmp_path: Path) -> None:
    line = json.loads((DATA / "out-5751625" / "attempts.jsonl").read_text().splitlines()[0])
    line["schema"] = f"pytest-maka/result/{SCHEMA_VERSION + 1}"
    (tmp_path / "attempts.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(LedgerError) as caught:
        read_ledger(tmp_path / "attempts.jsonl")
    assert str(caught.value) == (
        f"{tmp_path / 'attempts.jsonl'}: line 1: schema: pytest-maka/result/{SCHEMA_VERSION + 1} was written by a "
        f"newer pytest-maka; this one reads up to {SCHEMA}: upgrade it"
    )
    proc = _maka("report", str(tmp_path))
    assert proc.returncode == 2 and "written by a newer pytest-maka" in proc.stderr


@pytest.mark.parametrize(
    ("network", "phases"),
    [
        ("none", {"agent": {"mode": "none"}, "verifier": {"mode": "none"}}),
        ({"agent": "host", "verifier": "none"}, {"agent": {"mode": "host"}, "verifier": {"mode": "none"}}),
        ({"agent": "none", "phases": {"agent": "none"}}, {"agent": {"mode": "none"}}),
    ],
)
def test_each_earlier_shape_of_isolation_network_reads_with_phases(
    network: object, phases: dict[str, object], tmp_path: Path
) -> None:
    line = json.loads((DATA / "out-88997ad" / "attempts.jsonl").read_text().splitlines()[0])
    line["isolation"]["network"] = network
    (tmp_path / "attempts.jsonl").write_text(json.dumps(line) + "\n")
    (record,) = read_ledger(tmp_path / "attempts.jsonl")
    assert record.isolation is not None and record.isolation.network is not None
    assert record.isolation.to_json()["network"]["phases"] == phases


@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["out-88997ad", "out-5751625"])
def test_a_run_into_an_earlier_versions_output_resumes_from_it(name: str, pytester: pytest.Pytester) -> None:
    """The example cohort's cells have the same keys today: their results are taken over, in today's shape."""
    repo = Path(__file__).parents[2]
    for part in ("tasks", "subjects"):
        shutil.copytree(repo / part, pytester.path / part)
    shutil.copy(repo / "cohort.yaml", pytester.path / "cohort.yaml")
    out = pytester.path / "out"
    shutil.copytree(DATA / name, out)
    before = (out / "attempts.jsonl").read_bytes()
    result = pytester.runpytest_subprocess("--maka-spec=cohort.yaml", f"--maka-out={out}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=8)
    assert result.ret == 0
    assert "maka: resuming: 15 of 15 cells already have results in " in result.stdout.str()
    assert (out / "attempts.jsonl").read_bytes() == before, "nothing ran again and nothing was rewritten"
    for record in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        assert record["resumed"] is True and record["schema"] == SCHEMA
        assert isinstance(record["isolation"]["network"]["phases"]["agent"], dict)

"""The typed record (core/record_model.py): every line ever written reads back and writes identically;
a field of the wrong type is one line naming it, at write time and at read time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.core.record_model import AttemptRecord, RecordError, as_records
from pytest_maka.core.records import attempt_record, cell_record, cells_of, read_record
from pytest_maka.core.taint import ReadOnlySystem, TaintRecord
from pytest_maka.core.taxonomy import Status
from pytest_maka.store.ledger import ATTEMPTS_FILE, Ledger, record_line, write_results
from pytest_maka.store.reading import read_ledger

from ..report.builders import make_cell

DATA = Path(__file__).parent / "data"
#: Ledgers and results written by this and earlier versions (see data/README.md).
WRITTEN = sorted([*DATA.glob("out-*/*.jsonl"), *DATA.glob("records-*/*.jsonl")])


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _maka(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("maka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_the_written_samples_include_one_of_this_version() -> None:
    assert DATA / "records-b33469a" / "attempts.jsonl" in WRITTEN
    assert len(WRITTEN) == 8


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_line_written_reads_typed_and_writes_back_byte_for_byte(path: Path) -> None:
    for line in _lines(path):
        record = AttemptRecord.model_validate(json.loads(line))
        assert record_line(record) == line
        assert record_line(json.loads(line)) == line


def test_a_real_line_appended_to_the_ledger_is_the_same_line(tmp_path: Path) -> None:
    lines = _lines(DATA / "records-b33469a" / "attempts.jsonl")
    ledger = Ledger(tmp_path)
    for line in lines[:3]:
        written = ledger.append(json.loads(line))
        assert written.to_json() == json.loads(line)
    ledger.append(AttemptRecord.model_validate_json(lines[3]))
    assert _lines(tmp_path / ATTEMPTS_FILE) == lines[:4]


def test_results_rebuilt_by_maka_report_are_the_results_the_run_wrote(tmp_path: Path) -> None:
    source = DATA / "records-b33469a"
    (tmp_path / ATTEMPTS_FILE).write_bytes((source / ATTEMPTS_FILE).read_bytes())
    proc = _maka("report", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "results.jsonl").read_bytes() == (source / "results.jsonl").read_bytes()


def _full_record() -> dict[str, object]:
    """A record with every optional part: steps, taint, read-only system, usage extras, hook keys."""
    step = {
        "index": 1,
        "name": "build",
        "run": True,
        "status": "agent_success",
        "verdict": "passed",
        "score": 1,
        "rewards": {"reward": 1},
        "min_reward": None,
        "duration_s": 1.25,
        "timings": {"agent": 1.0},
        "subject": {"exit_code": 0, "timed_out": False, "timeout_sec": 60, "duration_s": 1.0, "usage": {}},
        "verifier": {"exit_code": 0, "timed_out": False, "duration_s": 0.25, "error": None, "environment": "shared"},
        "network": {"agent": {"mode": "none", "declared": None}},
        "error": None,
        "artifacts": {"dir": "cells/x/attempt-1/steps/1"},
    }
    not_run = {"index": 2, "name": "ship", "run": False, "status": None, "not_run": "step 1 scored below 1"}
    record = attempt_record(
        make_cell("t", "s"),
        cohort="c",
        attempt=1,
        status=Status.AGENT_SUCCESS,
        started=1_700_000_000.0,
        finished=1_700_000_012.5,
        score=1,
        usage={"input_tokens": 10, "cache_read_tokens": 3},
        agent={"exit_code": 0, "cost": {"source": "pricing table", "guess": True}, "telemetry": {"first_write_s": 2}},
        verifier={"kind": "reward", "reward": 1, "rewards": {"reward": 1, "style": 0.5}},
        subject_claim={"done": True, "notes": ["x", 1, None]},
        isolation={"executor": "local", "network": {"agent": "none", "phases": {"agent": {"mode": "none"}}}},
        budget={"max_tokens": 1000, "exceeded": "max_tokens"},
        artifacts={"dir": "cells/x/attempt-1", "agent_log": "cells/x/attempt-1/agent.stdout.txt"},
        timings={"agent": 1.0, "verify": 2},
        error=None,
        steps=[step, not_run],
        taint=TaintRecord(mechanism="inotify", checked=True, changed_count=1, changed=("/usr/x",), tainted=False),
        read_only_system=ReadOnlySystem(evidence="Read-only file system", seen_in="agent.stdout.txt", note="n"),
    )
    record = record.annotated({"network": {"agent": {"declared": "public", "granted": "none"}}}, "a-plugin")
    return record.to_json()


def test_every_optional_part_round_trips_absent_null_and_int_as_they_were() -> None:
    record = json.loads(json.dumps(_full_record()))
    line = record_line(record)
    assert line == json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    typed = AttemptRecord.model_validate(record)
    assert typed.score == 1 and isinstance(typed.score, int)
    assert typed.steps is not None and typed.steps[1].run is False and typed.steps[1].not_run
    assert typed.budget is not None and typed.budget.exceeded == "max_tokens"
    assert typed.taint is not None and typed.taint.checked and not typed.is_tainted
    assert typed.network_phases()["agent"].mode == "none"
    assert typed.extra("network") == {"agent": {"declared": "public", "granted": "none"}}
    assert typed.usage is not None and typed.usage.extra("cache_read_tokens") == 3
    assert "resumed" not in typed.to_json() and typed.to_json()["error"] is None


def test_a_cell_with_two_runs_is_typed_with_its_runs_and_attempts() -> None:
    cell = make_cell("t", "s")

    def attempt(n: int, status: Status, run: int) -> AttemptRecord:
        return attempt_record(cell, cohort="c", attempt=n, status=status, started=n, finished=n + 1.0, run=run)

    attempts = [attempt(1, Status.AGENT_FAILURE, 1), attempt(2, Status.AGENT_SUCCESS, 2)]
    typed = cells_of([read_record(a.to_json()) for a in attempts])
    assert len(typed) == 1
    (cell_line,) = typed
    assert cell_line.to_json() == cell_record(attempts).to_json()
    assert [(r.run, r.passed) for r in cell_line.runs or ()] == [(1, False), (2, True)]
    assert [(a.attempt, a.status, a.run) for a in cell_line.attempts or ()] == [
        (1, "agent_failure", 1),
        (2, "agent_success", 2),
    ]


def test_the_ledger_refuses_a_mistyped_field_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    record = _full_record()
    record["agent"] = {"exit_code": "0"}  # a string where the schema has an int
    with pytest.raises(RecordError) as caught:
        Ledger(tmp_path).append(record)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"not written: record of cell {record['cell_key']!r}: agent.exit_code: ")
    assert not (tmp_path / ATTEMPTS_FILE).exists()
    with pytest.raises(RecordError, match=r"agent\.exit_code: "):
        write_results(tmp_path, [record])
    assert not (tmp_path / "results.jsonl").exists()


def test_a_view_handed_a_mistyped_dict_names_the_key() -> None:
    record = _full_record()
    record["usage"] = {"cost_usd": "cheap"}
    with pytest.raises(RecordError, match=r"usage\.cost_usd: .*'cheap'"):
        as_records([record])


def test_maka_report_names_the_line_and_the_nested_key_of_a_mistyped_field(tmp_path: Path) -> None:
    lines = _lines(DATA / "records-b33469a" / "attempts.jsonl")
    bad = json.loads(lines[1])
    bad["verifier"]["reward"] = "1.0"
    (tmp_path / ATTEMPTS_FILE).write_text(lines[0] + json.dumps(bad) + "\n")
    proc = _maka("report", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"maka: error: {tmp_path / ATTEMPTS_FILE}: line 2: verifier.reward"), line


def test_read_ledger_gives_typed_records(tmp_path: Path) -> None:
    attempts = read_ledger(DATA / "records-b33469a" / ATTEMPTS_FILE)
    assert all(isinstance(a, AttemptRecord) for a in attempts)
    oracle = [a for a in attempts if a.subject == "oracle"]
    assert oracle and all(a.status is Status.AGENT_SUCCESS and a.passed for a in oracle)
    assert all(a.artifacts is not None and a.artifacts.get("verifier_output") for a in attempts)


def _plain_types(value: object) -> set[type]:
    if isinstance(value, dict):
        return {dict}.union(*(_plain_types(v) for v in value.values()))
    if isinstance(value, list):
        return {list}.union(*(_plain_types(v) for v in value))
    return {type(value)}


def test_to_json_holds_only_plain_json_types() -> None:
    """What the ledger returns travels to the xdist controller (execnet serialises only plain types)."""
    for line in _lines(DATA / "records-b33469a" / "results.jsonl"):
        written = AttemptRecord.model_validate_json(line).to_json()
        assert _plain_types(written) <= {dict, list, str, int, float, bool, type(None)}
        assert type(written["status"]) is str


def test_a_plugin_adds_new_top_level_keys_and_may_not_replace_one() -> None:
    record = AttemptRecord.model_validate(_full_record())
    added = record.annotated({"team": "evals", "ticket": 7}, "conftest.py")
    assert list(added.to_json())[-2:] == ["team", "ticket"] and added.extra("ticket") == 7
    assert record.extra("team") is None, "the record itself is not changed"
    for key in ("status", "network"):  # a built-in key, and a key another plugin already added
        with pytest.raises(RecordError, match=f"^plugin 'conftest.py' returned key '{key}', "):
            record.annotated({key: "x"}, "conftest.py")
    with pytest.raises(RecordError, match="returned list, not a mapping"):
        record.annotated(["team"], "conftest.py")  # type: ignore[arg-type]


def test_updated_keeps_a_keys_place_and_checks_its_type() -> None:
    record = AttemptRecord.model_validate(_full_record())
    rerun = record.updated(run=3, resumed=True)
    assert list(rerun.to_json()) == [*record.to_json(), "resumed"] and rerun.run == 3
    with pytest.raises(RecordError, match=r"attempt: "):
        record.updated(attempt="two")


def test_the_ledger_reads_typed_and_names_a_line_that_does_not_fit(tmp_path: Path) -> None:
    lines = _lines(DATA / "records-b33469a" / ATTEMPTS_FILE)
    bad = json.loads(lines[1])
    bad["verifier"]["reward"] = "1.0"
    (tmp_path / ATTEMPTS_FILE).write_text(lines[0] + json.dumps(bad) + "\n" + lines[2])
    ledger = Ledger(tmp_path)
    records = ledger.read()
    assert [r.to_json() for r in records] == [json.loads(lines[0]), json.loads(lines[2])]
    (problem,) = ledger.read_problems
    where = f"{tmp_path / ATTEMPTS_FILE} record 2: record of cell {bad['cell_key']!r}"
    assert problem.startswith(f"{where}: verifier.reward")
    assert problem.endswith("; skipped")

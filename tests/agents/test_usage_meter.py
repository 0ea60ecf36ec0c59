"""Usage metered from agents' streams, the run's shared spend, cost provenance, and the whole run's cost cap."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_maka.core.records import attempt_record
from pytest_maka.core.taxonomy import Status
from pytest_maka.core.usage import provenance, with_cost
from pytest_maka.run.spend import CohortSpend
from pytest_maka.subjects.presets import aider, claude_code, codex, opencode, pi
from pytest_maka.subjects.presets.meter import UsageMeter
from pytest_maka.subjects.presets.prices import shipped
from tests.conftest import Cohort
from tests.report.builders import make_cell


def claude_line(message_id: str, inp: int, out: int, block: str = "text") -> str:
    content = [{"type": block, "text": "x"}] if block == "text" else [{"type": "tool_use", "id": "t", "name": "Bash"}]
    message = {"id": message_id, "content": content, "usage": {"input_tokens": inp, "output_tokens": out}}
    return json.dumps({"type": "assistant", "message": message})


def test_claude_code_counts_each_message_once_though_it_repeats_its_usage_per_block() -> None:
    meter = UsageMeter(claude_code.stream_usage, model="claude-sonnet-4-5", table=shipped())
    for line in (
        claude_line("msg_1", 100, 1),
        claude_line("msg_1", 100, 7, block="tool"),  # the same message, its second block: a later figure
        json.dumps({"type": "user", "message": {"content": [{"type": "tool_result"}]}}),
        claude_line("msg_2", 300, 5),
        "not json at all",
        '{"type": "assistant", "usage": ',  # a torn line never fails the meter
    ):
        meter.feed(line)
    assert meter.total() == {"input_tokens": 400, "output_tokens": 12}
    assert meter.reports == 3


@pytest.mark.parametrize(
    ("reader", "line", "expected"),
    [
        (
            codex.stream_usage,
            {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 4, "output_tokens": 2}},
            {"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 4},
        ),
        (
            opencode.stream_usage,
            {"type": "step_finish", "part": {"tokens": {"input": 9, "output": 3, "cache": {"read": 1}}, "cost": 0.5}},
            {"input_tokens": 9, "output_tokens": 3, "cache_read_tokens": 1, "cost_usd": 0.5},
        ),
        (
            pi.stream_usage,
            {
                "type": "message_end",
                "message": {"role": "assistant", "usage": {"input": 8, "output": 2, "cost": {"total": 0.25}}},
            },
            {"input_tokens": 8, "output_tokens": 2, "cost_usd": 0.25},
        ),
    ],
)
def test_each_streaming_preset_sums_its_events(reader, line, expected) -> None:  # type: ignore[no-untyped-def]
    meter = UsageMeter(reader, model=None, table=shipped())
    meter.feed(json.dumps(line))
    meter.feed(json.dumps(line))
    assert meter.total() == {k: v * 2 for k, v in expected.items()}


def test_aider_lines_are_metered_as_they_come() -> None:
    meter = UsageMeter(aider.stream_usage, model="gpt-4o", table=shipped())
    meter.feed("Tokens: 2.4k sent, 26 received. Cost: $0.0062 message, $0.0062 session.")
    meter.feed("Applied edit to hello.txt")
    meter.feed("Tokens: 812 sent, 1.1k received.")
    assert meter.total() == {"input_tokens": 3212, "output_tokens": 1126, "cost_usd": 0.0062}


def test_the_meter_names_the_budget_the_stream_crossed_first() -> None:
    meter = UsageMeter(claude_code.stream_usage, model="claude-sonnet-4-5", table=shipped(), max_tokens=1000)
    assert meter.enforcing
    assert meter.feed(claude_line("a", 600, 0)) is None
    assert meter.feed(claude_line("b", 600, 0)) == "max_tokens"
    assert meter.feed(claude_line("c", 600, 0)) is None  # said once
    assert meter.exceeded == "max_tokens"
    # cost from the price table when the stream carries none: $3 per million input tokens
    priced = UsageMeter(claude_code.stream_usage, model="claude-sonnet-4-5", table=shipped(), max_cost_usd=0.002)
    assert priced.feed(claude_line("a", 600, 0)) is None  # $0.0018
    assert priced.feed(claude_line("b", 600, 0)) == "max_cost_usd"  # $0.0036
    # a model the table does not know: the cost budget cannot be metered (never a false stop)
    unknown = UsageMeter(claude_code.stream_usage, model="mystery-1", table=shipped(), max_cost_usd=0.0)
    assert unknown.feed(claude_line("a", 10**6, 0)) is None


def test_the_run_cap_stops_an_agent_whose_spend_plus_the_rest_of_the_run_crosses_it() -> None:
    left = [0.003]
    meter = UsageMeter(
        claude_code.stream_usage, model="claude-sonnet-4-5", table=shipped(), cohort_cost_left=lambda: left[0]
    )
    assert meter.enforcing
    assert meter.feed(claude_line("a", 600, 0)) is None  # $0.0018 of $0.003 left
    assert meter.feed(claude_line("b", 600, 0)) == "cohort_max_cost_usd"
    spent_elsewhere = UsageMeter(
        claude_code.stream_usage, model="claude-sonnet-4-5", table=shipped(), cohort_cost_left=lambda: 0.0
    )
    assert spent_elsewhere.recheck() == "cohort_max_cost_usd"  # no output needed: the others spent the cap


def test_without_a_reader_or_a_budget_the_meter_does_not_enforce() -> None:
    assert not UsageMeter(None, model=None, table=shipped(), max_tokens=5).enforcing
    assert not UsageMeter(claude_code.stream_usage, model=None, table=shipped()).enforcing


def _line(started: float, cost: float | None) -> str:
    """One attempts-ledger line, as the ledger writes it."""
    record = attempt_record(make_cell("t", "s"), cohort="c", attempt=1, status=Status.AGENT_SUCCESS,
                            started=started, finished=started + 1, usage={"cost_usd": cost})  # fmt: skip
    return json.dumps(record.to_json())


def test_the_run_spend_counts_this_runs_attempts_as_other_processes_append_them(tmp_path: Path) -> None:
    ledger = tmp_path / "attempts.jsonl"
    now = time.time()
    ledger.write_text(_line(now - 3600, 100.0) + "\n")  # a resumed directory's older run: not this run's spend
    spend = CohortSpend(ledger, since=now)
    assert spend() == 0.0
    writer = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + chr(10) + sys.argv[3])"
    torn = _line(now + 2, 7.0)[:20]  # a line another process is still writing
    subprocess.run([sys.executable, "-c", writer, str(ledger), _line(now + 1, 0.25), torn], check=True)
    assert spend() == 0.25
    with ledger.open("a") as fh:
        fh.write(_line(now + 2, 7.0)[20:] + "\n" + _line(now + 3, None) + "\n")
    assert spend() == 7.25
    ledger.write_text(_line(now + 4, 1.5) + "\n")  # the file cut shorter (a torn tail moved aside): read anew
    assert spend() == 1.5


def test_cost_provenance_marks_an_agents_price_for_a_model_the_table_does_not_know() -> None:
    table = shipped()
    usage, legacy = with_cost({"input_tokens": 10, "output_tokens": 1, "cost_usd": 0.4}, "house-model-7", table)
    guess = provenance(usage, "house-model-7", table, legacy)
    assert (guess.source, guess.guess) == ("agent", True) and "house-model-7" in (guess.note or "")
    known = provenance(usage, "claude-sonnet-4-5", table, legacy)
    assert (known.source, known.guess) == ("agent", False)
    priced, legacy = with_cost({"input_tokens": 10**6, "output_tokens": 0}, "claude-sonnet-4-5", table)
    assert priced["cost_usd"] == 3.0
    assert provenance(priced, "claude-sonnet-4-5", table, legacy).as_record() == {
        "source": "price_table",
        "guess": False,
        "table_date": table["date"],
    }
    none, legacy = with_cost({"input_tokens": 5, "output_tokens": 5}, "house-model-7", table)
    assert provenance(none, "house-model-7", table, legacy).source == "unknown"


SPENDER = 'printf \'{"input_tokens": 10, "output_tokens": 1, "cost_usd": 1.0}\' > $MAKA_LOGS_DIR/usage.json; ' + (
    "echo ok > /app/done.txt"
)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_cells_that_would_start_after_the_run_spent_its_cap_are_budget_exhausted(
    cohort: Cohort, workers: list[str]
) -> None:
    for name in ("a", "b", "c", "d"):
        cohort.task(name)
    cohort.write(
        subjects=[{"name": "s", "kind": "command", "command": SPENDER}],
        policy={"allow_unsandboxed": True},
        budgets={"cohort_max_cost_usd": 0.5},
    )
    result = cohort.run_subprocess(*workers) if workers else cohort.run()
    statuses = cohort.status()
    ran = [c for c, s in statuses.items() if s == "agent_success"]
    stopped = [c for c, s in statuses.items() if s == "budget_exhausted"]
    # serial: the first cell spends $1 of $0.5; under -n 2 a worker's first cell may start before any spend
    # is written, but never a cell after its own worker's (the ledger is the run's shared account)
    assert 1 <= len(ran) <= (1 if not workers else 2), (statuses, result.outlines[-15:])
    assert len(stopped) == 4 - len(ran)
    for cell in stopped:
        record = cohort.results()[cell]
        assert record["budget"]["exceeded"] == "cohort_max_cost_usd"
        assert record["agent"]["not_started"].startswith("the run spent")
        assert record["usage"]["cost_usd"] is None


def test_a_pass_over_its_token_budget_keeps_the_trace_in_the_record_and_the_report(cohort: Cohort) -> None:
    cohort.task("t")
    spend = SPENDER.replace("10,", "1000,")
    cohort.write(
        subjects=[{"name": "s", "kind": "command", "command": spend}],
        policy={"allow_unsandboxed": True},
        budgets={"max_tokens": 100},
    )
    cohort.run()
    record = cohort.results()["t[s-r0]"]
    assert record["status"] == "agent_success"  # the verifier's pass stands (DESIGN §4)
    assert record["budget"]["exceeded"] == "max_tokens" and record["budget"]["max_tokens"] == 100
    assert record["usage"]["input_tokens"] == 1000
    assert "passed over budget: max_tokens" in (cohort.out / "report.html").read_text()


def test_aider_usage_is_exact_from_its_event_log_and_rounded_only_without_it() -> None:
    stdout = "Tokens: 2.4k sent, 26 received. Cost: $0.0062 message, $0.0062 session.\nApplied edit to a.txt\n"
    events = "\n".join(
        json.dumps({"event": name, "properties": props})
        for name, props in (
            ("launched", {}),
            ("message_send", {"prompt_tokens": 2389, "completion_tokens": 26, "cost": 0.0062}),
            ("message_send", {"prompt_tokens": 120, "completion_tokens": 4, "cost": 0}),  # 0: not priced
        )
    ).encode()
    exact = aider.PRESET.parse(stdout, lambda path: events if path == aider.EVENTS_FILE else None)
    assert exact.usage.as_dict() == {"input_tokens": 2509, "output_tokens": 30, "cost_usd": 0.0062}
    rounded = aider.PRESET.parse(stdout, lambda path: None)
    assert rounded.usage.as_dict() == {"input_tokens": 2400, "output_tokens": 26, "cost_usd": 0.0062}


def test_each_step_of_opencode_adds_up() -> None:
    from pytest_maka.subjects.presets import opencode

    step = {"type": "step_finish", "part": {"tokens": {"input": 10, "output": 2, "cache": {"read": 1}}, "cost": 0.5}}
    stdout = "\n".join(json.dumps({**step, "part": {**step["part"], "reason": r}}) for r in ("tool-calls", "stop"))
    parsed = opencode.PRESET.parse(stdout, lambda p: None)
    assert parsed.usage.as_dict() == {"input_tokens": 20, "output_tokens": 4, "cache_read_tokens": 2, "cost_usd": 1.0}
    assert parsed.stop_reason == "end_turn" and parsed.error is None

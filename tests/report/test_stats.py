"""core.stats against hand-checked numbers."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from pytest_maka.core.records import attempt_record, cell_record
from pytest_maka.core.stats import (
    HealthFlag,
    Rate,
    summarize,
    summarize_subject,
    task_health,
    wilson_interval,
)
from pytest_maka.core.taxonomy import Status

from .builders import make_cell as _cell

S = Status


def rec(task: str, subject: str, status: Status, *, kind: str = "command", rep: int = 1, **kw: Any) -> dict[str, Any]:
    """A cell record as the lifecycle would produce it (one attempt)."""
    duration = kw.pop("duration", 10.0)
    attempt = attempt_record(
        _cell(task, subject, kind, rep),
        cohort="c",
        attempt=1,
        status=status,
        started=1_700_000_000.0,
        finished=1_700_000_000.0 + duration,
        **kw,
    )
    return cell_record([attempt]).to_json()  # as results.jsonl holds it


# --- Wilson --------------------------------------------------------------------------

# References: 0/10, 7/10, 10/10 and 3/4 computed by hand from the score formula; the rest are
# the published Wilson ("method 3") values of Newcombe (1998), Stat Med 17:857, Table II.
WILSON_CASES = [
    (0, 10, 0.0, 0.2775),
    (7, 10, 0.3968, 0.8922),
    (10, 10, 0.7225, 1.0),
    (3, 4, 0.3006, 0.9544),
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0),
]


@pytest.mark.parametrize(("x", "n", "low", "high"), WILSON_CASES)
def test_wilson_known_values(x: int, n: int, low: float, high: float) -> None:
    got = wilson_interval(x, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_empty_denominator_is_whole_range() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_bounds_exact_at_extremes() -> None:
    assert wilson_interval(0, 7)[0] == 0.0
    assert wilson_interval(7, 7)[1] == 1.0


@pytest.mark.parametrize(("x", "n"), [(-1, 3), (4, 3), (0, -1)])
def test_wilson_rejects_impossible_counts(x: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(x, n)


def test_rate_text() -> None:
    r = Rate.of(3, 4)
    assert r.text == "3/4 = 75.0%"
    # 3 successes and 1 failure: both sides are next to a bound, so both are the exact (Clopper-Pearson)
    # bounds (issue 26: Wilson's pointwise coverage dips to 84% there); Wilson's own is [30.1%, 95.4%]
    assert r.interval_text == "[19.4%, 99.4%]"
    assert wilson_interval(3, 4) == pytest.approx((0.3006, 0.9544), abs=1e-4)
    assert r.value == 0.75
    empty = Rate.of(0, 0)
    assert empty.text == "0/0 = n/a"
    assert empty.interval_text == "n/a"
    assert empty.value is None


# --- per-subject summary --------------------------------------------------------------


def test_subject_summary_official_and_strict() -> None:
    rows = [
        rec("t1", "a", S.AGENT_SUCCESS, usage={"cost_usd": 0.10, "input_tokens": 100, "output_tokens": 10}),
        rec("t2", "a", S.AGENT_SUCCESS, usage={"cost_usd": 0.25, "input_tokens": 200}, duration=20.0),
        rec("t3", "a", S.AGENT_FAILURE, duration=30.0),
        rec("t4", "a", S.AGENT_INCOMPLETE, duration=40.0),
        rec("t5", "a", S.INFRA_FAILURE, duration=0.0),
        rec("t6", "a", S.VERIFIER_FAILURE, duration=20.0),
    ]
    s = summarize_subject("a", rows)
    assert s.cells == 6
    assert (s.official.passes, s.official.total) == (2, 4)
    assert (s.strict.passes, s.strict.total) == (2, 6)
    assert s.official.text == "2/4 = 50.0%"
    assert s.strict.text == "2/6 = 33.3%"
    assert s.non_official == 2
    assert s.counts[S.AGENT_SUCCESS] == 2
    assert s.counts[S.INFRA_FAILURE] == 1
    assert s.counts[S.POLICY_DENIED] == 0
    assert list(s.counts) == list(Status)
    assert s.cost_usd == pytest.approx(0.35)
    assert s.cost_known == 2
    assert (s.input_tokens, s.output_tokens, s.tokens) == (300, 10, 310)
    assert s.mean_duration_s == pytest.approx(120.0 / 6)
    assert s.kind == "command"


def test_subject_summary_unknown_usage_is_none() -> None:
    s = summarize_subject("a", [rec("t1", "a", S.AGENT_FAILURE), rec("t2", "a", S.AGENT_SUCCESS)])
    assert s.cost_usd is None and s.cost_known == 0
    assert s.input_tokens is None and s.output_tokens is None and s.tokens is None


def test_all_harness_side_gives_empty_official_denominator() -> None:
    s = summarize_subject("a", [rec("t1", "a", S.INFRA_FAILURE), rec("t2", "a", S.POLICY_DENIED)])
    assert s.official.total == 0 and s.official.text == "0/0 = n/a"
    assert s.strict.text == "0/2 = 0.0%"


def test_unknown_status_is_an_error_not_a_guess() -> None:
    bad = rec("t1", "a", S.AGENT_SUCCESS)
    bad["status"] = "kinda_passed"
    with pytest.raises(ValueError, match="kinda_passed"):
        summarize([bad])


def test_summarize_grid_orders_repetitions() -> None:
    rows = [
        rec("t1", "b", S.AGENT_FAILURE, rep=2),
        rec("t1", "b", S.AGENT_SUCCESS, rep=1),
        rec("t0", "a", S.INFRA_FAILURE),
    ]
    summary = summarize(rows)
    assert summary.tasks == ("t0", "t1")
    assert summary.subject_names() == ["a", "b"]
    assert [r.repetition for r in summary.grid["t1"]["b"]] == [1, 2]
    assert summary.counts[S.AGENT_SUCCESS] == 1 and summary.cells == 3


# --- task health ----------------------------------------------------------------------


def test_nop_pass_and_oracle_failure_flag_the_task() -> None:
    rows = [
        rec("easy", "nop", S.AGENT_SUCCESS, kind="nop"),
        rec("easy", "oracle", S.AGENT_SUCCESS, kind="oracle"),
        rec("hard", "nop", S.AGENT_FAILURE, kind="nop"),
        rec("hard", "oracle", S.AGENT_FAILURE, kind="oracle"),
        rec("ok", "nop", S.AGENT_FAILURE, kind="nop"),
        rec("ok", "oracle", S.AGENT_SUCCESS, kind="oracle"),
        # a verifier failure of the oracle is not an official non-pass: no flag
        rec("flaky", "oracle", S.VERIFIER_FAILURE, kind="oracle"),
    ]
    health = task_health(rows)
    assert set(health) == {"easy", "hard"}
    assert health["easy"].flags == (HealthFlag.NOP_PASSES,)
    assert health["hard"].flags == (HealthFlag.ORACLE_FAILS,)
    assert HealthFlag.NOP_PASSES.value == "broken: passes with nop"
    assert HealthFlag.ORACLE_FAILS.value == "broken: oracle fails"
    assert "easy[nop-r1]" in health["easy"].reasons[HealthFlag.NOP_PASSES]


def test_uninformative_needs_two_subjects_agreeing_on_official_rows() -> None:
    rows = [
        # every subject passes
        rec("same-pass", "a", S.AGENT_SUCCESS),
        rec("same-pass", "b", S.AGENT_SUCCESS),
        rec("same-pass", "b", S.INFRA_FAILURE, rep=2),  # not official: ignored
        # every subject fails (incomplete counts as an official fail)
        rec("same-fail", "a", S.AGENT_FAILURE),
        rec("same-fail", "b", S.AGENT_INCOMPLETE),
        # subjects disagree
        rec("mixed", "a", S.AGENT_SUCCESS),
        rec("mixed", "b", S.AGENT_FAILURE),
        # one repetition passes, one fails: informative
        rec("reps", "a", S.AGENT_SUCCESS, rep=1),
        rec("reps", "a", S.AGENT_FAILURE, rep=2),
        rec("reps", "b", S.AGENT_SUCCESS),
        # only one subject has official rows
        rec("lonely", "a", S.AGENT_SUCCESS),
        rec("lonely", "b", S.INFRA_FAILURE),
        # reference subjects do not count towards "every subject"
        rec("refs", "a", S.AGENT_SUCCESS),
        rec("refs", "oracle", S.AGENT_SUCCESS, kind="oracle"),
        rec("refs", "nop", S.AGENT_FAILURE, kind="nop"),
    ]
    health = task_health(rows)
    assert set(health) == {"same-pass", "same-fail"}
    assert health["same-pass"].flags == (HealthFlag.UNINFORMATIVE,)
    assert "passed" in health["same-pass"].reasons[HealthFlag.UNINFORMATIVE]
    assert "failed" in health["same-fail"].reasons[HealthFlag.UNINFORMATIVE]


def test_reference_subjects_do_not_hide_an_uninformative_task() -> None:
    rows = [
        rec("t", "a", S.AGENT_SUCCESS),
        rec("t", "b", S.AGENT_SUCCESS),
        rec("t", "nop", S.AGENT_FAILURE, kind="nop"),
        rec("t", "oracle", S.AGENT_SUCCESS, kind="oracle"),
    ]
    assert task_health(rows)["t"].flags == (HealthFlag.UNINFORMATIVE,)


def test_core_stats_stays_pure() -> None:
    code = (
        "import sys, pytest_maka.core.stats\n"
        "bad = {'pytest', 'jinja2', 'docker', '_pytest'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""Issue 26: the strict view (what the subject caused) beside the official one, and partial credit."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.core.stats import (
    RANKING,
    compare_scores,
    summarize,
)
from pytest_maka.core.taxonomy import Status
from pytest_maka.report import write_views
from pytest_maka.report.compare import compare_lines, compare_runs
from pytest_maka.report.terminal import summary_lines

from .test_stats import rec

scipy_stats = pytest.importorskip("scipy.stats")

S = Status


# --- what the subject caused: the strict view ----------------------------------------------------------


def _budget_cohort() -> list[dict[str, Any]]:
    # identical skill; A runs out of budget on half the tasks it would fail, B fails them
    rows: list[dict[str, Any]] = []
    for i in range(30):
        fails = i % 2 == 0
        a_status = (S.BUDGET_EXHAUSTED if i % 4 == 0 else S.AGENT_FAILURE) if fails else S.AGENT_SUCCESS
        rows.append(rec(f"t{i}", "A", a_status))
        rows.append(rec(f"t{i}", "B", S.AGENT_FAILURE if fails else S.AGENT_SUCCESS))
    return rows


def test_the_strict_view_counts_budget_exhaustion_the_subject_caused(tmp_path: Path) -> None:
    rows = _budget_cohort()
    s = summarize(rows)
    official, strict = s.comparison("A", "B"), s.comparison("A", "B", view="strict")
    assert official is not None and strict is not None
    assert official.tasks == 22 and official.diff == 0.0  # budget rows left out: A's failures vanish
    a = next(x for x in s.subjects if x.subject == "A")
    assert a.official.text == "15/22 = 68.2%" and a.strict.text == "15/30 = 50.0%"
    assert strict.tasks == 30 and strict.diff == 0.0 and strict.ties == 30
    assert s.ranking == RANKING == "official"
    paths = write_views(tmp_path, rows, cohort="budget")
    for text in (paths["markdown"].read_text(encoding="utf-8"), paths["html"].read_text(encoding="utf-8")):
        assert "ranked on official rows" in text and "strict A" in text
    assert any("ranked on official rows" in line for line in summary_lines(s))


def test_the_views_say_when_official_and_strict_disagree() -> None:
    rows: list[dict[str, Any]] = []
    for i in range(20):  # A passes 12, runs out of budget on 8; B passes 10, fails 10
        rows.append(rec(f"t{i}", "A", S.AGENT_SUCCESS if i < 12 else S.BUDGET_EXHAUSTED))
        rows.append(rec(f"t{i}", "B", S.AGENT_SUCCESS if i % 2 else S.AGENT_FAILURE))
    s = summarize(rows)
    official, strict = s.comparison("A", "B"), s.comparison("A", "B", view="strict")
    assert official is not None and strict is not None
    assert official.verdict == "better" and strict.verdict == "even"
    assert any("official and strict disagree on A vs B" in line for line in summary_lines(s))


def test_compare_runs_shows_the_strict_change() -> None:
    before = _budget_cohort()
    after = [dict(r, status=S.AGENT_FAILURE.value) if r["status"] == S.BUDGET_EXHAUSTED.value else r for r in before]
    result = compare_runs(before, after, labels=("before", "after"))
    a = next(x for x in result.subjects if x.subject == "A")
    assert a.strict is not None and a.strict.diff == 0.0 and a.strict.tasks == 30 and a.paired.tasks == 22
    text = "\n".join(compare_lines(result))
    assert "strict change" in text and "ranked on official rows" in text and "power (two-sided 0.05, 80%)" in text


# --- partial credit -----------------------------------------------------------------------------------


def test_a_subject_scoring_nine_tenths_everywhere_shows_its_mean_score(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(15):
        for r in (1, 2):
            rows.append(rec(f"t{i}", "close", S.AGENT_FAILURE, rep=r, score=0.9))
            rows.append(rec(f"t{i}", "far", S.AGENT_FAILURE, rep=r, score=0.3 if i % 3 else 0.5))
    s = summarize(rows)
    close = next(x for x in s.subjects if x.subject == "close")
    assert close.official.text == "0/30 = 0.0%"
    assert close.score is not None and close.score.mean == pytest.approx(0.9)
    assert close.score.low < 0.9 < close.score.high  # no spread: Wilson over the 15 tasks, never zero width
    c = s.comparison("close", "far", view="score")
    assert c is not None and c.diff == pytest.approx(0.9 - (10 * 0.3 + 5 * 0.5) / 15)
    assert c.p_value == pytest.approx(2 / 2**15) and c.low > 0 and c.verdict == "better"
    paths = write_views(tmp_path, rows, cohort="partial")
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "mean score [95% CI]" in md and close.score.text in md and "Paired score differences" in md
    assert "Paired score differences" in paths["html"].read_text(encoding="utf-8")


def test_without_partial_credit_no_score_view_is_shown() -> None:
    s = summarize(_budget_cohort())
    assert not s.partial_credit and s.score_comparisons == () and all(x.score is None for x in s.subjects)


def test_compare_scores_matches_the_t_interval_of_the_mean_score_differences() -> None:
    rng = random.Random(3)
    a = {f"t{i}": [round(rng.random(), 2) for _ in range(3)] for i in range(25)}
    b = {f"t{i}": [round(rng.random() * 0.8, 2) for _ in range(3)] for i in range(25)}
    c = compare_scores(a, b)
    diffs = [sum(a[t]) / 3 - sum(b[t]) / 3 for t in sorted(a)]
    low, high = scipy_stats.t.interval(0.95, 24, loc=sum(diffs) / 25, scale=scipy_stats.sem(diffs))
    if (c.p_value < 0.05) == (low > 0 or high < 0):
        assert (c.low, c.high) == pytest.approx((low, high), abs=1e-9)
    assert c.measure == "score" and c.diff == pytest.approx(sum(diffs) / 25)


def test_compare_pages_show_the_strict_change_and_power() -> None:
    from pytest_maka.report.compare import render_compare_html, render_compare_markdown

    before = _budget_cohort()
    after = [dict(r, status=S.AGENT_FAILURE.value) if r["status"] == S.BUDGET_EXHAUSTED.value else r for r in before]
    result = compare_runs(before, after, labels=("before", "after"))
    a = next(x for x in result.subjects if x.subject == "A")
    assert a.paired.power is not None
    for text in (render_compare_markdown(result), render_compare_html(result)):
        assert "strict change" in text and "+0.0 pp [" in text and a.paired.power.text in text

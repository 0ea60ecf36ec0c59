"""Issue 26: ``maka compare`` shows paired mean-score changes beside pass rates when tasks give partial credit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_maka.core.stats import compare_scores
from pytest_maka.core.taxonomy import Status
from pytest_maka.report.compare import compare_lines, compare_runs, render_compare_html, render_compare_markdown

from ..conftest import Cohort, needs_bwrap
from .test_cli import run_maka
from .test_stats import rec

S = Status


def _scored(scores: dict[str, list[float]], subject: str = "agent", kind: str = "command") -> list[dict[str, Any]]:
    return [
        rec(task, subject, S.AGENT_SUCCESS if x == 1.0 else S.AGENT_FAILURE, kind=kind, rep=r + 1, score=x)
        for task, xs in scores.items()
        for r, x in enumerate(xs)
    ]


def test_compare_runs_pairs_mean_scores_by_task_and_adjusts_them_apart() -> None:
    before = {f"t{i}": [0.2 + 0.05 * (i % 4), 0.3] for i in range(12)}
    after = {f"t{i}": [0.6 + 0.05 * (i % 3), 0.7] for i in range(12)}
    other_a = {f"t{i}": [0.5, 0.5] for i in range(12)}
    rows_a = _scored(before) + _scored(other_a, "other")
    rows_b = _scored(after) + _scored(other_a, "other")
    result = compare_runs(rows_a, rows_b, labels=("before", "after"))
    assert result.partial_credit
    agent = next(s for s in result.subjects if s.subject == "agent")
    assert agent.score is not None and agent.score.a is not None and agent.score.b is not None
    expected = compare_scores(after, before)
    assert agent.score.paired.diff == pytest.approx(expected.diff) and agent.score.paired.diff > 0.3
    assert agent.score.paired.p_value == pytest.approx(expected.p_value) == 2 / 2**12
    # Holm over the two subjects' score changes (the other's p is 1): 2 * p
    assert agent.score.paired.p_adjusted == pytest.approx(2 * expected.p_value)
    assert (agent.score.paired.a, agent.score.paired.b) == (
        "after",
        "before",
    ) and agent.score.paired.verdict == "better"
    assert agent.score.a.mean == pytest.approx(sum(map(sum, before.values())) / 24)
    # pass rates stay the headline: nothing passed in either run
    assert agent.a.official.text == "0/24 = 0.0%" and agent.paired.diff == 0.0


def test_every_compare_view_shows_the_score_change_beside_the_pass_rates() -> None:
    before = {f"t{i}": [0.4] for i in range(10)}
    after = {f"t{i}": [0.9 if i < 8 else 0.4] for i in range(10)}
    result = compare_runs(_scored(before), _scored(after), labels=("before", "after"))
    agent = result.subjects[0]
    assert agent.score is not None
    change = f"{agent.score.paired.diff:+.3f} [{agent.score.paired.low:+.3f}, {agent.score.paired.high:+.3f}]"
    assert change.startswith("+0.400 [")
    terminal = "\n".join(compare_lines(result))
    assert "partial credit:" in terminal and "score change [95% CI]" in terminal and change in terminal
    assert "agent (score): " in terminal  # its power line
    markdown = render_compare_markdown(result)
    assert "### Score change (partial credit)" in markdown and change in markdown
    html = render_compare_html(result)
    assert 'id="score-change"' in html and f"{agent.score.paired.diff:+.3f}" in html
    mean = agent.score.a
    assert mean is not None
    assert mean.text in terminal and mean.text in markdown
    assert f"{mean.mean:.3f}<br>" in html and f"[{mean.low:.3f}, {mean.high:.3f}]</span>" in html
    for text in (terminal, markdown, html):
        assert "0/10 = 0.0%" in text  # the pass rate is still there


def test_without_partial_credit_compare_shows_no_score_change() -> None:
    rows = [rec(f"t{i}", "agent", S.AGENT_SUCCESS if i % 2 else S.AGENT_FAILURE) for i in range(10)]
    result = compare_runs(rows, rows)
    assert not result.partial_credit and result.subjects[0].score is None
    assert "partial credit" not in "\n".join(compare_lines(result))
    assert "Score change" not in render_compare_markdown(result)
    assert 'id="score-change"' not in render_compare_html(result)


# The verifier scores the quality the subject wrote: a task's reward is the number in /app/quality.
SCORE_TEST = (
    "mkdir -p /logs/verifier\n"
    "q=$(cat /app/quality 2>/dev/null || echo 0)\n"
    'echo "{\\"reward\\": $q}" > /logs/verifier/reward.json\n'
)


@pytest.mark.sandbox
@needs_bwrap
def test_maka_compare_of_two_real_runs_shows_the_score_change(cohort: Cohort, tmp_path: Path) -> None:
    for i in range(10):
        cohort.task(f"task{i}", test=SCORE_TEST, workspace={"base": f"0.{i % 5 + 4}\n"})
    # before: the subject writes the task's base quality; after: 0.2 more (task4/task9 reach 1.0 and pass)
    runs = {"before": "cp base quality", "after": "awk '{ printf \"%.1f\\n\", $1 + 0.2 }' base > quality"}
    outs = {}
    for label, command in runs.items():
        cohort.write(subjects=[{"name": "agent", "kind": "command", "command": command}])
        outs[label] = tmp_path / label
        cohort.run(f"--maka-out={outs[label]}").assert_outcomes(
            passed=2 if label == "after" else 0, failed=8 + 2 * (label == "before")
        )
    proc = run_maka("compare", str(outs["before"]), str(outs["after"]))
    assert proc.returncode == 0, proc.stderr
    assert "partial credit:" in proc.stdout and "+0.200 [" in proc.stdout
    agent = next(line for line in proc.stdout.splitlines() if line.startswith("agent") and "+0.200" in line)
    assert "p = 0.002" in agent and "10/0/0" in agent  # every task better: 2 / 2^10
    official = next(line for line in proc.stdout.splitlines() if line.startswith("agent") and "pp" in line)
    assert "0/10 = 0.0%" in official and "2/10 = 20.0%" in official
    assert "### Score change (partial credit)" in (outs["after"] / "compare.md").read_text()
    assert 'id="score-change"' in (outs["after"] / "compare.html").read_text()

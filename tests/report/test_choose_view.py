"""The "Choosing an agent" view model (report/agents.py), the label placer, and their place in report.html."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from pytest_maka.core.record_model import AttemptRecord, as_records
from pytest_maka.core.stats import summarize
from pytest_maka.report import write_views
from pytest_maka.report.agents import COMPACT_AFTER, ChoiceView, SubjectChoice, choice_view
from pytest_maka.report.charts import cost_chart
from pytest_maka.report.details import cell_tokens, row_note
from pytest_maka.report.formatting import DASH
from pytest_maka.report.labels import LINE_H, place_labels, text_width

from .choose_cohort import PROFILES, records


@pytest.fixture(scope="module")
def typed() -> list[AttemptRecord]:
    return as_records(records())


@pytest.fixture(scope="module")
def view(typed: list[AttemptRecord]) -> ChoiceView:
    return choice_view(summarize(typed), typed)


def row(view: ChoiceView, name: str) -> SubjectChoice:
    return next(r for r in view.rows if r.subject == name)


def test_agent_and_version_per_subject(view: ChoiceView) -> None:
    assert row(view, "claude-sonnet").agent_text == "claude-code 2.0.14"
    assert row(view, "qwen-acp").agent_text == "acp: @qwen-code/qwen-code 1.2.0"  # agent.name, not plain acp
    assert row(view, "gemini-flash").agent_text == "gemini-cli (version not recorded)"
    assert row(view, "scripted-baseline").agent_text == "command subject: no agent version"
    assert row(view, "oracle").agent_text == "oracle (reference): no agent version"


def test_mixed_versions_are_named(typed: list[AttemptRecord]) -> None:
    changed = [
        r.model_copy(update={"agent": r.agent.model_copy(update={"version": "2.1.0"})})
        if r.subject == "claude-sonnet" and r.task == "task-03" and r.agent
        else r
        for r in typed
    ]
    v = choice_view(summarize(changed), changed)
    assert row(v, "claude-sonnet").versions == ("2.0.14", "2.1.0")
    assert row(v, "claude-sonnet").agent_text == "claude-code 2.0.14 · 2.1.0 (mixed versions)"


def test_pass_rate_is_the_official_one_with_its_interval(view: ChoiceView) -> None:
    codex = row(view, "codex-mini")
    assert (codex.official.passes, codex.official.total) == (7, 11)  # budget_exhausted is not official
    assert (codex.strict.passes, codex.strict.total) == (7, 12)
    assert 0 < codex.official.low < codex.official.value < codex.official.high < 1  # type: ignore[operator]


def test_cost_tokens_and_where_the_cost_came_from(view: ChoiceView) -> None:
    aider = row(view, "aider-unknown-model")
    assert aider.guessed and aider.cost_text == "≈$0.25"
    assert aider.origin.text == "agent's own figure 12 · 12 guessed"
    codex = row(view, "codex-mini")
    assert not codex.guessed and codex.cost_text == "$0.18"
    assert codex.origin.text == "price table 12"
    assert codex.input_per_cell == pytest.approx(45_500) and codex.output_per_cell == pytest.approx(2_000)
    assert codex.tokens_known == 12
    assert row(view, "scripted-baseline").origin.text == "subject's usage.json 12"
    opencode = row(view, "opencode-local")
    assert opencode.cost_per_cell is None and opencode.cost_text == DASH
    assert opencode.origin.text == "no cost reported" and opencode.tokens_known == 0
    assert "1 partial (agent stopped)" in row(view, "claude-sonnet").origin.text


def test_limits_met_are_marked(view: ChoiceView) -> None:
    assert row(view, "claude-sonnet").marks.texts == ["1 passed at its timeout"]
    assert row(view, "mini-swe").marks.texts == ["2 passed over budget: max_tokens"]
    assert row(view, "codex-mini").marks.texts == ["1 stopped by a budget"]
    assert row(view, "pi-haiku").marks.texts == []


def test_wall_time_is_the_cell_durations(view: ChoiceView) -> None:
    oracle = row(view, "oracle")
    assert oracle.wall_median is not None and oracle.wall_p90 is not None
    assert 1.0 <= oracle.wall_median <= oracle.wall_p90 <= 2.0


def test_compact_matrix_only_past_five_subjects(typed: list[AttemptRecord], view: ChoiceView) -> None:
    assert len(view.rows) == 10 > COMPACT_AFTER and view.compact
    assert len(view.matrix) == 10 and all(len(r) == 10 for r in view.matrix)
    names = view.names
    oracle, script = names.index("oracle"), names.index("scripted-baseline")
    cell = view.matrix[oracle][script]
    assert cell.text == "+75" and cell.verdict == "better"
    assert "oracle minus scripted-baseline: +75.0 pp" in cell.title
    assert view.matrix[script][oracle].text == "-75" and view.matrix[script][oracle].verdict == "worse"
    assert view.matrix[oracle][oracle].verdict == "self"
    few = [r for r in typed if r.subject in {p.name for p in PROFILES[:COMPACT_AFTER]}]
    small = choice_view(summarize(few), few)
    assert len(small.rows) == COMPACT_AFTER and not small.compact and small.matrix == ()


def boxes(placed: list, texts: list[str]) -> list[tuple[float, float, float, float]]:
    out = []
    for at, text in zip(placed, texts, strict=True):
        w = text_width(text)
        x0 = at.x if at.anchor == "start" else at.x - w
        out.append((x0, at.y - LINE_H + 4, x0 + w, at.y + 4))
    return out


def overlapping(bs: list[tuple[float, float, float, float]]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for (i, a), (j, b) in itertools.combinations(enumerate(bs), 2)
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    ]


@pytest.mark.parametrize(
    "points",
    [
        [(100.0, 50.0, "alpha"), (100.0, 50.0, "beta"), (100.0, 50.0, "gamma-long-name")],  # three ties
        [(300.0, 260.0, f"s{i}") for i in range(6)],  # ties at the bottom edge: pushed back up
        [(590.0, 20.0, "right-edge-label"), (588.0, 22.0, "another-one")],  # flipped to the left
        [(100.0 + i, 40.0, f"subject-{i}") for i in range(20)],  # more than fit the height
    ],
)
def test_labels_never_overlap(points: list[tuple[float, float, str]]) -> None:
    placed = place_labels(points, right=596, top=14, bottom=260)
    bs = boxes(placed, [t for _, _, t in points])
    assert overlapping(bs) == []
    assert all(b[2] <= 596 and b[0] >= 0 for b in bs)
    if len(points) <= 10:
        assert all(b[1] >= 14 and b[3] <= 264 for b in bs)


def test_a_lone_label_stays_beside_its_point() -> None:
    (at,) = place_labels([(100.0, 80.0, "solo")], right=596, top=14, bottom=260)
    assert (at.x, at.y, at.anchor, at.moved) == (109.0, 84.0, "start", False)


def test_cost_chart_ties_get_separate_labels_with_leaders(typed: list[AttemptRecord]) -> None:
    svg = cost_chart(summarize(typed).subjects)
    assert svg is not None
    labels = re.findall(r'<text class="point-label" x="([\d.]+)" y="([\d.]+)"', svg)
    assert len(labels) == 8  # every subject with a cost and an official rate
    assert len(set(labels)) == 8
    assert 'class="leader"' in svg  # aider and gemini tie: one of them moved, with a leader line


def test_report_html_has_the_section_and_folds_the_full_notes(tmp_path: Path) -> None:
    html = write_views(tmp_path, records(), cohort="choose")["html"].read_text()
    section = html[html.index('<section id="choose">') : html.index("</section>", html.index('<section id="choose">'))]
    assert "claude-code 2.0.14" in section and "command subject: no agent version" in section
    assert "passed at its timeout" in section and "passed over budget: max_tokens" in section
    assert "≈$0.25" in section and ">guess</span>" in section
    assert 'id="compact-matrix"' in section
    assert '<details id="pairwise-full">' in html
    assert '<a href="#choose">Choosing an agent</a>' in html


def test_few_subjects_keep_the_full_matrix_open(tmp_path: Path) -> None:
    few = [r for r in records() if r.subject in {p.name for p in PROFILES[:3]}]
    html = write_views(tmp_path, few, cohort="choose")["html"].read_text()
    assert '<section id="choose">' in html
    assert 'id="compact-matrix"' not in html and 'id="pairwise-full"' not in html
    assert '<table class="matrix">' in html


def test_cell_rows_carry_tokens_and_limit_marks(typed: list[AttemptRecord]) -> None:
    mini = [r for r in typed if r.subject == "mini-swe"]
    assert [row_note(r) for r in mini[:3]] == ["", "passed over budget: max_tokens", "passed over budget: max_tokens"]
    assert cell_tokens(mini[1]) == 1_192_000
    claude = next(r for r in typed if r.subject == "claude-sonnet" and r.task == "task-00")
    assert row_note(claude) == "passed at its timeout"
    assert cell_tokens(next(r for r in typed if r.subject == "oracle")) is None


def test_summary_md_has_the_choice_table(tmp_path: Path) -> None:
    text = write_views(tmp_path, records(), cohort="choose")["markdown"].read_text()
    section = text[text.index("### Choosing an agent") : text.index("### Paired comparisons")]
    lines = section.splitlines()[4:14]
    assert len(lines) == 10
    assert [line.split(" | ")[0] for line in lines][:2] == ["| aider-unknown-model", "| claude-sonnet"]
    aider = lines[0]
    assert "| aider 0.86.1 |" in aider and "≈$0.25 (guess)" in aider and "45.5k, 2.0k" in aider
    assert "command subject: no agent version" in section
    assert "2 passed over budget: max\\_tokens" in section and "1 passed at its timeout" in section

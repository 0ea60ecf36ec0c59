"""report.html with ten subjects in real headless Chromium at 1280 px: the choice section, no
horizontal page scroll, tables within their boxes, cost-chart labels that do not overlap."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.report import write_views

from ..report.choose_cohort import records, records_every_class
from .conftest import save_screenshot

WIDTH = 1280


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("choose")
    return write_views(out, records(), cohort="choose")["html"]


@pytest.fixture
def page(browser: Any, html: Path) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors: list[str] = []
    blocked: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route(
        "**/*",
        lambda r: r.continue_() if r.request.url.startswith("file://") else (blocked.append(r.request.url), r.abort()),
    )
    page.goto(html.as_uri())
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=10_000)
    yield page
    assert errors == [] and blocked == [], (errors, blocked)
    page.close()


def box(page: Any, selector: str) -> dict[str, float]:
    return page.evaluate(
        """s => { const e = document.querySelector(s), r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, top: r.top, height: r.height, sw: e.scrollWidth, cw: e.clientWidth}; }""",
        selector,
    )


def test_page_fits_1280_without_horizontal_scroll(page: Any, tmp_path: Path) -> None:
    doc = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert doc[0] <= doc[1] == WIDTH
    for selector in ("#choose-table", "#compact-matrix", "#headline"):
        b = box(page, selector)
        assert b["left"] >= 0 and b["right"] <= WIDTH, (selector, b)
        assert b["sw"] <= b["cw"], (selector, b)  # no scrolling inside either
    headline_box = box(page, "#headline").get("right")
    scroller = page.evaluate(
        "() => { const d = document.querySelector('#headline').parentElement; return [d.scrollWidth, d.clientWidth]; }"
    )
    assert scroller[0] <= scroller[1], (
        f"the subject table scrolls sideways in its box ({scroller}, right {headline_box})"
    )
    save_screenshot(page, tmp_path, "report-choose-1280.png", full_page=True)


def test_choice_section_shows_agents_costs_and_limits(page: Any) -> None:
    rows = page.locator("#choose-table tbody tr")
    assert rows.count() == 10
    text = page.locator("#choose-table").inner_text()
    for expected in (
        "claude-code 2.0.14",
        "gemini-cli (version not recorded)",
        "command subject: no agent version",
        "≈$0.25",
        "price table 12",
        "1 passed at its timeout",
        "2 passed over budget: max_tokens",
        "1 stopped by a budget",
        "45.5k in",
    ):
        assert expected in text, expected
    page.locator("#choose-table th", has_text="cost / cell").click()  # sortable like the other tables
    first = page.locator("#choose-table tbody tr").first.inner_text()
    assert first.startswith(("opencode-local", "oracle"))  # no cost sorts first ascending


def test_compact_matrix_replaces_the_pairwise_wall(page: Any) -> None:
    assert page.locator("#compact-matrix tbody tr").count() == 10
    assert page.locator("#compact-matrix td.better, #compact-matrix td.worse").count() > 0
    folded = box(page, "#comparisons")["height"]
    assert not page.locator("#pairwise-full").evaluate("d => d.open")
    assert page.locator("#compact-matrix").is_visible()
    page.locator("#pairwise-full > summary").click()
    opened = box(page, "#comparisons")["height"]
    assert opened > folded  # the notes are there, one click away
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH


def test_cost_chart_labels_do_not_overlap(page: Any, tmp_path: Path) -> None:
    rects = page.evaluate(
        """() => Array.from(document.querySelectorAll('#charts text.point-label')).map(t => {
        const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })"""
    )
    assert len(rects) == 8
    clashes = [
        (a[0], b[0])
        for a, b in itertools.combinations(rects, 2)
        if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
    ]
    assert clashes == []
    figure = page.locator("#charts figure", has_text="Cost vs pass rate")
    fb = figure.bounding_box()
    assert all(fb["x"] <= r[1] and r[3] <= fb["x"] + fb["width"] for r in rects)
    save_screenshot(figure, tmp_path, "report-cost-labels.png")  # a locator screenshots itself


def test_cell_rows_show_tokens_beside_cost_and_limit_marks(page: Any) -> None:
    page.select_option("#f-subject", "mini-swe")
    headers = page.locator("#cells thead th").all_inner_texts()
    assert [h.strip(" ↕") for h in headers[5:7]] == ["cost", "tokens"]
    cells = page.locator("#cells tbody tr")
    texts = [cells.nth(i).inner_text() for i in range(cells.count())]
    assert sum("passed over budget: max_tokens" in t for t in texts) == 2
    assert any("1.2M" in t for t in texts), texts  # the overrun's 1.19 M input tokens, beside its cost
    page.select_option("#f-subject", "claude-sonnet")
    page.fill("#f-text", "timeout")
    page.wait_for_function("() => document.querySelector('#shown').textContent === '1 of 120 cells'", timeout=5_000)
    assert "passed at its timeout" in page.locator("#cells tbody tr").first.inner_text()


def test_subject_table_with_more_class_columns_fits(browser: Any, tmp_path: Path) -> None:
    html = write_views(tmp_path, records_every_class(), cohort="choose")["html"]
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(html.as_uri())
    classes = page.locator("#headline thead th .sq").count()
    assert classes >= 5
    sizes = page.evaluate(
        """() => { const t = document.querySelector('#headline');
        return [document.documentElement.scrollWidth, t.scrollWidth, t.parentElement.clientWidth]; }"""
    )
    assert sizes[0] <= WIDTH and sizes[1] <= sizes[2], sizes
    assert "budget_exhausted" in page.locator("#headline thead").inner_text()  # breaks only at the underscore
    page.close()

"""report.html and compare.html in real headless Chromium: offline, no console errors, filters and drill-downs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.cli import main as maka

from .conftest import bench_module, save_screenshot


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated run: 3 agents + oracle + nop, 12 tasks, 2 repetitions, realistic artifacts."""
    out = tmp_path_factory.mktemp("run")
    bench_module().generate(out, subjects=3, tasks=12, repetitions=2, seed=5, references=True)
    assert maka(["report", str(out)]) == 0
    return out


class Page:
    """A page with every request that is not file:// blocked and recorded, and console errors collected."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", self._route)
        self.page.goto(url)

    def _route(self, route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()


@pytest.fixture
def report(browser: Any, out_dir: Path) -> Iterator[Page]:
    p = Page(browser, (out_dir / "report.html").as_uri())
    p.page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=10_000)
    yield p
    assert p.errors == [], p.errors
    assert p.blocked == [], f"the report tried to reach the network: {p.blocked}"
    p.page.close()


def shown(page: Any) -> str:
    return page.locator("#shown").inner_text()


def test_report_loads_offline_and_renders_everything(report: Page, tmp_path: Path) -> None:
    page = report.page
    assert page.locator("#headline tbody tr").count() == 5
    assert "agent-alpha" in page.locator("#headline").inner_text()
    assert page.locator("table.matrix td.better, table.matrix td.worse").count() > 0
    assert page.locator("#charts svg.chart").count() == 4
    assert page.locator("#grid-table tbody tr").count() == 12
    assert page.locator("#grid-table i.sq").count() == 12 * 5 * 2
    assert shown(page) == "120 of 120 cells"
    assert page.locator("#cells tbody tr").count() == 100  # first page of 100
    shot = save_screenshot(page, tmp_path, "report-full.png", full_page=True)
    assert shot.stat().st_size > 20_000


def test_filters_narrow_the_table_and_the_grid(report: Page) -> None:
    page = report.page
    page.select_option("#f-subject", "agent-beta")
    assert shown(page) == "24 of 120 cells"
    assert set(page.locator("#cells tbody td:nth-child(2)").all_inner_texts()) == {"agent-beta"}
    page.select_option("#f-class", "agent_success")
    n = int(shown(page).split()[0])
    assert 0 < n < 24
    assert set(page.locator("#cells tbody .badge").all_inner_texts()) == {"agent_success"}
    page.select_option("#f-task", "task-0003")
    assert page.locator("#grid-table tbody tr").count() == 1
    page.select_option("#f-subject", "")
    page.select_option("#f-class", "")
    assert shown(page) == "10 of 120 cells"
    page.fill("#f-text", "task-0011[nop")
    page.select_option("#f-task", "")
    page.wait_for_function("() => document.getElementById('shown').textContent === '2 of 120 cells'")
    page.fill("#g-text", "task-001")
    page.wait_for_function("() => document.querySelectorAll('#grid-table tbody tr').length === 2")


def test_sorting_the_cell_table(report: Page) -> None:
    page = report.page
    page.click("#cells th[data-k='6']")  # duration ascending
    durations = page.locator("#cells tbody tr td:nth-child(5)").all_inner_texts()
    secs = [float(d[:-1]) if d.endswith("s") and "m" not in d else None for d in durations[:20]]
    known = [s for s in secs if s is not None]
    assert known == sorted(known)
    page.click("#headline th:nth-child(3)")  # official pass rate, ascending
    first = page.locator("#headline tbody tr:first-child td:first-child").inner_text()
    assert first.startswith("nop")


def test_drill_down_shows_verdict_claim_trajectory_diff_and_outputs(report: Page, tmp_path: Path) -> None:
    page = report.page
    page.select_option("#f-subject", "agent-gamma")
    page.select_option("#f-class", "agent_failure")
    page.click("#cells tbody tr:first-child button.tog")
    drill = page.locator("#cells tr.drill")
    drill.wait_for()
    text = drill.inner_text()
    for heading in (
        "verdict (verifier, authoritative)",
        "subject's claim (not authoritative)",
        "INSTRUCTION",
        "SUBJECT OUTPUT (TAIL)",
        "TRAJECTORY",
        "WORKSPACE DIFF",
        "VERIFIER OUTPUT (TAIL)",
    ):
        assert heading.lower() in text.lower(), heading
    assert '"status": "complete"' in text and "FAILED test_main.py::test_edge" in text
    assert drill.locator("ol.steps li").count() >= 3 and drill.locator(".call").first.inner_text().startswith("→ bash")
    assert drill.locator("pre.diff .add").inner_text() == "+    return x + 1"
    save_screenshot(page, tmp_path, "report-drill-down.png")
    page.click("#cells tbody tr.open button.tog")
    assert page.locator("#cells tr.drill").count() == 0


def test_grid_square_opens_its_cell(report: Page) -> None:
    page = report.page
    page.click("#grid-table i.sq[title^='task-0007[nop-r1]']")
    opened = page.locator("#cells tr.open")
    assert "task-0007[nop-r1]" in opened.inner_text()
    assert page.locator("#f-task").input_value() == "task-0007"
    assert page.locator("#cells tr.drill").is_visible()


def test_compare_page_offline(browser: Any, out_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "after"
    bench_module().generate(other, subjects=3, tasks=12, repetitions=2, seed=6, references=True)
    assert maka(["compare", str(out_dir), str(other), "--out", str(tmp_path)]) == 0
    p = Page(browser, (tmp_path / "compare.html").as_uri())
    page = p.page
    assert page.locator("table.sortable").first.locator("tbody tr").count() == 5
    page.locator("table.sortable").first.locator("th").nth(3).click()
    save_screenshot(page, tmp_path, "compare.png", full_page=True)
    assert p.errors == [] and p.blocked == []
    page.close()

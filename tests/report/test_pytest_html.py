"""pytest-html columns (class, score, cost, artifacts link) and junitxml properties for cells."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_maka.report.pytest_html_hooks import HEADERS, MakaHtmlColumns

from ..conftest import Cohort, needs_bwrap


def _columns(tmp_path: Path, html: str = "reports/ph.html") -> MakaHtmlColumns:
    config: Any = SimpleNamespace(
        option=SimpleNamespace(htmlpath=html), invocation_params=SimpleNamespace(dir=tmp_path)
    )
    return MakaHtmlColumns(config, tmp_path / "out")


def test_columns_for_a_cell_and_for_a_plain_test(tmp_path: Path) -> None:
    cols = _columns(tmp_path)
    header = ["<th>Result</th>", "<th>Test</th>", "<th>Duration</th>", "<th>Links</th>"]
    cols.pytest_html_results_table_header(header)
    assert header[2:6] == list(HEADERS) and len(header) == 8
    record = {
        "status": "agent_failure",
        "score": 0.25,
        "usage": {"cost_usd": 0.0123},
        "cell_key": "t__a__r0-1<b>",
        "artifacts": {"dir": "cells/t__a__r0-1/attempt-1"},
    }
    cells = ["<td>Failed</td>", "<td>id</td>", "<td>1s</td>", "<td></td>"]
    cols.pytest_html_results_table_row(SimpleNamespace(maka=record), cells)
    assert cells[2:5] == [
        '<td class="col-makaClass">agent_failure</td>',
        '<td class="col-makaScore">0.25</td>',
        '<td class="col-makaCost">$0.0123</td>',
    ]
    assert cells[5] == '<td><a href="../out/cells/t__a__r0-1/attempt-1">t__a__r0-1&lt;b&gt;</a></td>'
    plain = ["<td>Passed</td>", "<td>id</td>", "<td>1s</td>", "<td></td>"]
    cols.pytest_html_results_table_row(SimpleNamespace(), plain)
    assert len(plain) == 8 and plain[2] == '<td class="col-makaClass"></td>'


def test_unsafe_artifact_dir_is_not_linked(tmp_path: Path) -> None:
    cells = ["a", "b", "c", "d"]
    record = {"status": "agent_success", "artifacts": {"dir": "../../etc"}}
    _columns(tmp_path).pytest_html_results_table_row(SimpleNamespace(maka=record), cells)
    assert cells[5] == "<td></td>"


@pytest.mark.sandbox
@needs_bwrap
def test_pytest_html_and_junitxml_carry_class_score_and_link(cohort: Cohort) -> None:
    pytest.importorskip("pytest_html", reason="pytest-html is part of the test extras")
    cohort.task("t")
    cohort.write()
    result = cohort.run(f"--html={cohort.root / 'ph.html'}", f"--junitxml={cohort.root / 'j.xml'}")
    result.assert_outcomes(passed=1, failed=1)
    page = html_lib.unescape((cohort.root / "ph.html").read_text())
    assert 'data-column-type="makaClass">Class</th>' in page
    assert re.search(r'col-makaClass\\?">agent_success<', page) and re.search(r'col-makaClass\\?">agent_failure<', page)
    assert re.search(r'<a href=\\?"out/cells/t__oracle__r0-[0-9a-f]+/attempt-1\\?">', page)
    junit = (cohort.root / "j.xml").read_text()
    assert '<property name="maka_status" value="agent_failure"' in junit
    assert '<property name="maka_score" value="1.0"' in junit

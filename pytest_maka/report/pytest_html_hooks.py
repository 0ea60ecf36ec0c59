"""pytest-html integration: taxonomy class, score and cost columns, and a link to each cell's artifacts.

Registered from ``plugin.pytest_configure`` only when pytest-html is installed; the hooks are
``optionalhook`` so a pytest-html that does not define them is not an error. Values are
escaped: cell ids and classes come from records, which carry task and subject names.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

import pytest
from pydantic import ValidationError

from ..core.record_model import Artifacts, Num, RecordPart, Usage
from .artifacts import safe_rel_path

HEADERS = (
    '<th class="sortable" data-column-type="makaClass">Class</th>',
    '<th class="sortable" data-column-type="makaScore">Score</th>',
    '<th class="sortable" data-column-type="makaCost">Cost</th>',
    "<th>Artifacts</th>",
)


class ColumnFacts(RecordPart):
    """The part of a report's record (``report.maka``) the columns show; any of it may be missing."""

    status: str | None = None
    score: Num | None = None
    usage: Usage | None = None
    cell_key: str | None = None
    artifacts: Artifacts | None = None


class MakaHtmlColumns:
    """Adds the pytest-maka columns to pytest-html's results table."""

    def __init__(self, config: pytest.Config, out_dir: Path) -> None:
        self.config = config
        self.out_dir = Path(out_dir)

    def _html_dir(self) -> Path:
        html = getattr(self.config.option, "htmlpath", None)
        base = self.config.invocation_params.dir
        return (base / html).resolve().parent if html else base

    def artifacts_href(self, record: ColumnFacts) -> str | None:
        """The cell's artifacts directory relative to the pytest-html file, or None."""
        rel = safe_rel_path(record.artifacts.dir) if record.artifacts is not None else None
        if rel is None:
            return None
        return Path(os.path.relpath(self.out_dir / rel, self._html_dir())).as_posix()

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells[2:2] = HEADERS

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        record = _typed(getattr(report, "maka", None))
        if record is None:
            cells[2:2] = [
                '<td class="col-makaClass"></td>',
                '<td class="col-makaScore"></td>',
                '<td class="col-makaCost"></td>',
                "<td></td>",
            ]
            return
        status = escape(record.status or "")
        score = record.score
        cost = record.usage.cost_usd if record.usage is not None else None
        href = self.artifacts_href(record)
        link = f'<a href="{escape(href)}">{escape(record.cell_key or "artifacts")}</a>' if href else ""
        cells[2:2] = [
            f'<td class="col-makaClass">{status}</td>',
            f'<td class="col-makaScore">{"" if not isinstance(score, (int, float)) else f"{score:.3g}"}</td>',
            f'<td class="col-makaCost">{"" if not isinstance(cost, (int, float)) else f"${cost:.4f}"}</td>',
            f"<td>{link}</td>",
        ]


def _typed(record: object) -> ColumnFacts | None:
    """The record a report carries, typed (None when it has none, or one that does not fit)."""
    if not isinstance(record, dict):
        return None
    try:
        return ColumnFacts.model_validate(record)
    except ValidationError:
        return None


def register(config: pytest.Config, out_dir: Path) -> None:
    """Register the columns when pytest-html is active (no-op otherwise)."""
    if config.pluginmanager.hasplugin("html"):
        config.pluginmanager.register(MakaHtmlColumns(config, out_dir), "maka-pytest-html")

"""``report.html``: one self-contained page (inline CSS, JS and SVG; no network) derived from cell records.

The headline tables, the pairwise matrix, task health and the charts are rendered here
(Jinja2 with autoescape). The task x subject grid and the per-cell table are drawn by the
page's own script from an embedded JSON block, and each drill-down from a second block
parsed on first use, so a 10,000-cell report opens quickly (see :mod:`.details`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from .. import __version__
from ..core.record_model import AttemptRecord, as_records
from ..core.stats import REFERENCE, WEAK_TASKS, CohortSummary, PairedComparison
from ..core.taxonomy import MEANING, OFFICIAL, PYTEST_OUTCOME, Status
from . import charts
from .agents import choice_view
from .artifacts import cap, read_tail, safe_rel_path
from .details import error_text, page_data, script_json
from .egress import RefusedRow
from .formatting import DASH, money, p_text, pct, pp
from .markdown import MAX_TASK_NAMES, pass_k_weak
from .taint import paths_text, tainted_rows
from .terminal import few_tasks_line, format_cost, format_duration, ranking_line, rate_weak_lines, weak_line

__all__ = ["CLASS_COLOURS", "error_text", "read_tail", "render_html", "safe_rel_path"]

TEMPLATE = "report.html.j2"
#: The templates ``TEMPLATE`` includes (compiled ahead by ``report.warm``).
INCLUDED_TEMPLATES = ("_style.css.j2", "_choose.css.j2", "_choose.html.j2", "_report.js.j2")
TEMPLATES_DIR = Path(__file__).with_name("templates")
#: Flagged tasks listed in the health table (the grid flags every one).
MAX_HEALTH_ROWS = 200

#: Background and text colour of each class (cells, badges, legend, charts).
CLASS_COLOURS: dict[Status, tuple[str, str]] = {
    Status.AGENT_SUCCESS: ("#1a7f37", "#fff"),
    Status.AGENT_FAILURE: ("#cf222e", "#fff"),
    Status.AGENT_INCOMPLETE: ("#e16f24", "#fff"),
    Status.BUDGET_EXHAUSTED: ("#8250df", "#fff"),
    Status.VERIFIER_FAILURE: ("#bf8700", "#fff"),
    Status.INFRA_FAILURE: ("#57606a", "#fff"),
    Status.POLICY_DENIED: ("#0550ae", "#fff"),
    Status.AGENT_ABORTED: ("#c9d1d9", "#24292f"),
}


def format_score(score: object) -> str:
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return DASH
    return f"{score:.3g}"


def compact(value: float | None) -> str:
    """``12.3k`` style for token counts."""
    if value is None:
        return DASH
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def verdict_class(c: PairedComparison | None) -> str:
    """CSS class of a comparison cell: ``better`` / ``worse`` when its deciding (Holm) p-value is below 0.05."""
    return "na" if c is None else c.verdict


def comparison_note(c: PairedComparison) -> str:
    return c.test_text


#: Meta keys the page already shows elsewhere (title, counts, run window).
_SHOWN_ELSEWHERE = frozenset({"cohort", "run_time", "started_at", "finished_at", "cells", "tasks", "subjects"})


def header_facts(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``meta`` as (label, text) pairs for the header; nested values flattened one level."""
    facts = []
    for key, value in meta.items():
        if key in _SHOWN_ELSEWHERE or value is None or value == "":
            continue
        if isinstance(value, Mapping):
            text = " · ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            text = " ".join(str(v) for v in value)
        else:
            text = str(value)
        facts.append((str(key), cap(text, 500)))
    return facts


@cache
def environment() -> jinja2.Environment:
    """The Jinja2 environment shared by the report and compare pages."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=format_duration,
        score=format_score,
        pct=pct,
        pp=pp,
        p=p_text,
        money=money,
        compact=compact,
        cost=lambda s: DASH if s.cost_usd is None else format_cost(s),
    )
    env.globals.update(
        statuses=list(Status),
        colours=CLASS_COLOURS,
        meaning=MEANING,
        official=OFFICIAL,
        pytest_outcome=PYTEST_OUTCOME,
        success=Status.AGENT_SUCCESS,
        version=__version__,
        verdict_class=verdict_class,
        comparison_note=comparison_note,
        reference_family=REFERENCE,
        weak_tasks=WEAK_TASKS,
    )
    return env


def render_html(
    summary: CohortSummary,
    records: Sequence[AttemptRecord | Mapping[str, Any]],
    *,
    cohort: str,
    out_dir: Path | None = None,
    meta: Mapping[str, Any] | None = None,
    refused: list[RefusedRow] | None = None,
) -> str:
    """The whole ``report.html`` text. ``out_dir`` is where artifact paths are resolved."""
    meta = dict(meta or {})
    records = as_records(records)
    data, details = page_data(summary, records, out_dir)
    present = [s for s in Status if summary.counts[s]]
    subjects = list(summary.subjects)
    health_rows = [(h, f) for h in summary.health.values() for f in h.flags][:MAX_HEALTH_ROWS]
    return (
        environment()
        .get_template(TEMPLATE)
        .render(
            cohort=cohort,
            run_time=meta.get("run_time"),
            out_dir=str(out_dir) if out_dir is not None else None,
            generated=datetime.now(tz=UTC).isoformat(timespec="seconds"),
            facts=header_facts(meta),
            summary=summary,
            choose=choice_view(summary, records),
            present=present,
            with_reps=any(s.pass_k for s in subjects),
            ks=sorted({e.k for s in subjects for e in s.pass_k}),
            pass_k={s.subject: {e.k: e for e in s.pass_k} for s in subjects},
            health_rows=health_rows,
            weak=weak_line(summary),
            few_tasks=few_tasks_line(summary),
            rate_weak=rate_weak_lines(summary),
            ranking=ranking_line(summary),
            scored=summary.partial_credit,
            variance_rows=[s for s in subjects if s.variance is not None],
            max_names=MAX_TASK_NAMES,
            pass_k_weak=pass_k_weak(summary),
            health_flagged=sum(len(h.flags) for h in summary.health.values()),
            refused=refused or [],
            tainted=tainted_rows(records),
            taint_paths=paths_text,
            charts={
                "rate": charts.pass_rate_chart(subjects),
                "taxonomy": charts.taxonomy_chart(subjects, CLASS_COLOURS),
                "cost": charts.cost_chart(subjects),
                "duration": charts.duration_chart(subjects),
            },
            data_json=script_json(data),
            details_json=script_json(details),
        )
    )

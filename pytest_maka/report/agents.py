"""The report's "Choosing an agent" section: one row per subject with what a choice rests on.

Per subject: the agent (an ACP agent by the name it gave) and its version(s), the official
pass rate with its interval, cost per cell with where the cost came from (guesses marked),
tokens per cell, wall time, and
the limits its cells met (a pass at its timeout, a pass over budget, cells a budget
stopped). With more than :data:`COMPACT_AFTER` subjects a compact matrix of the paired
differences stands in for the full pairwise notes, which fold away.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.record_model import AgentInfo, AttemptRecord, BudgetInfo
from ..core.stats import REFERENCE, REFERENCE_KINDS, CohortSummary, Rate, SubjectSummary
from ..core.taxonomy import Status
from .formatting import DASH, money, p_text, pp
from .terminal import format_duration

#: More subjects than this: the compact matrix, and the full pairwise notes folded.
COMPACT_AFTER = 5
#: Kinds that run a command, not an agent: no version to show.
COMMAND_KINDS = frozenset({"command"})

#: How each cost source reads in the report.
SOURCE_LABELS = {
    "agent": "agent's own figure",
    "price_table": "price table",
    "unknown": "unknown",
    "subject": "subject's usage.json",
}


@dataclass(frozen=True)
class CostOrigin:
    """Where a subject's cell costs came from: cells per source, and how many were guesses."""

    sources: tuple[tuple[str, int], ...]
    guesses: int
    #: Cells whose usage was metered up to a stop (a killed agent's partial figure).
    partial: int

    @property
    def text(self) -> str:
        parts = [f"{SOURCE_LABELS.get(name, name)} {n}" for name, n in self.sources]
        if self.guesses:
            parts.append(f"{self.guesses} guessed")
        if self.partial:
            parts.append(f"{self.partial} partial (agent stopped)")
        return " · ".join(parts) if parts else "no cost reported"


@dataclass(frozen=True)
class LimitMarks:
    """Cells of a subject that met a limit."""

    passed_at_timeout: int
    passed_over_budget: tuple[tuple[str, int], ...]
    stopped_by_budget: int
    timed_out: int

    @property
    def texts(self) -> list[str]:
        out = []
        if self.passed_at_timeout:
            out.append(f"{self.passed_at_timeout} passed at its timeout")
        out.extend(f"{n} passed over budget: {name}" for name, n in self.passed_over_budget)
        if self.stopped_by_budget:
            out.append(f"{self.stopped_by_budget} stopped by a budget")
        failed_timeouts = self.timed_out - self.passed_at_timeout
        if failed_timeouts > 0:
            out.append(f"{failed_timeouts} timed out")
        return out


@dataclass(frozen=True)
class SubjectChoice:
    """One subject's row in the choice table."""

    subject: str
    kind: str | None
    #: Distinct ``agent.version`` values of its cells, in first-seen order.
    versions: tuple[str, ...]
    cells: int
    official: Rate
    strict: Rate
    cost_usd: float | None
    cost_per_cell: float | None
    cost_per_success: float | None
    cost_known: int
    origin: CostOrigin
    input_per_cell: float | None
    output_per_cell: float | None
    tokens_known: int
    wall_median: float | None
    wall_p90: float | None
    marks: LimitMarks
    #: Distinct ``agent.name`` values (the agent's own name: an ACP agent's ``agentInfo.name``).
    names: tuple[str, ...] = ()

    @property
    def agent_text(self) -> str:
        """``claude-code 2.0.14``, ``acp: @zed-industries/claude-code-acp 0.16.2``, ``command: no agent
        version``, ``codex (version not recorded)``."""
        kind = self.kind or "subject"
        if self.names:
            kind = f"{kind}: {' · '.join(self.names)}"
        if self.kind in COMMAND_KINDS:
            return "command subject: no agent version"
        if self.kind in REFERENCE_KINDS:
            return f"{kind} (reference): no agent version"
        if not self.versions:
            return f"{kind} (version not recorded)"
        mixed = " (mixed versions)" if len(self.versions) > 1 else ""
        return f"{kind} {' · '.join(self.versions)}{mixed}"

    @property
    def guessed(self) -> bool:
        return self.origin.guesses > 0

    @property
    def cost_text(self) -> str:
        """Cost per cell, ``≈`` in front when some of it is a guess."""
        if self.cost_per_cell is None:
            return DASH
        return ("≈" if self.guessed else "") + money(self.cost_per_cell)


@dataclass(frozen=True)
class MatrixCell:
    """One cell of the compact matrix: row minus column, coloured by the deciding verdict."""

    text: str
    verdict: str
    title: str


@dataclass(frozen=True)
class ChoiceView:
    """The section: rows in the summary's order, and the compact matrix when there are many subjects."""

    rows: tuple[SubjectChoice, ...]
    compact: bool
    #: Rows of the compact matrix (row i against each column j); empty unless ``compact``.
    matrix: tuple[tuple[MatrixCell, ...], ...]

    @property
    def names(self) -> list[str]:
        return [r.subject for r in self.rows]


def subject_choice(s: SubjectSummary, records: Sequence[AttemptRecord]) -> SubjectChoice:
    """The choice row of one subject from its summary and its records."""
    versions: list[str] = []
    names: list[str] = []
    sources: Counter[str] = Counter()
    guesses = partial = at_timeout = stopped = timed_out = 0
    over: Counter[str] = Counter()
    for r in records:
        agent, budget = r.agent or AgentInfo(), r.budget or BudgetInfo()
        if agent.version and agent.version not in versions:
            versions.append(agent.version)
        if agent.name and agent.name not in names:
            names.append(agent.name)
        source = _source(r, agent)
        if source:
            sources[source] += 1
        guesses += bool(agent.cost is not None and agent.cost.guess)
        partial += bool(agent.usage_partial)
        timed_out += bool(agent.timed_out)
        if r.passed and agent.timed_out:
            at_timeout += 1
        if r.passed and budget.exceeded:
            over[budget.exceeded] += 1
        if r.status is Status.BUDGET_EXHAUSTED:
            stopped += 1
    spend = s.spend
    return SubjectChoice(
        subject=s.subject,
        kind=s.kind,
        versions=tuple(versions),
        cells=s.cells,
        official=s.official,
        strict=s.strict,
        cost_usd=spend.cost_usd,
        cost_per_cell=spend.cost_per_cell,
        cost_per_success=spend.cost_per_success,
        cost_known=spend.cost_known,
        origin=CostOrigin(tuple(sorted(sources.items(), key=lambda kv: -kv[1])), guesses, partial),
        input_per_cell=None if spend.input_tokens is None else spend.input_tokens / spend.tokens_known,
        output_per_cell=None if spend.output_tokens is None else spend.output_tokens / spend.tokens_known,
        tokens_known=spend.tokens_known,
        wall_median=s.durations.median if s.durations else None,
        wall_p90=s.durations.p90 if s.durations else None,
        marks=LimitMarks(at_timeout, tuple(sorted(over.items())), stopped, timed_out),
        names=tuple(names),
    )


def _source(r: AttemptRecord, agent: AgentInfo) -> str | None:
    """Where this cell's cost came from, or None when it has no cost."""
    if agent.cost is not None and agent.cost.source:
        return agent.cost.source
    if agent.cost_source:
        return "price_table" if agent.cost_source.startswith("price_table") else agent.cost_source
    if r.usage is not None and r.usage.cost_usd is not None:
        return "subject"
    return None


def _matrix(summary: CohortSummary, names: list[str]) -> tuple[tuple[MatrixCell, ...], ...]:
    rows = []
    for a in names:
        cells = []
        for b in names:
            c = None if a == b else summary.comparison(a, b)
            if a == b:
                cells.append(MatrixCell("·", "self", a))
            elif c is None or c.diff is None:
                cells.append(MatrixCell(DASH, "na", f"{a} vs {b}: no shared tasks"))
            else:
                p = c.p_value if c.family == REFERENCE else c.p_adjusted
                title = (
                    f"{a} minus {b}: {pp(c.diff)} [{pp(c.low)}, {pp(c.high)}] on {c.tasks} shared tasks; "
                    f"deciding {p_text(p)}; tasks won {c.wins_a} to {c.wins_b}"
                    + ("; weak: " + "; ".join(c.weak_reasons) if c.weak else "")
                )
                cells.append(MatrixCell(f"{100 * c.diff + 0.0:+.0f}", c.verdict, title))
        rows.append(tuple(cells))
    return tuple(rows)


def choice_view(summary: CohortSummary, records: Sequence[AttemptRecord]) -> ChoiceView:
    """The "Choosing an agent" section of ``summary`` (rows in its order) over ``records``."""
    by_subject: dict[str, list[AttemptRecord]] = {}
    for r in records:
        by_subject.setdefault(r.subject, []).append(r)
    rows = tuple(subject_choice(s, by_subject.get(s.subject, [])) for s in summary.subjects)
    names = [r.subject for r in rows]
    compact = len(rows) > COMPACT_AFTER
    return ChoiceView(rows=rows, compact=compact, matrix=_matrix(summary, names) if compact else ())


def _tokens(value: float | None) -> str:
    if value is None:
        return DASH
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def markdown_lines(view: ChoiceView, md: Callable[[object], str]) -> list[str]:
    """``summary.md``'s "Choosing an agent" table (``md`` escapes a table cell)."""
    if not view.rows:
        return []
    out = [
        "### Choosing an agent",
        "",
        "| subject | agent and version | official pass rate | cost / cell | tokens / cell (in, out) "
        "| cost from | wall time (median) | limits met |",
        "| --- | --- | --: | --: | --: | --- | --: | --- |",
    ]
    for r in view.rows:
        tokens = f"{_tokens(r.input_per_cell)}, {_tokens(r.output_per_cell)}" if r.tokens_known else DASH
        cells = [
            md(r.subject),  # not bold: the subject table's rows are the ones that start with a bold name
            md(r.agent_text),
            f"{r.official.text} {r.official.interval_text}",
            md(r.cost_text + (" (guess)" if r.guessed else "")),
            tokens,
            md(r.origin.text),
            format_duration(r.wall_median),
            md("; ".join(r.marks.texts) or "none"),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, "", "A cost marked ≈ (guess) is partly estimated; see report.html for the sources.", ""]

"""``maka compare DIR_A DIR_B``: the same cohort run twice (say, before and after a prompt change).

Subjects are matched by name and tasks by id (a changed subject definition has new cell
keys, but it is the same subject to the reader). For each subject present in both runs the
change ``B - A`` is paired by task (:func:`core.stats.compare_paired`), and every task
whose success rate moved is listed. Testing several subjects at once is a family: Holm
adjusts the p-values of the non-reference subjects (:func:`core.stats.adjust_family`);
oracle and nop keep theirs as a check of the tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..core.record_model import AttemptRecord, as_records
from ..core.stats import (
    REFERENCE,
    REFERENCE_KINDS,
    PairedComparison,
    SubjectSummary,
    adjust_family,
    compare_paired,
    graded_by_task,
    strict_by_task,
    summarize,
)
from .formatting import p_text, pct, pp
from .html import environment
from .markdown import md
from .taint import tainted_by_subject

#: Tasks listed per subject (largest changes first).
MAX_TASK_ROWS = 200


@dataclass(frozen=True)
class TaskChange:
    """One task of one subject in both runs."""

    task: str
    rate_a: float | None
    rate_b: float | None
    statuses_a: tuple[str, ...]
    statuses_b: tuple[str, ...]

    @property
    def change(self) -> float | None:
        return None if self.rate_a is None or self.rate_b is None else self.rate_b - self.rate_a


@dataclass(frozen=True)
class SubjectChange:
    """A subject in run A and run B, and the paired change B - A over shared tasks."""

    subject: str
    a: SubjectSummary
    b: SubjectSummary
    paired: PairedComparison
    tasks: tuple[TaskChange, ...]
    #: The same change on every row, any non-pass = 0 (budget exhausted included).
    strict: PairedComparison | None = None
    #: Passes in each run that depended on code the subject changed outside the workdir.
    tainted_a: int = 0
    tainted_b: int = 0

    @property
    def moved(self) -> list[TaskChange]:
        """Tasks whose success rate changed, largest change first."""
        rows = [t for t in self.tasks if t.change]
        return sorted(rows, key=lambda t: (-abs(t.change or 0.0), t.task))


@dataclass(frozen=True)
class RunComparison:
    label_a: str
    label_b: str
    subjects: tuple[SubjectChange, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    cells_a: int
    cells_b: int


def _by_subject(records: Sequence[AttemptRecord]) -> dict[str, list[AttemptRecord]]:
    out: dict[str, list[AttemptRecord]] = {}
    for r in records:
        out.setdefault(r.subject, []).append(r)
    return out


def _statuses(records: Sequence[AttemptRecord]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for r in records:
        out.setdefault(r.task, []).append((r.repetition, r.status.value))
    return {t: tuple(s for _, s in sorted(v)) for t, v in out.items()}


def compare_runs(
    a: Sequence[AttemptRecord | Mapping[str, Any]],
    b: Sequence[AttemptRecord | Mapping[str, Any]],
    *,
    labels: tuple[str, str] = ("A", "B"),
) -> RunComparison:
    """Compare two runs' cell records subject by subject (paired by task)."""
    a, b = as_records(a), as_records(b)
    sa, sb = summarize(a, compare=False), summarize(b, compare=False)
    by_a, by_b = _by_subject(a), _by_subject(b)
    summaries_a = {s.subject: s for s in sa.subjects}
    summaries_b = {s.subject: s for s in sb.subjects}
    names = sorted(by_a.keys() & by_b.keys())
    references = {n for n in names if REFERENCE_KINDS & {summaries_a[n].kind, summaries_b[n].kind}}
    graded = {n: (graded_by_task(by_a[n]), graded_by_task(by_b[n])) for n in names}
    tests = [compare_paired(graded[n][1], graded[n][0], names=(n, n)) for n in names]
    family = adjust_family(tests, references.__contains__)
    every = {n: (strict_by_task(by_a[n]), strict_by_task(by_b[n])) for n in names}
    stricts = adjust_family(
        [compare_paired(every[n][1], every[n][0], names=(n, n)) for n in names], references.__contains__
    )
    changes = []
    for name, paired, strict in zip(names, family, stricts, strict=True):
        ga, gb = graded[name]
        paired = replace(paired, a=labels[1], b=labels[0])
        strict = replace(strict, a=labels[1], b=labels[0])
        st_a, st_b = _statuses(by_a[name]), _statuses(by_b[name])
        tasks = tuple(
            TaskChange(
                task=t,
                rate_a=sum(ga[t]) / len(ga[t]) if ga.get(t) else None,
                rate_b=sum(gb[t]) / len(gb[t]) if gb.get(t) else None,
                statuses_a=st_a.get(t, ()),
                statuses_b=st_b.get(t, ()),
            )
            for t in sorted(st_a.keys() | st_b.keys())
        )
        taint = (tainted_by_subject(by_a[name]).get(name, 0), tainted_by_subject(by_b[name]).get(name, 0))
        changes.append(SubjectChange(name, summaries_a[name], summaries_b[name], paired, tasks, strict, *taint))
    return RunComparison(
        label_a=labels[0],
        label_b=labels[1],
        subjects=tuple(changes),
        only_a=tuple(sorted(by_a.keys() - by_b.keys())),
        only_b=tuple(sorted(by_b.keys() - by_a.keys())),
        cells_a=len(a),
        cells_b=len(b),
    )


def _test(p: PairedComparison) -> str:
    return p.test_text


def adjusted_text(p: PairedComparison) -> str:
    """The Holm-adjusted p, or ``reference, unadjusted`` for oracle and nop."""
    return "reference, unadjusted" if p.family == REFERENCE else p_text(p.p_adjusted, prefix=False)


def weak_lines(result: RunComparison) -> list[str]:
    """Why each weak subject's change is weak, with its power line."""
    return [
        f"{s.subject}: {'; '.join(s.paired.weak_reasons)}" + (f"; {s.paired.power.text}" if s.paired.power else "")
        for s in result.subjects
        if s.paired.weak
    ]


def power_lines(result: RunComparison) -> list[str]:
    """The power line of every subject (the smallest change detectable at its size)."""
    return [f"{s.subject}: {s.paired.power.text}" for s in result.subjects if s.paired.power and s.paired.tasks]


def strict_text(s: SubjectChange) -> str:
    """The strict change with its interval, or a dash."""
    c = s.strict
    if c is None or c.low is None:
        return "-"
    return f"{pp(c.diff)} [{pp(c.low)}, {pp(c.high)}]"


RANKING_NOTE = "ranked on official rows (p (Holm) decides); strict = every row, any non-pass (budget, infra, ...) = 0"


def tainted_lines(result: RunComparison) -> list[str]:
    """One line per subject with tainted passes in either run (counted in the rates above)."""
    return [
        f"{s.subject}: tainted passes {result.label_a} {s.tainted_a}, {result.label_b} {s.tainted_b}"
        " (the verifier ran code the subject changed outside the workdir)"
        for s in result.subjects
        if s.tainted_a or s.tainted_b
    ]


def compare_lines(result: RunComparison) -> list[str]:
    """A fixed-width table for the terminal."""
    header = (
        "subject",
        f"{result.label_a} official",
        f"{result.label_b} official",
        "change (B - A)",
        "95% CI",
        "p",
        "p (Holm)",
        "better/worse/same",
        "tasks",
        "strict change [95% CI]",
    )
    rows = []
    for s in result.subjects:
        p = s.paired
        rows.append(
            (
                s.subject,
                s.a.official.text,
                s.b.official.text,
                pp(p.diff),
                f"[{pp(p.low)}, {pp(p.high)}]" if p.low is not None else "-",
                p_text(p.p_value),
                adjusted_text(p),
                f"{p.wins_a}/{p.wins_b}/{p.ties}",
                str(p.tasks),
                strict_text(s),
            )
        )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for label, names in ((result.label_a, result.only_a), (result.label_b, result.only_b)):
        if names:
            lines.append(f"only in {label}: {', '.join(names)}")
    lines.append(RANKING_NOTE)
    lines += tainted_lines(result)
    weak = weak_lines(result)
    if weak:
        lines += ["weak comparisons:", *(f"  {w}" for w in weak)]
    power = power_lines(result)
    if power:
        lines += ["power (two-sided 0.05, 80%):", *(f"  {w}" for w in power)]
    return lines


def render_compare_markdown(result: RunComparison) -> str:
    """``compare.md``: the per-subject change table and the tasks that moved."""
    out = [
        f"## pytest-maka compare: {md(result.label_a)} → {md(result.label_b)}",
        "",
        f"**{result.cells_a}** cells in {md(result.label_a)} · **{result.cells_b}** cells in {md(result.label_b)}",
        "",
        f"| subject | {md(result.label_a)} official | {md(result.label_b)} official | change (B - A) | 95% CI "
        "| p | p (Holm) | tasks better / worse / same | strict change [95% CI] | test |",
        "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --- |",
    ]
    for s in result.subjects:
        p = s.paired
        ci = f"[{pp(p.low)}, {pp(p.high)}]" if p.low is not None else "-"
        out.append(
            f"| **{md(s.subject)}** | {s.a.official.text} | {s.b.official.text} | {pp(p.diff)} | {ci} | "
            f"{p_text(p.p_value)} | {adjusted_text(p)} | {p.wins_a} / {p.wins_b} / {p.ties} | {strict_text(s)} | "
            f"{md(_test(p))} |"
        )
    out += ["", f"**Ranking:** {md(RANKING_NOTE)}.", ""]
    out += [f"**Tainted:** {md(t)}" for t in tainted_lines(result)] + ([""] if tainted_lines(result) else [])
    weak = weak_lines(result)
    if weak:
        out += ["**Weak:** few shared or differing tasks, or unequal repetitions in the two runs.", ""]
        out += [f"- {md(w)}" for w in weak] + [""]
    power = power_lines(result)
    if power:
        out += ["**Power** (two-sided 0.05, 80%):", ""] + [f"- {md(w)}" for w in power] + [""]
    for label, names in ((result.label_a, result.only_a), (result.label_b, result.only_b)):
        if names:
            out += [f"Only in {md(label)}: " + ", ".join(md(n) for n in names), ""]
    for s in result.subjects:
        moved = s.moved
        if not moved:
            continue
        out += [
            f"### {md(s.subject)}: {len(moved)} tasks changed",
            "",
            f"| task | {md(result.label_a)} | {md(result.label_b)} | change |",
            "| --- | --: | --: | --: |",
        ]
        for t in moved[:MAX_TASK_ROWS]:
            out.append(f"| {md(t.task)} | {pct(t.rate_a)} | {pct(t.rate_b)} | {pp(t.change)} |")
        out.append("")
    return "\n".join(out)


def render_compare_html(result: RunComparison) -> str:
    """``compare.html``: the same content, self-contained, with the statuses of every changed task."""
    return (
        environment()
        .get_template("compare.html.j2")
        .render(
            r=result,
            generated=datetime.now(tz=UTC).isoformat(timespec="seconds"),
            max_rows=MAX_TASK_ROWS,
            test=_test,
            adjusted=adjusted_text,
            weak=weak_lines(result),
            power=power_lines(result),
            strict=strict_text,
            ranking=RANKING_NOTE,
            tainted=tainted_lines(result),
        )
    )

"""``maka compare DIR_A DIR_B``: the views (terminal, ``compare.md``, ``compare.html``) of two runs' change.

What is computed (paired change per subject, strict and score views, Holm) is
:mod:`.compare_data`; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..core.stats import REFERENCE, PairedComparison, ScoreMean
from .compare_data import RunComparison, ScoreChange, SubjectChange, TaskChange, compare_runs
from .formatting import DASH, p_text, pct, pp
from .html import environment
from .markdown import md

__all__ = [
    "RunComparison",
    "ScoreChange",
    "SubjectChange",
    "TaskChange",
    "compare_lines",
    "compare_runs",
    "render_compare_html",
    "render_compare_markdown",
]

#: Tasks listed per subject (largest changes first).
MAX_TASK_ROWS = 200


def _test(p: PairedComparison) -> str:
    return p.test_text


def adjusted_text(p: PairedComparison) -> str:
    """The Holm-adjusted p, or ``reference, unadjusted`` for oracle and nop."""
    return "reference, unadjusted" if p.family == REFERENCE else p_text(p.p_adjusted, prefix=False)


def _views(result: RunComparison) -> list[tuple[str, PairedComparison]]:
    """Each subject's pass-rate change, then (partial credit) its score change, named for the lists below."""
    out = [(s.subject, s.paired) for s in result.subjects]
    return out + [(f"{s.subject} (score)", s.score.paired) for s in result.subjects if s.score is not None]


def weak_lines(result: RunComparison) -> list[str]:
    """Why each weak change is weak, with its power line."""
    return [
        f"{name}: {'; '.join(c.weak_reasons)}" + (f"; {c.power.text}" if c.power else "")
        for name, c in _views(result)
        if c.weak
    ]


def power_lines(result: RunComparison) -> list[str]:
    """The power line of every change (the smallest change detectable at its size)."""
    return [f"{name}: {c.power.text}" for name, c in _views(result) if c.power and c.tasks]


def score_diff_text(c: PairedComparison) -> str:
    """A mean-score change with its interval (``+0.120 [+0.051, +0.190]``), or a dash."""
    if c.diff is None or c.low is None or c.high is None:
        return DASH
    return f"{c.diff:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"


def score_mean_text(m: ScoreMean | None) -> str:
    """A mean score with its interval, or a dash (no scored row in that run)."""
    return DASH if m is None else m.text


SCORE_NOTE = (
    "score change = mean score per task (official rows; a row without a score counts its pass as 1) "
    "in B minus A, paired by task, Holm over the non-reference subjects; the pass rates count only a score of 1"
)


def score_rows(result: RunComparison) -> list[tuple[str, ...]]:
    """Subject, mean score in A and in B, change [95% CI], p, p (Holm), better/worse/same, tasks."""
    return [
        (
            s.subject,
            score_mean_text(s.score.a),
            score_mean_text(s.score.b),
            score_diff_text(s.score.paired),
            p_text(s.score.paired.p_value),
            adjusted_text(s.score.paired),
            f"{s.score.paired.wins_a}/{s.score.paired.wins_b}/{s.score.paired.ties}",
            str(s.score.paired.tasks),
        )
        for s in result.subjects
        if s.score is not None
    ]


def _fixed(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


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
    lines = _fixed(header, rows)
    scores = score_rows(result)
    if scores:
        head = ("subject", f"{result.label_a} mean score", f"{result.label_b} mean score", "score change [95% CI]")
        lines += ["", "partial credit:", *_fixed((*head, "p", "p (Holm)", "better/worse/same", "tasks"), scores)]
        lines += [SCORE_NOTE, ""]
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
    scores = [(s.subject, s.score) for s in result.subjects if s.score is not None]
    if scores:
        out += [
            "### Score change (partial credit)",
            "",
            f"| subject | {md(result.label_a)} mean score | {md(result.label_b)} mean score | score change (B - A) "
            "[95% CI] | p | p (Holm) | tasks better / worse / same | test |",
            "| --- | --: | --: | --: | --: | --: | --: | --- |",
        ]
        for name, score in scores:
            c = score.paired
            out.append(
                f"| **{md(name)}** | {score_mean_text(score.a)} | {score_mean_text(score.b)} | {score_diff_text(c)} | "
                f"{p_text(c.p_value)} | {adjusted_text(c)} | {c.wins_a} / {c.wins_b} / {c.ties} | {md(_test(c))} |"
            )
        out += ["", f"{md(SCORE_NOTE[0].upper() + SCORE_NOTE[1:])}.", ""]
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
            score_note=SCORE_NOTE[0].upper() + SCORE_NOTE[1:],
        )
    )

"""``summary.md``: the per-subject headline table in GitHub-flavoured markdown."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.record_model import AttemptRecord
from ..core.stats import CLUSTER, REFERENCE, REFERENCE_KINDS, CohortSummary, PairedComparison
from ..core.taxonomy import MEANING, OFFICIAL, Status
from .agents import choice_view
from .agents import markdown_lines as choice_lines
from .egress import RefusedRow
from .egress import markdown_lines as egress_lines
from .formatting import DASH, estimate, money, p_text, pp
from .steps import markdown_lines as step_lines
from .taint import taint_lines
from .terminal import few_tasks_line, format_cost, format_duration, ranking_line, rate_weak_lines, weak_line

#: At most this many flagged tasks are listed in full.
MAX_HEALTH_ROWS = 50
#: At most this many pairwise comparisons are listed.
MAX_COMPARISONS = 45
#: At most this many task names are listed per pair and side (won / lost).
MAX_TASK_NAMES = 20

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!~])")


def md(text: object) -> str:
    """Escape text for a markdown table cell (no raw HTML, no pipes, one line)."""
    flat = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", flat).replace("&", "&amp;")


def pass_k_lines(summary: CohortSummary) -> list[str]:
    """The pass@k / pass^k table, when any subject has repetitions."""
    ks = sorted({e.k for s in summary.subjects for e in s.pass_k})
    if not ks:
        return []
    out = [
        "### pass@k and pass^k",
        "",
        "| subject | " + " | ".join(f"pass@{k}" for k in ks) + " | " + " | ".join(f"pass^{k}" for k in ks) + " |",
        "| --- |" + " --: |" * (2 * len(ks)),
    ]
    for s in summary.subjects:
        by_k = {e.k: e for e in s.pass_k}
        at = [estimate(e.pass_at, e.pass_at_low, e.pass_at_high) if (e := by_k.get(k)) else DASH for k in ks]
        hat = [estimate(e.pass_hat, e.pass_hat_low, e.pass_hat_high) if (e := by_k.get(k)) else DASH for k in ks]
        out.append(f"| {md(s.subject)} | " + " | ".join(at + hat) + " |")
    weak = pass_k_weak(summary)
    return [
        *out,
        "",
        *([f"**Weak:** {md(weak)}.", ""] if weak else []),
        "Unbiased estimators over official rows, averaged over tasks with at least k samples (every task once); "
        "95% score intervals over tasks with the t(tasks - 1) critical value.",
        "",
    ]


def _adjusted(c: PairedComparison) -> str:
    return "reference, unadjusted" if c.family == REFERENCE else p_text(c.p_adjusted, prefix=False)


def _ci(c: PairedComparison | None) -> str:
    return DASH if c is None or c.low is None else f"[{pp(c.low)}, {pp(c.high)}]"


def task_names(names: tuple[str, ...], limit: int = MAX_TASK_NAMES) -> str:
    """``a, b, c`` (``… +N`` past ``limit``), or an en dash."""
    if not names:
        return DASH
    shown = ", ".join(md(n) for n in names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def pass_k_weak(summary: CohortSummary) -> str | None:
    """The pass@k / pass^k figures of non-reference subjects with at most 3 tasks away from 0 or 1."""
    found = [
        f"{s.subject} {name}{e.k}"
        for s in summary.subjects
        if s.kind not in REFERENCE_KINDS
        for e in s.pass_k
        for name, weak in (("pass@", e.pass_at_weak), ("pass^", e.pass_hat_weak))
        if weak
    ]
    if not found:
        return None
    return "at most 3 tasks away from 0 or 1, the interval next to the bound is approximate: " + ", ".join(found)


def comparison_lines(summary: CohortSummary, limit: int = MAX_COMPARISONS) -> list[str]:
    """Paired comparisons of every two subjects (A - B on shared tasks), official and strict, with power."""
    rows = [c for c in summary.comparisons if c.tasks][:limit]
    if not rows:
        return []
    out = [
        "### Paired comparisons",
        "",
        f"**Ranking:** {md(ranking_line(summary))}.",
        "",
        "| A | B | tasks | A - B | 95% CI | p | p (Holm) | wins A / B / ties | strict A - B | strict 95% CI "
        "| strict p (Holm) | test |",
        "| --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- |",
    ]
    for c in rows:
        strict = summary.strict_of(c)
        out.append(
            f"| {md(c.a)} | {md(c.b)} | {c.tasks} | {pp(c.diff)} | {_ci(c)} | "
            f"{p_text(c.p_value, prefix=False)} | {_adjusted(c)} | "
            f"{c.wins_a} / {c.wins_b} / {c.ties} | {pp(strict.diff if strict else None)} | {_ci(strict)} | "
            f"{_adjusted(strict) if strict and strict.tasks else DASH} | {md(c.test_text)} |"
        )
    out += [
        "",
        "A pair is significant when p (Holm) < 0.05; its interval excludes 0 exactly then. Holm adjusts over the "
        "pairs of non-reference subjects; pairs with a reference subject (oracle, nop) check the tasks and keep "
        "their unadjusted p. A - B is the mean over shared tasks of the per-task rate difference (every task "
        "counts once). Strict: every row, any non-pass (budget exhausted, infra, ...) counted as 0.",
        "",
    ]
    warning = weak_line(summary)
    if warning:
        out += [f"**Weak:** {md(warning)}.", ""]
        out += [f"- {md(c.a)} vs {md(c.b)}: {md('; '.join(c.weak_reasons))}" for c in rows if c.weak]
        out.append("")
    out += [
        "**Power** (two-sided 0.05, 80% power; an even result below the detectable size is not evidence "
        "of no difference):",
        "",
    ]
    out += [f"- {md(c.a)} vs {md(c.b)}: {md(c.power.text)}" for c in rows if c.power is not None]
    out += ["", "<details><summary>Tasks each side won</summary>", ""]
    out += ["| A | B | tasks A won | tasks B won |", "| --- | --- | --- | --- |"]
    out += [f"| {md(c.a)} | {md(c.b)} | {task_names(c.won)} | {task_names(c.lost)} |" for c in rows]
    out += ["", "</details>", ""]
    return out + score_comparison_lines(summary, limit)


def score_comparison_lines(summary: CohortSummary, limit: int = MAX_COMPARISONS) -> list[str]:
    """Paired mean-score differences, when some task gives partial credit."""
    rows = [c for c in summary.score_comparisons if c.tasks][:limit]
    if not rows:
        return []
    out = [
        "### Paired score differences (partial credit)",
        "",
        "| A | B | tasks | A - B (score) | 95% CI | p | p (Holm) | wins A / B / ties | test |",
        "| --- | --- | --: | --: | --: | --: | --: | --: | --- |",
    ]
    for c in rows:
        out.append(
            f"| {md(c.a)} | {md(c.b)} | {c.tasks} | {c.diff:+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | "
            f"{p_text(c.p_value, prefix=False)} | {_adjusted(c)} | {c.wins_a} / {c.wins_b} / {c.ties} | "
            f"{md(c.test_text)} |"
        )
    return [
        *out,
        "",
        "Mean score per task (official rows), paired by task; the pass rate counts only a score of exactly 1.",
        "",
    ]


def variance_lines(summary: CohortSummary) -> list[str]:
    """Per subject with repetitions: between- vs within-task variance and what more runs would buy."""
    rows = [s for s in summary.subjects if s.variance is not None]
    if not rows:
        return []
    out = [
        "### Where the uncertainty comes from",
        "",
        "| subject | between tasks | within a task | ± now | ± twice the repetitions | ± twice the tasks |",
        "| --- | --: | --: | --: | --: | --: |",
    ]
    for s in rows:
        v = s.variance
        assert v is not None
        out.append(
            f"| {md(s.subject)} | {v.between:.3f} ({100 * v.between_share:.0f}%) | {v.within:.3f} | "
            f"{196 * v.now:.1f} pp | {196 * v.more_repetitions:.1f} pp | {196 * v.more_tasks:.1f} pp |"
        )
    return [
        *out,
        "",
        "Variance of the task-weighted rate = between / tasks + within / (tasks x repetitions); ± is the 95% "
        "half-width (1.96 standard errors). More repetitions shrink only the within-task part.",
        "",
    ]


def render_markdown(
    summary: CohortSummary,
    *,
    cohort: str,
    meta: Mapping[str, Any] | None = None,
    refused: list[RefusedRow] | None = None,
    records: Sequence[AttemptRecord] | None = None,
) -> str:
    """The whole ``summary.md`` text (``records``: the cells, for the steps of multi-step ones)."""
    present = [s for s in Status if summary.counts[s]]
    out: list[str] = [f"## pytest-maka: {md(cohort)}", ""]
    facts = [
        f"**{summary.cells}** cells",
        f"**{len(summary.tasks)}** tasks",
        f"**{len(summary.subjects)}** subjects",
    ]
    run_time = (meta or {}).get("run_time")
    if run_time:
        facts.append(f"run {md(run_time)}")
    out += [" · ".join(facts), ""]

    scored = summary.partial_credit
    header = ["subject", "official pass rate", "95% CI", "strict pass rate", "95% CI"]
    header += ["mean score [95% CI]"] if scored else []
    header += present
    header += ["cost", "cost / success", "median duration"]
    out.append("| " + " | ".join(f"`{h}`" if isinstance(h, Status) else h for h in header) + " |")
    out.append("| " + " | ".join(["---", *["--:"] * (len(header) - 1)]) + " |")
    for s in summary.subjects:
        row = [
            f"**{md(s.subject)}**" + (f" ({md(s.kind)})" if s.kind else ""),
            s.official.text,
            s.official.interval_text,
            s.strict.text,
            s.strict.interval_text,
            *([s.score.text if s.score else DASH] if scored else []),
            *[str(s.counts[c]) for c in present],
            md(format_cost(s)),
            md(money(s.spend.cost_per_success)),
            format_duration(s.durations.median if s.durations else None),
        ]
        out.append("| " + " | ".join(row) + " |")
    clustered = any(CLUSTER in (s.official.method, s.strict.method) for s in summary.subjects)
    out += [
        "",
        "Official pass rate counts official rows only ("
        + ", ".join(f"`{s}`" for s in Status if s in OFFICIAL)
        + "); strict pass rate counts every cell, any non-pass as 0. 95% CI: "
        + (
            "cluster-robust over tasks (repetitions of a task are one cluster; Miller 2024), "
            "as a score interval with the t(tasks - 1) critical value."
            if clustered
            else "Wilson score interval, exact (Clopper-Pearson) on a side with at most 3 successes or failures."
        )
        + " Both rates pool rows (passes over rows); pass@k and the paired comparisons weight every task once."
        + " The official rows rank the subjects; the strict view stands beside them."
        + (" Mean score: official rows, a task's repetitions one cluster." if scored else ""),
        "",
    ]
    few = few_tasks_line(summary)
    if few:
        out += [f"**Weak:** {md(few)}.", ""]
    out += [f"**Weak rate:** {md(w)}." for w in rate_weak_lines(summary)]
    out += [""] if rate_weak_lines(summary) else []
    out += choice_lines(choice_view(summary, records or []), md)
    out += pass_k_lines(summary) + variance_lines(summary) + comparison_lines(summary)
    out += egress_lines(refused or [], md)

    if summary.health:
        out += [f"### Task health ({len(summary.health)} flagged)", ""]
        out += ["| task | flag | why |", "| --- | --- | --- |"]
        for health in list(summary.health.values())[:MAX_HEALTH_ROWS]:
            for flag in health.flags:
                out.append(f"| {md(health.task)} | {md(flag.value)} | {md(health.reasons.get(flag, ''))} |")
        if len(summary.health) > MAX_HEALTH_ROWS:
            more = len(summary.health) - MAX_HEALTH_ROWS
            out.append(f"\n… and {more} more flagged tasks (see report.html).")
        out.append("")

    out += taint_lines(records or [], md)
    out += step_lines(records or [], md)
    if present:
        out += ["<details><summary>Classes</summary>", ""]
        out += [f"- `{s}` ({summary.counts[s]}): {md(MEANING[s])}" for s in present]
        out += ["", "</details>", ""]
    return "\n".join(out)

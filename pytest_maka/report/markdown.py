"""``summary.md``: the per-subject headline table in GitHub-flavoured markdown."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.stats import CLUSTER, REFERENCE, CohortSummary
from ..core.taxonomy import MEANING, OFFICIAL, Status
from .egress import RefusedRow
from .egress import markdown_lines as egress_lines
from .formatting import DASH, estimate, money, p_text, pp
from .steps import markdown_lines as step_lines
from .taint import taint_lines
from .terminal import few_tasks_line, format_cost, format_duration, weak_line

#: At most this many flagged tasks are listed in full.
MAX_HEALTH_ROWS = 50
#: At most this many pairwise comparisons are listed.
MAX_COMPARISONS = 45

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
    return [
        *out,
        "",
        "Unbiased estimators over official rows, averaged over tasks with at least k samples; "
        "95% score intervals over tasks with the t(tasks - 1) critical value.",
        "",
    ]


def comparison_lines(summary: CohortSummary, limit: int = MAX_COMPARISONS) -> list[str]:
    """Paired comparisons of every two subjects (A - B on shared tasks), and the weak-comparison lines."""
    rows = [c for c in summary.comparisons if c.tasks][:limit]
    if not rows:
        return []
    out = [
        "### Paired comparisons",
        "",
        "| A | B | tasks | A - B | 95% CI | p | p (Holm) | wins A / B / ties | test |",
        "| --- | --- | --: | --: | --: | --: | --: | --: | --- |",
    ]
    for c in rows:
        adjusted = "reference, unadjusted" if c.family == REFERENCE else p_text(c.p_adjusted, prefix=False)
        out.append(
            f"| {md(c.a)} | {md(c.b)} | {c.tasks} | {pp(c.diff)} | [{pp(c.low)}, {pp(c.high)}] | "
            f"{p_text(c.p_value, prefix=False)} | {adjusted} | "
            f"{c.wins_a} / {c.wins_b} / {c.ties} | {md(c.test_text)} |"
        )
    out += [
        "",
        "A pair is significant when p (Holm) < 0.05. Holm adjusts over the pairs of non-reference subjects; "
        "pairs with a reference subject (oracle, nop) check the tasks and keep their unadjusted p.",
        "",
    ]
    warning = weak_line(summary)
    if warning:
        out += [f"**Weak:** {md(warning)}.", ""]
        out += [f"- {md(c.a)} vs {md(c.b)}: {md(c.power.text)}" for c in rows if c.weak and c.power is not None]
        out.append("")
    return out


def render_markdown(
    summary: CohortSummary,
    *,
    cohort: str,
    meta: Mapping[str, Any] | None = None,
    refused: list[RefusedRow] | None = None,
    records: list[Mapping[str, Any]] | None = None,
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

    header = ["subject", "official pass rate", "95% CI", "strict pass rate", "95% CI", *present]
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
            else "Wilson score interval."
        ),
        "",
    ]
    few = few_tasks_line(summary)
    if few:
        out += [f"**Weak:** {md(few)}.", ""]
    out += pass_k_lines(summary) + comparison_lines(summary) + egress_lines(refused or [], md)

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

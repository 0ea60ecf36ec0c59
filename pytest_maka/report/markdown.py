"""``summary.md``: the per-subject headline table in GitHub-flavoured markdown."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.stats import CohortSummary
from ..core.taxonomy import MEANING, OFFICIAL, Status
from .terminal import format_cost, format_duration

#: At most this many flagged tasks are listed in full.
MAX_HEALTH_ROWS = 50

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!~])")


def md(text: object) -> str:
    """Escape text for a markdown table cell (no raw HTML, no pipes, one line)."""
    flat = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", flat).replace("&", "&amp;")


def render_markdown(summary: CohortSummary, *, cohort: str, meta: Mapping[str, Any] | None = None) -> str:
    """The whole ``summary.md`` text."""
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

    header = ["subject", "official pass rate", "95% CI", "strict pass rate", *present]
    header += ["cost", "mean duration"]
    out.append("| " + " | ".join(f"`{h}`" if isinstance(h, Status) else h for h in header) + " |")
    align = ["---", "--:", "--:", "--:", *["--:"] * len(present), "--:", "--:"]
    out.append("| " + " | ".join(align) + " |")
    for s in summary.subjects:
        row = [
            f"**{md(s.subject)}**" + (f" ({md(s.kind)})" if s.kind else ""),
            s.official.text,
            s.official.interval_text,
            s.strict.text,
            *[str(s.counts[c]) for c in present],
            md(format_cost(s)),
            format_duration(s.mean_duration_s),
        ]
        out.append("| " + " | ".join(row) + " |")
    out += [
        "",
        "Official pass rate counts official rows only ("
        + ", ".join(f"`{s}`" for s in Status if s in OFFICIAL)
        + "); strict pass rate counts every cell, any non-pass as 0. 95% CI: Wilson score interval.",
        "",
    ]

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

    if present:
        out += ["<details><summary>Classes</summary>", ""]
        out += [f"- `{s}` ({summary.counts[s]}): {md(MEANING[s])}" for s in present]
        out += ["", "</details>", ""]
    return "\n".join(out)

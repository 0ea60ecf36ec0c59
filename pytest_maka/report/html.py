"""``report.html``: one self-contained page (inline CSS/JS, no network) derived from cell records.

Everything a subject wrote is untrusted: artifact files are read only below the output
directory, never through a symlink, capped to a short tail, stripped of terminal escapes,
and HTML-escaped by the template (Jinja2 autoescape).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import jinja2

from .. import __version__
from ..core.stats import CohortSummary, status_of
from ..core.taxonomy import MEANING, OFFICIAL, PYTEST_OUTCOME, Status
from .terminal import format_cost, format_duration

TEMPLATE = "report.html.j2"
TEMPLATES_DIR = Path(__file__).with_name("templates")

#: Bytes of each artifact's tail inlined in a drill-down.
TAIL_BYTES = 2048
DASH = "\u2013"
#: Bytes of artifact text inlined in the whole page; failing cells get theirs first.
INLINE_BUDGET_BYTES = 4 * 1024 * 1024
#: Characters of the error message shown in the row (the drill-down has more).
ROW_ERROR_CHARS = 160
DRILL_TEXT_CHARS = 4096

#: Artifact keys whose tails are shown in the drill-down, with their labels.
SUBJECT_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (
    ("agent_log", "subject output"),
    ("stdout", "subject stdout"),
    ("stderr", "subject stderr"),
)
VERIFIER_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (("verifier_output", "verifier output"),)

#: Background and text colour of each class (cells, badges, legend).
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

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def safe_rel_path(value: object) -> str | None:
    """A clean relative POSIX path below the output directory, or None if it is anything else."""
    if not isinstance(value, str) or not value or "\x00" in value or "\\" in value:
        return None
    if value.startswith("/") or _SCHEME.match(value):
        return None
    parts = PurePosixPath(value).parts
    if not parts or any(p in ("..", "") for p in parts):
        return None
    return PurePosixPath(*parts).as_posix()


def clean_text(text: str) -> str:
    """Terminal output made readable: no escape sequences, carriage-return overwrites applied."""
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return _CONTROL.sub("\ufffd", "\n".join(lines))


def read_tail(out_dir: Path, rel: str, limit: int = TAIL_BYTES) -> str | None:
    """The last ``limit`` bytes of a regular file at ``out_dir/rel`` as text, or None.

    Refuses symlinks anywhere below ``out_dir`` and anything that is not a regular file.
    """
    safe = safe_rel_path(rel)
    if safe is None:
        return None
    current = Path(out_dir)
    try:
        for part in PurePosixPath(safe).parts:
            current = current / part
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        fd = os.open(current, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        skipped = max(0, info.st_size - limit)
        os.lseek(fd, skipped, os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = clean_text(data.decode("utf-8", errors="replace"))
    if skipped:
        text = text.split("\n", 1)[-1] if "\n" in text[:200] else text
        text = f"[... {skipped:,} earlier bytes not shown]\n" + text
    return text


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_score(score: object) -> str:
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return DASH
    return f"{score:.3g}"


def error_text(record: Mapping[str, Any]) -> str:
    """``Type: message`` of a record's error, or the empty string."""
    err = record.get("error") or {}
    if not isinstance(err, Mapping):
        return str(err)
    kind, msg = str(err.get("type") or ""), str(err.get("message") or "")
    return f"{kind}: {msg}" if kind and msg else kind or msg


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
        facts.append((str(key), _cap(text, 500)))
    return facts


@dataclass
class CellView:
    """What one row of the per-cell table shows."""

    anchor: str
    record: Mapping[str, Any]
    status: Status
    error: str
    links: list[tuple[str, str]]
    drill: list[tuple[str, str]] = field(default_factory=list)
    withheld: bool = False

    @property
    def row_error(self) -> str:
        return _cap(self.error, ROW_ERROR_CHARS)


def _links(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    artifacts = record.get("artifacts") or {}
    out = []
    for key, value in artifacts.items() if isinstance(artifacts, Mapping) else ():
        rel = safe_rel_path(value)
        if rel is not None:
            out.append((str(key), quote(rel)))
    return out


def _drill(view: CellView, out_dir: Path | None, budget: list[int]) -> None:
    """Fill a cell's drill-down; artifact tails come out of the shared ``budget``."""
    record = view.record
    if len(view.error) > ROW_ERROR_CHARS:
        view.drill.append(("error", _cap(view.error, DRILL_TEXT_CHARS)))
    history = record.get("attempts") or []
    if len(history) > 1:
        lines = [f"attempt {a.get('attempt')}: {a.get('status')}  {error_text(a)}".rstrip() for a in history]
        view.drill.append(("attempts", _cap("\n".join(_cap(line, 300) for line in lines), DRILL_TEXT_CHARS)))
    verifier = {k: v for k, v in (record.get("verifier") or {}).items() if not isinstance(v, (dict, list))}
    if verifier:
        view.drill.append(("verifier", _cap("  ".join(f"{k}={v}" for k, v in verifier.items()), 1000)))
    if record.get("subject_claim") is not None:
        claim = json.dumps(record["subject_claim"], ensure_ascii=False, default=str, indent=1)
        view.drill.append(("subject's claim (not authoritative)", _cap(claim, TAIL_BYTES)))
    artifacts = record.get("artifacts") or {}
    if out_dir is None or not isinstance(artifacts, Mapping):
        return
    for key, label in (*SUBJECT_OUTPUT_KEYS, *VERIFIER_OUTPUT_KEYS):
        rel = artifacts.get(key)
        if not rel:
            continue
        if budget[0] <= 0:
            view.withheld = True
            continue
        text = read_tail(out_dir, rel, min(TAIL_BYTES, budget[0]))
        if text is not None:
            budget[0] -= len(text.encode("utf-8", errors="replace"))
            view.drill.append((f"{label} (tail)", text))


def cell_views(records: Sequence[Mapping[str, Any]], out_dir: Path | None) -> list[CellView]:
    """Rows for the per-cell table, sorted by task, subject, repetition.

    Artifact tails are read for failing cells first, then passing ones, until the page
    budget is spent; later cells keep their links but get no inlined text.
    """
    ordered = sorted(records, key=lambda r: (str(r["task"]), str(r["subject"]), r.get("repetition") or 0))
    views = [
        CellView(anchor=f"c{i}", record=r, status=status_of(r), error=error_text(r), links=_links(r))
        for i, r in enumerate(ordered)
    ]
    budget = [INLINE_BUDGET_BYTES]
    for view in sorted(views, key=lambda v: v.status is Status.AGENT_SUCCESS):
        _drill(view, out_dir, budget)
    return views


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = format_duration
    env.filters["score"] = format_score
    env.filters["cost"] = lambda s: DASH if s.cost_usd is None else format_cost(s)
    return env


def render_html(
    summary: CohortSummary,
    records: Sequence[Mapping[str, Any]],
    *,
    cohort: str,
    out_dir: Path | None = None,
    meta: Mapping[str, Any] | None = None,
) -> str:
    """The whole ``report.html`` text. ``out_dir`` is where artifact paths are resolved."""
    meta = dict(meta or {})
    cells = cell_views(records, out_dir)
    anchors = {id(v.record): v.anchor for v in cells}
    present = [s for s in Status if summary.counts[s]]
    return _environment().get_template(TEMPLATE).render(
        cohort=cohort,
        run_time=meta.get("run_time"),
        out_dir=str(out_dir) if out_dir is not None else None,
        generated=datetime.now(tz=UTC).isoformat(timespec="seconds"),
        facts=header_facts(meta),
        summary=summary,
        present=present,
        cells=cells,
        anchor_of=lambda r: anchors.get(id(r), ""),
        statuses=list(Status),
        colours=CLASS_COLOURS,
        meaning=MEANING,
        official=OFFICIAL,
        pytest_outcome=PYTEST_OUTCOME,
        success=Status.AGENT_SUCCESS,
        version=__version__,
    )

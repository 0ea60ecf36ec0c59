"""Derived views of a cohort's cell records: ``report.html``, ``summary.md`` and the terminal table.

The records (``results.jsonl``) are the truth; every view here is rebuilt from them and
written atomically, so a reader never sees a half-written report. Views read them typed
(``core.record_model.AttemptRecord``); an entry point handed JSON dicts types them first.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.record_model import AttemptRecord, as_records
from ..core.stats import summarize
from .egress import refused_rows
from .html import INCLUDED_TEMPLATES, TEMPLATE, environment, render_html
from .markdown import render_markdown
from .terminal import format_duration, terminal_lines

HTML_FILE = "report.html"
MARKDOWN_FILE = "summary.md"

__all__ = ["HTML_FILE", "MARKDOWN_FILE", "run_window", "terminal_lines", "warm", "write_atomic", "write_views"]


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temp file in the same directory and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _parse(ts: object) -> datetime | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return None


def run_window(records: Sequence[AttemptRecord | Mapping[str, Any]]) -> str | None:
    """``<first start> → <last finish> (wall 4m05s)`` over the records (or one meta dict), or None."""
    typed = [r for r in records if isinstance(r, AttemptRecord)]
    meta = [r for r in records if not isinstance(r, AttemptRecord)]
    return _window(
        [r.started_at for r in typed] + [m.get("started_at") for m in meta],
        [r.finished_at for r in typed] + [m.get("finished_at") for m in meta],
    )


def _window(started: Iterable[object], finished: Iterable[object]) -> str | None:
    starts = [t for t in map(_parse, started) if t is not None]
    ends = [t for t in map(_parse, finished) if t is not None]
    if not starts or not ends:
        return None
    try:
        first, last = min(starts), max(ends)
        wall_s = (last - first).total_seconds()
    except TypeError:  # naive and aware timestamps mixed: no honest window
        return None
    wall = format_duration(max(0.0, wall_s))
    return f"{first.isoformat(timespec='seconds')} → {last.isoformat(timespec='seconds')} (wall {wall})"


def warm() -> None:
    """Compile the report's templates now, with the ones it includes (a cohort run does this
    while its cells run, see the reporter); Jinja keeps them compiled for the render."""
    env = environment()
    for name in (TEMPLATE, *INCLUDED_TEMPLATES):
        env.get_template(name)


def write_views(
    out_dir: Path, records: Sequence[AttemptRecord | Mapping[str, Any]], *, cohort: str, meta: dict | None = None
) -> dict[str, Path]:
    """Write ``report.html`` and ``summary.md`` into ``out_dir``; return ``{"html": ..., "markdown": ...}``.

    ``meta`` is shown in the report header (key: value, nested values flattened). Its
    ``run_time`` entry, when absent, is derived from meta's ``started_at``/``finished_at``,
    else from the records' timestamps.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = as_records(records)
    info: dict[str, Any] = dict(meta or {})
    if not info.get("run_time"):
        window = run_window([info]) or run_window(records)
        if window:
            info["run_time"] = window
        else:
            info.pop("run_time", None)
    summary = summarize(records)
    refused = refused_rows(records)
    html = render_html(summary, records, cohort=cohort, out_dir=out_dir, meta=info, refused=refused)
    markdown = render_markdown(summary, cohort=cohort, meta=info, refused=refused, records=records)
    return {
        "html": write_atomic(out_dir / HTML_FILE, html),
        "markdown": write_atomic(out_dir / MARKDOWN_FILE, markdown),
    }

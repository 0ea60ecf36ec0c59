"""Reading what a subject left behind, safely: tails and heads of artifact files, trajectories.

Everything a subject wrote is untrusted: files are read only below the output directory,
never through a symlink, only when regular, capped in size, and stripped of terminal
escapes. Escaping for HTML is the renderer's job.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..core import subject_json

#: Bytes of each artifact's tail inlined in a drill-down.
TAIL_BYTES = 2048
#: Bytes of a workspace diff (read from its start) and of a trajectory file read at most.
DIFF_BYTES = 4096
TRAJECTORY_FILE_BYTES = 2 * 1024 * 1024
#: Trajectory steps kept (the first few and the last ones) and characters per field.
TRAJECTORY_HEAD_STEPS = 3
TRAJECTORY_TAIL_STEPS = 22
STEP_TEXT_CHARS = 600

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def safe_rel_path(value: object) -> str | None:
    """A clean relative POSIX path below the output directory, or None if it is anything else."""
    if not isinstance(value, str) or not value or "\x00" in value or "\\" in value:
        return None
    if value.startswith("/") or _SCHEME.match(value):
        return None
    parts = [p for p in value.split("/") if p not in ("", ".")]  # as PurePosixPath(value).parts
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def clean_text(text: str) -> str:
    """Terminal output made readable: no escape sequences, carriage-return overwrites applied."""
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return _CONTROL.sub("\ufffd", "\n".join(lines))


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _open_below(out_dir: Path, rel: str) -> int | None:
    """A read-only fd of the regular file ``out_dir/rel``; None for symlinks, non-files, escapes."""
    safe = safe_rel_path(rel)
    if safe is None:
        return None
    current = os.fspath(out_dir)
    try:
        for part in safe.split("/"):
            current = f"{current}/{part}"
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        fd = os.open(current, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return fd


def _read(out_dir: Path, rel: str, limit: int, tail: bool) -> tuple[bytes, int] | None:
    """(data, bytes skipped) from the end (``tail``) or the start of a file; None if unreadable."""
    fd = _open_below(out_dir, rel)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        skipped = max(0, size - limit)
        if tail:
            os.lseek(fd, skipped, os.SEEK_SET)
        return os.read(fd, limit), skipped
    except OSError:
        return None
    finally:
        os.close(fd)


def read_tail(out_dir: Path, rel: str, limit: int = TAIL_BYTES) -> str | None:
    """The last ``limit`` bytes of a regular file at ``out_dir/rel`` as text, or None.

    Refuses symlinks anywhere below ``out_dir`` and anything that is not a regular file.
    """
    got = _read(out_dir, rel, limit, tail=True)
    if got is None:
        return None
    data, skipped = got
    text = clean_text(data.decode("utf-8", errors="replace"))
    if skipped:
        text = text.split("\n", 1)[-1] if "\n" in text[:200] else text
        text = f"[... {skipped:,} earlier bytes not shown]\n" + text
    return text


def read_head(out_dir: Path, rel: str, limit: int = DIFF_BYTES) -> str | None:
    """The first ``limit`` bytes of a regular file below ``out_dir`` as text (for diffs), or None."""
    got = _read(out_dir, rel, limit, tail=False)
    if got is None:
        return None
    data, skipped = got
    text = clean_text(data.decode("utf-8", errors="replace"))
    if skipped:
        text = text.rsplit("\n", 1)[0] + f"\n[... {skipped:,} more bytes not shown]"
    return text


def _text(value: Any, limit: int = STEP_TEXT_CHARS) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return cap(clean_text(value), limit)


def _step(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    step: dict[str, Any] = {
        "id": raw.get("step_id"),
        "src": _text(raw.get("source"), 40),
        "msg": _text(raw.get("message")),
    }
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        step["calls"] = [
            [_text(c.get("function_name"), 80), _text(c.get("arguments"))] for c in calls[:8] if isinstance(c, dict)
        ]
    obs = raw.get("observation")
    results = obs.get("results") if isinstance(obs, dict) else None
    if isinstance(results, list) and results:
        step["obs"] = [_text(r.get("content")) for r in results[:8] if isinstance(r, dict)]
    return step


def read_trajectory(out_dir: Path, rel: str) -> dict[str, Any] | None:
    """An ATIF-like trajectory as compact steps ``{id, src, msg, calls: [[name, args]], obs: [text]}``.

    Keeps the first and the last steps (``omitted`` counts the rest); None if the file is
    missing, too large, not JSON, or has no ``steps`` list.
    """
    got = _read(out_dir, rel, TRAJECTORY_FILE_BYTES + 1, tail=False)
    if got is None or got[1] > 0 or len(got[0]) > TRAJECTORY_FILE_BYTES:
        return None
    try:
        data = subject_json.loads(got[0].decode("utf-8", errors="replace"))
    except ValueError:  # not JSON, or nested too deeply (a subject wrote it)
        return None
    raw = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        return None
    keep = TRAJECTORY_HEAD_STEPS + TRAJECTORY_TAIL_STEPS
    omitted = max(0, len(raw) - keep)
    chosen = raw if not omitted else raw[:TRAJECTORY_HEAD_STEPS] + raw[-TRAJECTORY_TAIL_STEPS:]
    steps = [s for s in (_step(r) for r in chosen) if s is not None]
    out: dict[str, Any] = {"steps": steps, "total": len(raw), "omitted": omitted}
    if omitted:
        out["gap_after"] = TRAJECTORY_HEAD_STEPS
    return out

"""Freezing what the subject left: workspace diff, its own logs, usage and claim; secret redaction."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

MAX_DIFF_BYTES = 1024 * 1024
MAX_FILE_BYTES = 256 * 1024
MAX_REDACT_BYTES = 16 * 1024 * 1024


def _files(root: Path | None) -> dict[str, Path]:
    if root is None or not root.is_dir():
        return {}
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not Path(dirpath, d).is_symlink()]
        for name in filenames:
            full = Path(dirpath, name)
            out[full.relative_to(root).as_posix()] = full
    return out


def _lines(path: Path) -> list[str] | None:
    """Text lines of a regular file, or None for binaries, links and large files."""
    if path.is_symlink():
        return [f"<symlink to {os.readlink(path)}>\n"]
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def workspace_diff(before: Path | None, after: Path) -> tuple[str, dict[str, int]]:
    """A unified diff of the workspace (capped) and counts of added/modified/deleted files."""
    old, new = _files(before), _files(after)
    chunks: list[str] = []
    size = 0
    counts = {"added": 0, "modified": 0, "deleted": 0}
    for rel in sorted(old.keys() | new.keys()):
        a, b = old.get(rel), new.get(rel)
        if a is not None and b is not None and _same(a, b):
            continue
        counts["added" if a is None else "deleted" if b is None else "modified"] += 1
        if size >= MAX_DIFF_BYTES:
            continue
        la = _lines(a) if a is not None else []
        lb = _lines(b) if b is not None else []
        if la is None or lb is None:
            text = f"Binary or large file {rel} differs\n"
        else:
            text = "".join(
                difflib.unified_diff(
                    la, lb, "/dev/null" if a is None else f"a/{rel}", "/dev/null" if b is None else f"b/{rel}"
                )
            )
            if text and not text.endswith("\n"):
                text += "\n\\ No newline at end of file\n"
        chunks.append(text)
        size += len(text)
    if size >= MAX_DIFF_BYTES:
        chunks.append("... diff truncated ...\n")
    return "".join(chunks), counts


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    try:
        sa, sb = a.stat(), b.stat()
        if sa.st_size != sb.st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def redact_value(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON-like) with every secret replaced in its strings."""
    needles = [s for s in secrets if s]
    if not needles:
        return value
    if isinstance(value, str):
        for needle in needles:
            value = value.replace(needle, "[REDACTED]")
        return value
    if isinstance(value, dict):
        return {redact_value(k, needles): redact_value(v, needles) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, needles) for v in value]
    return value


def redact_tree(root: Path, secrets: list[str]) -> int:
    """Replace every secret value in the files below ``root``; returns files changed."""
    needles = [s.encode() for s in secrets if s]
    if not needles or not root.exists():
        return 0
    changed = 0
    for dirpath, _dirs, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath, name)
            try:
                if path.is_symlink() or path.stat().st_size > MAX_REDACT_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            new = data
            for needle in needles:
                new = new.replace(needle, b"[REDACTED]")
            if new != data:
                path.write_bytes(new)
                changed += 1
    return changed

"""Freezing what the subject left: workspace diff, its own logs, usage and claim.

Nothing here reads through a symlink the subject planted, blocks on a fifo, or reads a
hard-linked file (whose other name may be a host file).
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ..core import subject_json
from ..store.tree import walk

MAX_DIFF_BYTES = 1024 * 1024
MAX_FILE_BYTES = 256 * 1024


def _files(root: Path | None) -> dict[str, Path]:
    """Every non-directory entry below ``root`` (links as links: never descended into)."""
    if root is None or not root.is_dir() or root.is_symlink():
        return {}
    out: dict[str, Path] = {}
    for dirpath, _dirnames, filenames in walk(root):
        for name in filenames:
            full = Path(dirpath, name)
            if not stat.S_ISDIR(_lstat_mode(full)):
                out[full.relative_to(root).as_posix()] = full
    return out


def _printable(name: str) -> str:
    """A file name or link target that is not UTF-8, with its odd bytes as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _open_regular(path: Path) -> BinaryIO | str:
    """A plain regular file opened for reading, or why it is not opened.

    Never follows a link (O_NOFOLLOW), never blocks on a fifo (O_NONBLOCK, then fstat),
    and never opens a hard-linked file: its other name may be outside the workspace.
    """
    mode = _lstat_mode(path)
    if stat.S_ISLNK(mode):
        return f"symlink to {_printable(os.readlink(path))}"
    if not stat.S_ISREG(mode):
        return "special file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "unreadable file"
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    why = "special file" if not stat.S_ISREG(st.st_mode) else "hard-linked file" if st.st_nlink > 1 else None
    if why:
        f.close()
        return why
    return f


def _content(path: Path, limit: int) -> bytes | str:
    """The bytes of a plain regular file of at most ``limit`` bytes, or why it is not read."""
    f = _open_regular(path)
    if isinstance(f, str):
        return f
    with f:
        data = f.read(limit + 1)
    return "large file" if len(data) > limit else data


def _lines(path: Path) -> list[str] | str:
    """Text lines of a file, or a description of why it has none (binary, link, large...)."""
    data = _content(path, MAX_FILE_BYTES)
    if isinstance(data, str):
        return [f"<{data}>\n"] if data.startswith("symlink") else data
    if b"\0" in data:
        return "binary file"
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def workspace_diff(before: Path | None, after: Path) -> tuple[str, dict[str, int]]:
    """A unified diff of the workspace (capped) and counts of added/modified/deleted files."""
    old, new = _files(before), _files(after)
    chunks: list[str] = []
    size = 0
    counts = {"added": 0, "modified": 0, "deleted": 0}
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        rel = _printable(key)
        if a is not None and b is not None and _same(a, b):
            continue
        counts["added" if a is None else "deleted" if b is None else "modified"] += 1
        if size >= MAX_DIFF_BYTES:
            continue
        la = _lines(a) if a is not None else []
        lb = _lines(b) if b is not None else []
        if isinstance(la, str) or isinstance(lb, str):
            why = la if isinstance(la, str) else lb
            text = f"{str(why).capitalize()} {rel} differs\n"
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
    ma, mb = _lstat_mode(a), _lstat_mode(b)
    if stat.S_ISLNK(ma) or stat.S_ISLNK(mb):
        return stat.S_ISLNK(ma) and stat.S_ISLNK(mb) and os.readlink(a) == os.readlink(b)
    fa, fb = _open_regular(a), _open_regular(b)
    if isinstance(fa, str) or isinstance(fb, str):
        for f in (fa, fb):
            if not isinstance(f, str):
                f.close()
        return False
    with fa, fb:
        if os.fstat(fa.fileno()).st_size != os.fstat(fb.fileno()).st_size:
            return False
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                return False
            if not ca:
                return True


def read_json_file(path: Path, limit: int = 1024 * 1024) -> Any:
    """A small JSON file the subject wrote, or None (never follows a symlink)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
            return None
        return subject_json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def usage_problems(agent_dir: Path) -> list[str]:
    """What in usage.json was ignored because it was not what the format says (one line each)."""
    path = agent_dir / "usage.json"
    data = read_json_file(path)
    if data is None:
        exists = path.is_symlink() or path.exists()
        return ["usage.json: not a JSON file of at most 1 MiB (or a link); ignored"] if exists else []
    if not isinstance(data, dict):
        return [f"usage.json: expected an object, got {type(data).__name__}"]
    problems = []
    for key in ("input_tokens", "output_tokens", "cache_tokens"):
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            problems.append(f"usage.json: {key} is {value!r:.40}, expected a non-negative integer; ignored")
    cost = data.get("cost_usd")
    if cost is not None and (not isinstance(cost, (int, float)) or isinstance(cost, bool)):
        problems.append(f"usage.json: cost_usd is {cost!r:.40}, expected a number; ignored")
    return problems

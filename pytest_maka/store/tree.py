"""Walking a tree a subject made: iterative (any depth), never through a symlink."""

from __future__ import annotations

import os
from collections.abc import Iterator


def walk(root: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """Like ``os.walk(root)`` top-down, without recursion (no depth limit) and with links
    to directories listed as files, never entered. Prune by editing ``dirnames``."""
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        dirnames: list[str] = []
        filenames: list[str] = []
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirnames if is_dir else filenames).append(entry.name)
        except OSError:
            continue
        yield top, dirnames, filenames
        stack.extend(os.path.join(top, d) for d in reversed(dirnames))


def walk_bottom_up(root: str | os.PathLike[str]) -> list[tuple[str, list[str], list[str]]]:
    """Every directory of ``walk`` with children before parents (safe for renaming)."""
    return list(walk(root))[::-1]

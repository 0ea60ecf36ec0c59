"""``.harborignore``: gitignore-style patterns naming task files that are never uploaded.

Patterns are relative to the task directory: ``#`` comments, ``!`` negation (last match
wins), a trailing ``/`` matches directories only, a pattern with a ``/`` in it is anchored
at the task root, one without matches a name at any depth; ``*``, ``?``, ``[...]`` and ``**``.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core import inputs
from ..core.errors import TaskError

IGNORE_FILE = ".harborignore"


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def _translate(glob: str) -> str:
    out, i = "", 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif c == "*":
            out, i = out + "[^/]*", i + 1
        elif c == "?":
            out, i = out + "[^/]", i + 1
        elif c == "[" and "]" in glob[i + 1 :]:
            end = glob.index("]", i + 1)
            body = glob[i + 1 : end].replace("\\", "\\\\")
            out, i = out + "[" + ("^" + body[1:] if body.startswith("!") else body) + "]", end + 1
        else:
            out, i = out + re.escape(c), i + 1
    return out


def parse_rules(text: str) -> list[Rule]:
    """The rules of a .harborignore text; ValueError (naming the line) for a pattern that cannot work."""
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if not line:
            continue
        prefix = "" if anchored else "(?:.*/)?"
        try:
            regex = re.compile(f"^{prefix}{_translate(line)}$")
        except re.error as e:
            raise ValueError(f"line {number}: invalid pattern {line!r}: {e.msg}") from None
        rules.append(Rule(regex, negated, dir_only))
    return rules


def ignored(rules: list[Rule], rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` (posix, relative to the task root) is ignored by itself (parents aside)."""
    verdict = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.match(rel):
            verdict = not rule.negated
    return verdict


def load_rules(task_dir: Path) -> list[Rule] | None:
    """The task's rules, None without a .harborignore; a TaskError for one that cannot be used."""
    path = task_dir / IGNORE_FILE
    if not os.path.lexists(path):
        return None
    try:
        return parse_rules(inputs.read_text(path, what=IGNORE_FILE, error=TaskError))
    except ValueError as e:
        where, _, message = str(e).partition(": ")
        raise TaskError(path, where, message) from None


def copy_filtered(src: Path, dest: Path, rules: list[Rule]) -> list[str]:
    """Copy ``src`` to ``dest`` leaving out what ``rules`` ignore; returns the left-out paths."""
    left_out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(src):
        base = Path(dirpath)
        rel_dir = base.relative_to(src).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        (dest / rel_dir).mkdir(parents=True, exist_ok=True)
        keep = []
        for name in sorted(dirnames):
            full = base / name
            if not full.is_symlink() and ignored(rules, rel_dir + name, True):
                left_out.append(rel_dir + name + "/")
            else:
                keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames) + [d for d in keep if (base / d).is_symlink()]:
            full, rel = base / name, rel_dir + name
            if rel == IGNORE_FILE or ignored(rules, rel, False):
                left_out.append(rel)
            elif full.is_symlink():
                os.symlink(os.readlink(full), dest / rel)
            else:
                shutil.copy2(full, dest / rel)
        dirnames[:] = [d for d in keep if not (base / d).is_symlink()]
    return left_out

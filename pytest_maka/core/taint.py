"""Taint (DESIGN.md §3): a pass that depended on code the subject changed outside the workdir.

In a shared environment (Harbor / Terminal-Bench) the verifier runs in what the subject
left, as the benchmark's own harness runs it: that cannot be prevented without breaking
honest solutions. It is detected instead. Per attempt the executor lists what the subject
created or changed outside the workdir, and which of those files the verification then read
or executed. Those that are code (an executable, a Python module or ``.pth``, a shared
library, a shell start-up file, git or package-manager configuration) make a pass
**tainted**: recorded with the paths, shown apart in the reports, and refused under
``policy.refuse_tainted``. Files only read as data (a config file) are listed, not taint.

Pure: no I/O here.
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: The record field's own schema (a change of its shape bumps the number).
TAINT_SCHEMA = "pytest-maka/taint/1"
#: Paths listed in the record (the counts say how many there were).
MAX_LISTED = 50
#: Suffixes of files an interpreter or the loader runs or loads.
CODE_SUFFIXES = (".pth", ".py", ".pyc", ".so", ".sh", ".pl", ".pm", ".rb", ".js", ".mjs", ".cjs", ".jar", ".class")
#: Names (anywhere) that a shell, git, Python or the loader runs or obeys.
CODE_NAMES = frozenset(
    {
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".profile",
        ".zshrc",
        ".zshenv",
        ".gitconfig",
        ".gitattributes",
        "gitconfig",
        "config",  # a repository's .git/config (below a .git directory, see code_like)
        "sitecustomize.py",
        "usercustomize.py",
        "ld.so.preload",
        "bash.bashrc",
        "environment",
        "pip.conf",
    }
)
#: Directories whose files are run or obeyed by the programs a verifier uses.
CODE_DIRS = (
    "/etc/profile.d",
    "/etc/apt/apt.conf.d",
    "/etc/dpkg/dpkg.cfg.d",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.conf",
    "/etc/profile",
    "/etc/bash.bashrc",
    "/etc/gitconfig",
    "/usr/lib/git-core",
)


def code_like(path: str, mode: int) -> bool:
    """``path`` (of the given ``st_mode``) is something a verifier runs or loads, not mere data."""
    if stat.S_ISLNK(mode):
        return True  # a link followed on the way to a program (e.g. python3 -> a planted one)
    if stat.S_ISREG(mode) and mode & 0o111:
        return True
    name = posixpath.basename(path)
    if name.endswith(CODE_SUFFIXES) or ".so." in name:
        return True
    parts = path.split("/")
    if ".git" in parts[:-1]:  # a repository's configuration, hooks, attributes
        return True
    if name in CODE_NAMES and (name != "config" or ".git" in parts):
        return True
    return any(path == d or path.startswith(d + "/") for d in CODE_DIRS)


@dataclass(frozen=True)
class Touched:
    """A path the subject created or changed outside the workdir, and its mode (0: unknown)."""

    path: str
    mode: int = 0


@dataclass(frozen=True)
class TaintRecord:
    """The record's ``taint`` field for one attempt (schema TAINT_SCHEMA)."""

    #: How the changes and accesses were found (or why they could not be).
    mechanism: str
    #: Whether the accesses could be checked at all.
    checked: bool
    #: How many paths the subject changed outside the workdir (and the first of them).
    changed_count: int = 0
    changed: tuple[str, ...] = ()
    #: Changed files the verification read or executed, code or not.
    accessed: tuple[str, ...] = ()
    #: The code among them: a pass that depended on these is tainted.
    paths: tuple[str, ...] = ()
    #: The verifier passed and ``paths`` is not empty (or could not be checked while the
    #: subject had changed files outside the workdir).
    tainted: bool = False
    #: Refused under ``policy.refuse_tainted`` (the attempt is then an agent_failure).
    refused: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_record(self) -> dict[str, Any]:
        return {
            "schema": TAINT_SCHEMA,
            "mechanism": self.mechanism,
            "checked": self.checked,
            "changed_count": self.changed_count,
            "changed": list(self.changed[:MAX_LISTED]),
            "accessed": list(self.accessed[:MAX_LISTED]),
            "paths": list(self.paths[:MAX_LISTED]),
            "tainted": self.tainted,
            "refused": self.refused,
            **({"notes": list(self.notes)} if self.notes else {}),
        }

    def reason(self) -> str:
        """One line for the record's error when the pass is refused."""
        shown = ", ".join(self.paths[:5]) + (" ..." if len(self.paths) > 5 else "")
        if not self.paths:
            return (
                "tainted: the subject changed files outside the workdir and whether the verifier"
                " used them could not be checked"
            )
        return f"tainted: the verifier ran or loaded files the subject changed outside the workdir: {shown}"


def judge(
    *,
    mechanism: str,
    changed: Iterable[str],
    accessed: Iterable[Touched] | None,
    passed: bool | None,
    refuse: bool,
    notes: Iterable[str] = (),
    listed: bool = True,
) -> TaintRecord:
    """The taint record of one verification. ``accessed`` None: the check could not run;
    ``listed`` False: not even the changes could be listed (the subject left paths too deep)."""
    changed_list = tuple(changed)
    hits = tuple(accessed) if accessed is not None else ()
    code = tuple(t.path for t in hits if code_like(t.path, t.mode))
    unknown = accessed is None and (bool(changed_list) or not listed)
    tainted = bool(passed) and (bool(code) or unknown)
    return TaintRecord(
        mechanism=mechanism,
        checked=accessed is not None,
        changed_count=len(changed_list),
        changed=changed_list[:MAX_LISTED],
        accessed=tuple(t.path for t in hits),
        paths=code,
        tainted=tainted,
        refused=tainted and refuse,
        notes=tuple(notes),
    )


#: What a sandbox whose system is the host's, read-only, says when the subject writes there.
READ_ONLY_TEXT = "Read-only file system"
READ_ONLY_NOTE = "this task needs a writable system; use the docker executor"
READ_ONLY_SCHEMA = "pytest-maka/read-only-system/1"


@dataclass(frozen=True)
class ReadOnlySystem:
    """The record's ``read_only_system`` field: a failed attempt on an executor that shows the
    host's system read-only, where the subject tried to write outside the workdir. The task
    may need a writable system (a container); the failure may not be the subject's alone."""

    #: The first output line that showed a write refused (capped).
    evidence: str
    #: Where it was seen (an artifact of the attempt).
    seen_in: str
    note: str = READ_ONLY_NOTE

    def as_record(self) -> dict[str, Any]:
        return {
            "schema": READ_ONLY_SCHEMA,
            "needs_writable_system": True,
            "evidence": self.evidence,
            "seen_in": self.seen_in,
            "note": self.note,
        }


def read_only_evidence(text: str) -> str | None:
    """The first line of ``text`` that shows a write refused by a read-only system."""
    for line in text.splitlines():
        if READ_ONLY_TEXT in line:
            return line.strip()[:300]
    return None

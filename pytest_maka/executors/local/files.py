"""A local lease's files on the host: the workdir, ``/logs`` and one directory per upload top.

Every other sandbox path is either the host's (read-only) or new per command (the tmpfs
root and ``/tmp``), so these directories are all that persists between the commands of a
lease. Nothing here follows a link the subject planted (``hostfs``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

from ...core.task import LOGS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR
from ..content import read_regular
from ..copyout import CopyReport
from ..hostfs import clear_dir, copy_out, descend, remove_path, tree_print
from . import bwrap

#: The verdict channel's sandbox paths and the names of their host directories.
VERDICT_PATHS = {TESTS_DIR: "tests", VERIFIER_LOGS_DIR: "verifier"}


class LeaseFiles:
    """Where each sandbox path of a lease lives on the host, and the moving of files there."""

    def __init__(self, workdir: str, area: Path, layout: bwrap.HostLayout) -> None:
        self.workdir = workdir
        self.workspace = area / "workspace"
        self.logs = area / "logs"
        self.mounts = area / "mounts"  # uploads outside workdir and /logs: one bind per top dir
        self._layout = layout
        #: (sandbox path's parts, host directory) of the two bound roots, the deeper first.
        roots = ((sandbox_parts(workdir), self.workspace), (sandbox_parts(LOGS_DIR), self.logs))
        self._roots = sorted(roots, key=lambda r: -len(r[0]))
        #: The upload tops bound into every command, in the order they were first put.
        self.mount_tops: list[str] = []
        #: Uploads put before the first command (sandbox path -> host source) and their prints.
        self.uploads: dict[str, Path] = {}
        self.upload_prints: dict[str, dict[str, Any]] | None = None
        #: The verdict channel (``open_verdict``): /tests and /logs/verifier of the verification,
        #: host directories no other command binds; bound while ``verdict_open``.
        self.verdict = {path: area / "verdict" / name for path, name in VERDICT_PATHS.items()}
        self.verdict_open = False

    def binds(self, tops: Iterable[str] = (), *, verdict: bool | None = None) -> dict[str, Path]:
        """Sandbox path -> host path, in mount order (outer directories first); ``tops``: upload
        directories to bind as well (those a command set up ahead will find filled); ``verdict``:
        bind the verdict channel's directories (by default while it is open), last: over /logs."""
        binds = {f"/{top}": self.mounts / top for top in (*self.mount_tops, *tops)}
        for dest, src in sorted(((self.workdir, self.workspace), (LOGS_DIR, self.logs)), key=lambda b: len(b[0])):
            binds[dest] = src
        if self.verdict_open if verdict is None else verdict:
            binds.update(self.verdict)
        return binds

    def make_verdict_dirs(self) -> None:
        """The channel's directories, made empty now if absent (a command set up ahead binds them),
        and a real directory where the private /logs/verifier is mounted."""
        for host in self.verdict.values():
            host.mkdir(parents=True, exist_ok=True)
        descend(self.logs, [self.verdict_mount_point.name], make=True)

    @property
    def verdict_mount_point(self) -> Path:
        """The lease's /logs/verifier on the host: where the private one is mounted."""
        return self.logs / PurePosixPath(VERIFIER_LOGS_DIR).relative_to(LOGS_DIR)

    def open_verdict(self, tests: Path | None) -> None:
        """Fresh /tests (a copy of ``tests``) and an empty /logs/verifier, private to the commands
        run from now on; filled in place (a command set up ahead holds these very directories).

        The environment's own /tests leaves, and its /logs/verifier becomes a real empty
        directory: the mount point of the private one (no link the subject left is followed).
        """
        self.verdict_open = False
        self.remove(TESTS_DIR)
        self.put_dir_empty(VERIFIER_LOGS_DIR)
        self.make_verdict_dirs()
        for path, host in self.verdict.items():
            descend(host, [], make=True)
            if path == TESTS_DIR and tests is not None:
                _fill(host, tests)
            else:
                clear_dir(host)
        self.verdict_open = True

    def close_verdict(self) -> None:
        """The channel's directories emptied; /tests and /logs/verifier are the environment's again."""
        self.verdict_open = False
        for host in self.verdict.values():
            if os.path.isdir(host) and not os.path.islink(host):
                descend(host, [], make=True)
                clear_dir(host)

    def put_dir_empty(self, sandbox_path: str) -> None:
        """A real, empty directory at ``sandbox_path``: a directory there is emptied in place (a
        command set up ahead has a mount on it, which removing it would detach), anything else
        (a link, a file) is replaced."""
        base, parts = self.locate(sandbox_path)
        target = descend(base, parts, make=True)
        assert target is not None
        clear_dir(target)

    def new_tops(self, paths: Iterable[str]) -> list[str]:
        """The upload tops that putting ``paths`` would add to the binds."""
        tops = []
        for path in paths:
            base, parts = self.locate(path)
            if base == self.mounts and parts and parts[0] not in self.mount_tops and parts[0] not in tops:
                tops.append(parts[0])
        return tops

    def first_command(self) -> None:
        """Before the first command: what the uploads are, to tell later what it changed."""
        if self.upload_prints is None:
            self.upload_prints = {dest: tree_print(self.host_path(dest)) for dest in self.uploads}

    def locate(self, sandbox_path: str) -> tuple[Path, list[str]]:
        """The host directory holding ``sandbox_path`` and the path's parts below it (the verdict
        channel's own directories while it is open)."""
        parts = sandbox_parts(sandbox_path)
        if self.verdict_open:
            for path, host in self.verdict.items():
                root = sandbox_parts(path)
                if parts[: len(root)] == root:
                    return host, list(parts[len(root) :])
        for root, host in self._roots:  # the deeper root first (a workdir below /logs)
            if parts[: len(root)] == root:
                return host, list(parts[len(root) :])
        top = parts[0] if parts else ""
        if not top or top in bwrap.RESERVED_TOPS or top in self._layout.system_tops:
            raise ValueError(f"the local executor cannot place files at {sandbox_path}")
        return self.mounts, list(parts)

    def host_path(self, sandbox_path: str) -> Path:
        base, parts = self.locate(sandbox_path)
        return base.joinpath(*parts)

    def read_file(self, sandbox_path: str, max_bytes: int) -> bytes:
        """The content of a regular file, reached through real directories only."""
        base, parts = self.locate(sandbox_path)
        parent = descend(base, parts[:-1], make=False) if parts else None
        if parent is None:
            raise FileNotFoundError(f"no regular file at {sandbox_path}")
        return read_regular(parent / parts[-1], max_bytes)

    def put(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a file or directory to ``sandbox_path``, replacing whatever is there."""
        base, parts = self.locate(sandbox_path)
        if not parts:  # the workdir or /logs itself: replace its content
            if not host_path.is_dir():
                raise ValueError(f"cannot replace directory {sandbox_path} with a file")
            descend(base, [], make=True)
            _fill(base, host_path)
            return
        parent = descend(base, parts[:-1], make=True)
        assert parent is not None
        target = parent / parts[-1]
        unseen_top = base == self.mounts and len(parts) == 1 and parts[0] not in self.mount_tops
        if unseen_top and host_path.is_dir() and os.path.isdir(target) and not os.path.islink(target):
            _fill(target, host_path)  # made for a command set up ahead, which binds this very directory
        else:
            if os.path.lexists(target):
                remove_path(target)
            if host_path.is_dir():
                shutil.copytree(host_path, target, symlinks=True)
            else:
                shutil.copy2(host_path, target)
        if base == self.mounts and parts[0] not in self.mount_tops:
            self.mount_tops.append(parts[0])
        if base == self.mounts and self.upload_prints is None:
            self.uploads[sandbox_path] = host_path
        elif self.upload_prints is not None and sandbox_path in self.uploads:  # the harness replaced it
            self.uploads[sandbox_path] = host_path  # (a later step's upload): compare against this copy
            self.upload_prints[sandbox_path] = tree_print(self.host_path(sandbox_path))

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out by the rules of ``copyout`` (no link followed or kept, capped, noted in
        ``report``); False when nothing is at ``sandbox_path``."""
        base, parts = self.locate(sandbox_path)
        parent = descend(base, parts[:-1], make=False) if parts else base.parent
        source = base if not parts else (parent / parts[-1] if parent is not None else None)
        if source is None or not os.path.lexists(source):
            return False
        if os.path.lexists(host_path):
            remove_path(host_path)
        host_path.parent.mkdir(parents=True, exist_ok=True)
        return copy_out(source, host_path, report, PurePosixPath(sandbox_path).name)

    def remove(self, sandbox_path: str) -> None:
        """Delete what is at ``sandbox_path`` (a symlink standing on the way is deleted instead)."""
        base, parts = self.locate(sandbox_path)
        if not parts:
            descend(base, [], make=True)
            clear_dir(base)
            return
        parent = descend(base, parts[:-1], make=False, unlink_blockers=True)
        if parent is not None and os.path.lexists(parent / parts[-1]):
            remove_path(parent / parts[-1])
        if base == self.mounts and len(parts) == 1 and parts[0] in self.mount_tops:
            self.mount_tops.remove(parts[0])  # nothing left to bind there (a later put binds it again)

    def reopen_roots(self) -> None:
        """Give the workdir and ``/logs`` back the owner permissions the subject may have taken: a
        command has no capability, so without them the verifier could not even enter its workdir."""
        for root in (self.workspace, self.logs):
            descend(root, [], make=True)

    def restore_uploads(self) -> tuple[list[str], list[str]]:
        """Copy in again every upload changed since the first command: (paths changed, uploads restored)."""
        changed: list[str] = []
        restored: list[str] = []
        for dest, source in self.uploads.items() if self.upload_prints is not None else ():
            before = self.upload_prints.get(dest, {})
            now = tree_print(self.host_path(dest))
            if now == before:
                continue
            diff = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
            changed += [f"{dest}/{rel}".rstrip("/") for rel in diff]
            self.put(source, dest)
            restored.append(dest)
        return changed, restored


def _fill(directory: Path, source: Path) -> None:
    """Replace the content of ``directory`` by a copy of ``source``'s, keeping the directory itself."""
    clear_dir(directory)
    shutil.copytree(source, directory, symlinks=True, dirs_exist_ok=True)


@lru_cache(maxsize=4096)
def sandbox_parts(sandbox_path: str) -> tuple[str, ...]:
    """The names of an absolute sandbox path below ``/`` (cached: a cell uses a handful of paths)."""
    path = PurePosixPath(sandbox_path)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"sandbox paths must be absolute, without '..': {sandbox_path!r}")
    return path.parts[1:]

"""A container's files, through the engine only: puts queued and sent as one archive, copy-out
by the rules of ``copyout``, and removal that neither follows a link nor runs a program of the
container (the engine clears the tree, the harness's own probe deletes what stays)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import docker.errors

from ...core.errors import SubjectFault
from ..copyout import CopyReport
from ..hostfs import remove_path
from .archive import Batch, extract_archive
from .engines import Engine
from .full import LayerSpace
from .protect_paths import GO_MODE_DIR, PROTECTED_ROOTS, find_rm, stat_path
from .watch import AccessWatch, ProbeUnavailable

#: Times a put is sent again when a process in the container races the engine's clearing.
RACE_RETRIES = 5


def check_path(path: str) -> str:
    """``path`` normalised; ValueError unless absolute, without '..', and not /."""
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or str(p) == "/":
        raise ValueError(f"sandbox paths must be absolute, without '..', and not /: {path!r}")
    return str(p)


class ContainerFiles:
    """The file operations of ``DockerSandbox`` (a mixin: the sandbox holds the state)."""

    engine: Engine
    id: str
    _batch: Batch  # puts waiting to be sent as one archive
    _fresh: set[str]  # paths cleared since the last exec: put needs no clearing
    _dirty: bool  # an exec ran: the subject may have planted links
    space: LayerSpace  # what the writable layer's disk had free at the lease's start

    api: Any  # the engine's client (ContainerProcesses)
    _run: Callable[[list[str]], tuple[int | None, bytes]]  # a harness command (ContainerProcesses)
    _restart: Callable[[], None]  # ContainerProcesses
    _watch_images: Callable[[], list[str]]  # images that can run the probe (DockerSandbox)
    #: Why the last removal fell back to the container's rm (None: the harness's probe did it).
    removed_with_rm: str | None = None

    def _stat(self, path: str) -> dict[str, Any] | None:
        with self.engine.guard(f"reading what is at {path}", refusals=False):
            return stat_path(self.api, self.id, path)

    def _exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def _clear_way(self, path: str) -> None:
        """Queue directories over every symlink or file standing where a parent of ``path``
        should be a directory (the image's own top-level links such as /bin are kept)."""
        parts = PurePosixPath(path).parts[1:-1]
        for depth in range(1, len(parts) + 1):
            ancestor = "/" + "/".join(parts[:depth])
            st = self._stat(ancestor)
            if st is None:
                return  # the engine creates the rest
            if st["mode"] & GO_MODE_DIR and not st.get("linkTarget"):
                continue
            if depth == 1 and ancestor in PROTECTED_ROOTS:
                continue
            self._batch.replace_marker(ancestor, directory=True)

    def _flush(self, touching: str | None = None) -> None:
        """Send the waiting puts (all, or only if one of them touches ``touching``)."""
        if touching is not None and not self._batch.overlaps(touching):
            return
        paths = sorted(self._batch.paths)
        tar = self._batch.take()
        if tar is None:
            return
        with tar, self.engine.guard("sending the queued files into the container", refusals=False):
            for attempt in range(RACE_RETRIES + 1):
                try:
                    self.api.put_archive(self.id, "/", tar)
                    return
                except docker.errors.APIError as exc:
                    full = self.space.fault(exc, f"sending {', '.join(paths[:3])} into the container")
                    if full is not None:  # a full disk the container's own layer accounts for
                        raise full from None
                    # the engine could not clear a path because a process in the container keeps
                    # writing into it (a live environment keeps what the subject left running)
                    if "directory not empty" not in str(exc.explanation or exc):
                        raise
                    if attempt == RACE_RETRIES:
                        raise SubjectFault(
                            "a process the subject left keeps writing where the harness must replace"
                            f" {', '.join(paths[:3])}",
                            paths,
                        ) from None
                    time.sleep(0.05 * (attempt + 1))
                    tar.seek(0)

    def put(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a host file or directory to ``sandbox_path``, replacing whatever is there.

        The copy is taken now and sent with the next operation that needs it (puts in a row
        travel as one archive).
        """
        path = check_path(sandbox_path)
        with self.engine.guard(f"copying {path} into the container"):
            if path not in self._fresh:
                self._flush(path)
                if self._dirty:
                    self._clear_way(path)
                self._batch.replace_marker(path)  # whatever stands there goes, engine-side
            self._batch.add(host_path, path)
            self._fresh.discard(path)

    def put_many(self, entries: list[tuple[Path | None, str]]) -> None:
        """Queue several host paths (None: an empty directory) for a fresh container."""
        for host_path, path in entries:
            self._batch.add(host_path, check_path(path))

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out by the rules of ``copyout`` (streamed, capped, no link kept; noted in
        ``report``); False when nothing is at ``sandbox_path``."""
        path = check_path(sandbox_path)
        with self.engine.guard(f"copying {path} out of the container"):
            self._flush(path)
            url = self.api._url("/containers/{0}/archive", self.id)
            res = self.api._get(url, params={"path": path}, stream=True)
            try:
                if res.status_code == 404:
                    return False
                if res.status_code >= 400 and "not a directory" in res.text:  # a parent is a file: nothing there
                    return False
                self.api._raise_for_status(res)
                if host_path.is_symlink() or host_path.is_file():
                    host_path.unlink()
                elif host_path.exists():
                    remove_path(host_path)
                host_path.parent.mkdir(parents=True, exist_ok=True)
                extract_archive(res.iter_content(1024 * 1024, False), host_path, report)
            finally:
                res.close()  # an archive cut short at the cap: drop the connection, unread
        return True

    def remove(self, sandbox_path: str) -> None:
        """Delete what is at ``sandbox_path`` (a symlink on the way is deleted, never followed)."""
        path = check_path(sandbox_path)
        with self.engine.guard(f"removing {path}"):
            self._flush(path)
            if self._exists(path):  # a dangling link counts: the engine does not follow the last part
                self._remove(path)
            self._fresh.add(path)

    def _remove(self, path: str) -> None:
        """The engine replaces the tree by an empty file (links on the way replaced, never
        followed); the harness's own probe deletes that file from outside the container.

        The probe is the access watch's (``watch``): the harness's interpreter in the
        container's root on the engine's host, else a helper container sharing only its
        process table. Only where no helper image can run it (an engine elsewhere, no
        ``python3`` in the proxy's nor the task's image) does the container's rm delete the
        file; ``removed_with_rm`` says why. An empty file that stays is a SubjectFault.
        """
        if self._dirty:
            self._clear_way(path)
        self._batch.replace_marker(path)
        self._flush()
        problem = ""
        try:
            self._unlink(path)
        except ProbeUnavailable as exc:
            self.removed_with_rm = str(exc)
            rm = find_rm(self._stat)
            if rm is not None:
                self._run([rm, "-f", "--", path])
        except RuntimeError as exc:
            problem = f": {exc}"
        if self._exists(path):
            raise SubjectFault(f"could not remove {path}{problem}", [path])

    def _unlink(self, *paths: str) -> None:
        """Delete what is at each of ``paths`` with the probe (a stopped container is started
        again first, as for any harness command); RuntimeError says what could not be."""
        with self.engine.guard("inspecting the container"):
            running = bool((self.api.inspect_container(self.id).get("State") or {}).get("Running"))
        if not running:
            self._restart()
        watch = AccessWatch(self.engine, self.id, self._watch_images())
        try:
            failed = watch.unlink_all(list(paths))
        finally:
            watch.close()
        if failed:
            raise RuntimeError("; ".join(failed))

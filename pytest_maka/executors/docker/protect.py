"""Protected paths of a container put back as its image has them, through the engine only.

After the subject stopped, the engine's own record of the container's filesystem changes
(``GET /containers/{id}/changes``, what ``docker diff`` shows) says what it touched outside
the workdir and ``/logs``. Changes under the protected roots (system directories, the
image's ``PATH`` and Python directories, and files placed directly in ``/``) are undone:

- a modified or deleted entry is copied back from a pristine, never-started container of
  the same image with the engine's archive API;
- an added entry is first replaced by an empty placeholder through the archive API (the
  engine removes whatever tree stood there, whatever its depth or names), then the
  placeholder is deleted by the image's own ``rm`` (itself restored first) run without a
  shell, PATH or environment;
- an added entry whose name the engine cannot report faithfully (not valid UTF-8) makes its
  parent directory be replaced wholesale by the image's copy.

What cannot be undone raises SubjectFault with the paths: the attempt is not verified.
Nothing here runs a program the subject could have replaced.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import docker.errors
import requests

from ...core.errors import SubjectFault
from ...core.task import LOGS_DIR, TESTS_DIR
from . import labels as L
from . import layer, manifest
from .engines import Engine
from .protect_paths import (
    ENGINE_OWNED,
    GO_MODE_DIR,
    KIND,
    LIST_TIMEOUT_SEC,
    MAX_UNITS,
    SUBJECT_ERRORS,
    find_rm,
    is_dir,
    leaves,
    placeholder_tar,
    protected_roots,
    stat_path,
    unaddressable,
    under,
    valid_ancestor,
)
from .watch import ProbeUnavailable


class Restorer:
    """One restore of one container against its image, on ``engine`` (each step guarded: a lost
    engine is an InfraError naming the step; the engine's refusals reach the code below)."""

    def __init__(
        self,
        engine: Engine,
        container: str,
        image: str,
        *,
        workdir: str,
        content: bool = False,
        mounts: tuple[str, ...] = (),
        unlink: Callable[[list[str]], None] | None = None,
    ) -> None:
        """``unlink``: deletes paths as the container sees them from outside it (the access
        watch's probe); raises ProbeUnavailable where none can run, RuntimeError on a failure."""
        self.unlink = unlink
        self.api = engine.api
        self.content = content
        self.engine = engine
        self.container = container
        self.image = image
        self.own = [workdir, LOGS_DIR, TESTS_DIR]
        #: Read-only mount targets (an installed agent): not the subject's changes, and not restorable.
        self.mounts = mounts
        with self.guard("inspecting the image and the container"):
            self.roots = protected_roots(self.api.inspect_image(image).get("Config") or {})
            #: The container's writable layer on the engine's host (None: its storage has none).
            self.upper = layer.upper_dir(self.api, container)
        if self.upper is None and not content:
            self.content = True  # the engine's list alone misses rewrites: compare contents instead
        self.notes: list[str] = []
        #: Paths the image does not have after all (found while copying back): deleted instead.
        self._absent: list[str] = []
        self.found: list[tuple[str, int]] = []
        self.units: list[str] = []
        self.added: list[str] = []
        #: Directories listed as modified whose mode is the image's and below which nothing
        #: changed (the engine's own mount points, e.g. docker-init under /usr/sbin): not named.
        self.unchanged_dirs: set[str] = set()
        self.pristine = ""

    # -- what changed ------------------------------------------------------------------
    def changes(self) -> list[tuple[str, int]]:
        """(path, kind) outside the workdir, /logs and /tests: the engine's list of changes, plus
        what the writable layer holds under the protected roots that the list misses.

        When the engine cannot list the changes (a path too long for it), the writable layer
        alone is read; when neither works, SubjectFault says why.
        """
        try:
            found = [(c["Path"], int(c["Kind"])) for c in self._engine_list()]
        except (docker.errors.APIError, requests.exceptions.ReadTimeout) as exc:
            if isinstance(exc, requests.exceptions.ReadTimeout):
                if self.upper is None:
                    raise
                cause = f"no answer within {LIST_TIMEOUT_SEC:.0f} s"
            else:
                text = str(exc.explanation or exc)
                cause = next((s for s in SUBJECT_ERRORS if s in text), None)
            if cause is None:
                raise
            if self.upper is None:
                raise SubjectFault(
                    f"the engine cannot list the container's changes: {cause} (the subject left a path"
                    " too long or too deep for the engine, and this engine's storage has no writable"
                    " layer to read instead)"
                ) from None
            self.notes.append(
                f"the engine cannot list the container's changes ({cause}): the protected roots were"
                " read from the container's writable layer instead; changes elsewhere are not listed"
            )
            found = []
        if self.upper is not None:
            found += self._layer_changes({p for p, _ in found})
        return [
            (p, k)
            for p, k in found
            if p not in ENGINE_OWNED and not any(under(p, own) for own in self.own) and not self._mount_point(p)
        ]

    def _engine_list(self) -> list[dict[str, Any]]:
        """``GET /containers/{id}/changes``, waiting at most LIST_TIMEOUT_SEC (the engine walks
        the whole filesystem: a tree thousands of levels deep takes it minutes)."""
        with self.guard("listing the container's changes"):
            res = self.api._get(self.api._url("/containers/{0}/changes", self.container), timeout=LIST_TIMEOUT_SEC)
            return self.api._result(res, True) or []

    def _layer_changes(self, known: set[str]) -> list[tuple[str, int]]:
        """What the writable layer holds under the protected roots and ``known`` misses.

        The archive lists a directory before its entries: below an added directory nothing
        more is looked at (deleting the directory deletes them), so a tree thousands of
        levels deep costs one lookup.
        """
        image = self._stat_of(self.pristine)
        out: list[tuple[str, int]] = []
        added = ""
        for path, kind in layer.entries(self.api, self.pristine, self.roots):
            if added and under(path, added):
                continue
            if unaddressable(path):  # no lookup by this name: the plan takes its parent
                out.append((path, kind))
                continue
            if kind != layer.DELETED and image(path) is None:
                kind, added = 1, path
            if path not in known:
                out.append((path, kind))
        return out

    def _mount_point(self, path: str) -> bool:
        """``path`` is a read-only mount, inside one, or a directory the engine made to hold one."""
        return any(under(path, m) or under(m, path) for m in self.mounts)

    def is_protected(self, path: str, kind: int, stat: Callable[[str], dict[str, Any] | None]) -> bool:
        if any(under(path, root) for root in self.roots):
            return True
        if posixpath.dirname(path) == "/":  # a file in / (e.g. conftest.py, setup.py, pytest.ini)
            if unaddressable(path):
                return True
            st = stat(path)
            return st is None or not st["mode"] & GO_MODE_DIR
        return False

    # -- the restore -------------------------------------------------------------------
    def __enter__(self) -> Restorer:
        """List the changes and plan the restore against a pristine container of the image."""
        self._pristine_cm = self._pristine()
        self.pristine = self._pristine_cm.__enter__()
        try:
            try:
                self.found = self.changes()
            except SubjectFault:
                if not self.content:
                    raise
                self.found = []  # the content check below does not need the engine's list
            if self.content:
                self._add_content_differences()
            stat = self._stat_of(self.container)
            protected = [(p, k) for p, k in self.found if self.is_protected(p, k, stat)]
            self.units, self.added = self._plan(protected, self.pristine)
            if len(self.units) + len(self.added) > MAX_UNITS:
                raise SubjectFault(
                    f"the subject changed {len(protected)} protected paths; too many to restore",
                    [p for p, _ in protected],
                )
        except BaseException:
            self._pristine_cm.__exit__(None, None, None)
            raise
        return self

    def _add_content_differences(self) -> None:
        """Changes the engine's list misses: every protected entry compared with the image's."""
        with self.guard("comparing protected files with the image's"):
            image = manifest.image_manifest(self.api, self.engine.key, self.image, self.pristine, self.roots)
            mine = manifest.manifest(self.api, self.container, self.roots)
        known = {p for p, _ in self.found}
        self.found += [
            (p, k)
            for p, k in manifest.differences(image, mine)
            if p not in known and p not in ENGINE_OWNED and not self._mount_point(p)
        ]

    def __exit__(self, *exc: object) -> None:
        self._pristine_cm.__exit__(None, None, None)

    @property
    def touched(self) -> bool:
        """Something protected was changed (and is being put back)."""
        return bool(self.units or self.added)

    def copy_back(self) -> None:
        """Engine-side only (works on a stopped container): the image's copies back, and empty
        mode-0 placeholders over everything added (no program will run one of them)."""
        for path in self.units:
            self._replace_from(self.pristine, path)
        for path in self.added:
            self._placeholder(path)

    def delete(self) -> None:
        """Delete the placeholders with the harness's probe (else the image's own rm, restored by
        ``copy_back``)."""
        if self.added or self._absent:
            self._delete(self.pristine, [*self.added, *self._absent])

    def report(self) -> dict[str, Any]:
        reported = [(p, k) for p, k in leaves(self.found) if p not in self.unchanged_dirs]
        restored = self.units + self.added
        if self.content:
            mechanism = "docker: protected files compared with the image's by content"
        else:
            mechanism = "docker: the engine's list of changes and the container's writable layer"
        return {
            "mechanism": mechanism + "; protected paths copied back from the image",
            **({"notes": list(self.notes)} if self.notes else {}),
            "changed": [f"{KIND.get(k, k)} {p}" for p, k in reported[:50]],
            "changed_count": len(reported),
            "restored": sorted(restored)[:50],
            "restored_count": len(restored),
            "protected_roots": self.roots,
        }

    def _plan(self, protected: list[tuple[str, int]], pristine: str) -> tuple[list[str], list[str]]:
        """(paths to copy back from the image, added paths to delete), outermost first."""
        mine, image = self._stat_of(self.container), self._stat_of(pristine)
        units: list[str] = []
        added: list[str] = []
        for path, kind in sorted(protected, key=lambda c: (c[0].count("/"), c[0])):
            if any(under(path, u) for u in units + added):
                continue
            if unaddressable(path):  # the real name is not known as text: take the parent
                parent = valid_ancestor(path)
                if parent == "/" or not any(under(parent, root) for root in self.roots):
                    raise SubjectFault(f"cannot restore {path}: its name is not valid UTF-8", [path])
                units = [u for u in units if not under(u, parent)]
                added = [a for a in added if not under(a, parent)]
                units.append(parent)
            elif kind == 1 and image(path) is None:
                added.append(path)
            elif kind == 0 and is_dir(mine(path)) and is_dir(image(path)):
                if (mine(path) or {}).get("mode") != (image(path) or {}).get("mode"):
                    self._restore_mode(pristine, path)  # a directory keeps its content here
                else:
                    self.unchanged_dirs.add(path)
            else:
                units.append(path)
        return units, added

    def _stat_of(self, container: str) -> Callable[[str], dict[str, Any] | None]:
        cache: dict[str, dict[str, Any] | None] = {}

        def stat(path: str) -> dict[str, Any] | None:
            if path not in cache:
                with self.guard(f"reading what is at {path}"):
                    cache[path] = stat_path(self.api, container, path)
            return cache[path]

        return stat

    @contextmanager
    def _pristine(self) -> Iterator[str]:
        """A created, never started container of the image: the reference copy."""
        labels = {**L.owner_labels(), L.RUN: L.run_id(), L.ROLE: "pristine", L.CELL: "pristine"}
        binds = layer.bind(self.upper) if self.upper is not None else None
        with self.guard("creating a pristine container of the image"):
            host_config = self.api.create_host_config(binds=binds)
            cid = self.api.create_container(
                self.image, entrypoint=["/nonexistent"], labels=labels, network_disabled=True, host_config=host_config
            )["Id"]
        try:
            yield cid
        finally:
            with self.guard("removing the pristine container"), suppress(docker.errors.NotFound):
                self.api.remove_container(cid, force=True, v=True)

    def guard(self, what: str) -> AbstractContextManager[None]:
        return self.engine.guard(what, refusals=False)

    def _put(self, parent: str, data: Any) -> None:
        with self.guard(f"putting back {parent}"):
            self.api.put_archive(self.container, parent, data)

    def _placeholder(self, path: str) -> None:
        """Replace whatever is at ``path`` by an empty file (the engine removes the old tree)."""
        self._put(posixpath.dirname(path), placeholder_tar(posixpath.basename(path)))

    def _replace_from(self, pristine: str, path: str) -> None:
        """Make ``path`` exactly the image's: gone if the image has none, else the image's copy."""
        self._placeholder(path)
        with tempfile.TemporaryFile() as spool:
            with self.guard(f"reading the image's {path}"):
                try:
                    chunks, _stat = self.api.get_archive(pristine, path)
                except docker.errors.NotFound:
                    self._absent.append(path)
                    return
                for chunk in chunks:
                    spool.write(chunk)
            spool.seek(0)
            self._put(posixpath.dirname(path), spool)

    def _delete_with_rm(self, pristine: str, targets: list[str]) -> None:
        """Where no probe can run: the image's own rm, restored by ``copy_back``, no environment."""
        rm = find_rm(self._stat_of(pristine))
        if rm is None:
            raise SubjectFault("cannot delete what the subject added: the image has no rm", targets)
        with self.guard("deleting what the subject added"):
            for start in range(0, len(targets), 500):
                argv = [rm, "-f", "--", *targets[start : start + 500]]
                eid = self.api.exec_create(self.container, argv, environment=[])
                self.api.exec_start(eid["Id"])

    def _restore_mode(self, pristine: str, path: str) -> None:
        """Put back a directory's own mode and owner (its content stays)."""
        head = bytearray()
        with self.guard(f"reading the mode of the image's {path}"):
            chunks, _stat = self.api.get_archive(pristine, path)
            for chunk in chunks:
                head += chunk
                if len(head) >= 64 * 1024:
                    break
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        with tarfile.open(fileobj=io.BytesIO(bytes(head)), mode="r|") as tar:
            first = next(iter(tar), None)
        if first is None or not first.isdir():
            return
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(first)
        self._put(posixpath.dirname(path), out.getvalue())

    def _delete(self, pristine: str, targets: list[str]) -> None:
        stat = self._stat_of(self.container)
        if self.unlink is None:
            self._delete_with_rm(pristine, targets)
        else:
            try:
                self.unlink(targets)  # the harness's probe: no program of the container runs
            except ProbeUnavailable as exc:
                self.notes.append(f"what the subject added was deleted with the image's rm: {exc}")
                self._delete_with_rm(pristine, targets)
            except RuntimeError:
                pass  # what is left is named below
        left = [p for p in targets if stat(p) is not None]
        if left:
            raise SubjectFault(f"could not delete what the subject added at {left[0]}", left)

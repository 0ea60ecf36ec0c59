"""What a subject changed outside the workdir, and which of those files the verifier then used.

**What changed.** Where the harness runs on the engine's host and may read the container's
writable ("upper") overlay directory, that directory is walked: it holds every file the
subject created or changed (the kernel copies a file up before its first byte changes) and a
whiteout for every deletion. Elsewhere the engine's own list (``GET /containers/{id}/changes``,
what ``docker diff`` shows) is asked; an engine with naive diffing walks the whole container
for it, which takes a second or more.

**What the verifier used.** Before the verifier runs, the access time of each changed file is
set to 0 through the container's own root (``watch_probe``: it changes its root to the
container's first, so every link resolves inside the container); after the verification
the files whose access time the kernel set again (``relatime`` updates one older than a day)
were read or executed. The probe is the harness's program run by an interpreter the subject
never touched: the harness's own (a short process on the engine's host), or where the engine
is elsewhere, a helper container of an image the subject never ran in (the egress proxy's when
the engine has it, else a fresh container of the task's image) that shares the attempt
container's process table and nothing else. Nothing runs in the attempt container.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker.errors
import requests

from ...core.errors import InfraError
from ...core.taint import Touched
from . import labels as L
from .engines import Engine
from .protect_paths import ENGINE_OWNED, LIST_TIMEOUT_SEC, SUBJECT_ERRORS, leaves, under
from .proxies import Channel

ROLE = "access-watch"
MECHANISM = (
    "docker: what the subject changed outside the workdir (the container's writable layer, or the"
    " engine's list of changes); their access times set to 0 through the container's root before"
    " the verifier, read again after it"
)
#: More entries than this in the writable layer are not walked (the engine's list is asked).
MAX_LAYER_ENTRIES = 200_000
#: Seconds the probe may take on the engine's host.
PROBE_TIMEOUT_SEC = 120.0
KIND_MODIFIED, KIND_ADDED, KIND_DELETED = 0, 1, 2


def probe_source() -> str:
    from . import watch_probe

    return Path(watch_probe.__file__).read_text()


def local_root(api: Any, container: str) -> tuple[str, str] | None:
    """(upper directory, ``/proc/<pid>/root``) when both can be used from this process: the
    engine runs here, its storage has an upper directory and this process may read it."""
    if not str(getattr(api, "base_url", "")).startswith("http+docker://localhost") or os.geteuid() != 0:
        return None
    info = api.inspect_container(container)
    upper = ((info.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
    pid = int((info.get("State") or {}).get("Pid") or 0)
    if not isinstance(upper, str) or not upper.startswith("/") or pid <= 0:
        return None
    root = f"/proc/{pid}/root"
    return (upper, root) if os.path.isdir(upper) and os.path.isdir(root) else None


def walk_layer(upper: str, own: list[str], mounts: tuple[str, ...]) -> list[tuple[str, int]] | None:
    """(path, kind) of every file, link and whiteout below ``upper`` outside ``own`` and
    ``mounts`` (directories are walked, not listed); None when there are too many entries."""
    out: list[tuple[str, int]] = []
    skip = [*own, *mounts]
    stack = [("", upper)]
    seen = 0
    while stack:
        rel, real = stack.pop()
        try:
            entries = list(os.scandir(real))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_LAYER_ENTRIES:
                return None
            path = f"{rel}/{entry.name}"
            if any(under(path, s) for s in skip) or path in ENGINE_OWNED:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # gone meanwhile, or a name the kernel cannot reach
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append((path, entry.path))
            elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                out.append((path, KIND_DELETED))
            else:
                out.append((path, KIND_ADDED))
    return sorted(out)


def outside_changes(engine: Engine, container: str, own: list[str], mounts: tuple[str, ...]) -> list[tuple[str, int]]:
    """(path, kind) the subject changed outside ``own`` (workdir, /logs, /tests): kind 0
    modified, 1 added (or rewritten), 2 deleted. Raises ValueError with the reason when they
    cannot be listed (a path the subject left too long for the engine)."""
    api = engine.api
    with engine.guard("inspecting the container's storage"):
        here = local_root(api, container)
    if here is not None:
        found = walk_layer(here[0], own, mounts)
        if found is not None:
            return found
    try:
        with engine.guard("listing the container's changes", refusals=False):
            res = api._get(api._url("/containers/{0}/changes", container), timeout=LIST_TIMEOUT_SEC)
            listed = api._result(res, True) or []
    except (docker.errors.APIError, requests.exceptions.ReadTimeout) as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        cause = next((s for s in SUBJECT_ERRORS if s in text), None)
        if cause is None and not isinstance(exc, requests.exceptions.ReadTimeout):
            raise
        raise ValueError(cause or f"no answer within {LIST_TIMEOUT_SEC:.0f} s") from None
    # the directories holding the engine's own mount points show as modified: not the subject's
    engine_dirs = {a for p in ENGINE_OWNED for a in _ancestors(p)}
    out = [
        (str(c["Path"]), int(c["Kind"]))
        for c in listed
        if c["Path"] not in ENGINE_OWNED
        and not (int(c["Kind"]) == KIND_MODIFIED and c["Path"] in engine_dirs)
        and not any(under(c["Path"], o) for o in own)
        and not any(under(c["Path"], m) or under(m, c["Path"]) for m in mounts)
    ]
    return [(p, k) for p, k in leaves(out) if not (k == KIND_MODIFIED and p in engine_dirs)]


def _ancestors(path: str) -> list[str]:
    out = []
    while path not in ("/", ""):
        path = os.path.dirname(path)
        out.append(path)
    return out


class ProbeUnavailable(RuntimeError):
    """No probe could be started for the container (no helper image could run one)."""


class AccessWatch:
    """The access probe for one attempt container (``arm``, then ``read``; or ``unlink``)."""

    def __init__(self, engine: Engine, container: str, images: list[str]) -> None:
        self.engine = engine
        self.container = container
        self.images = images
        self.helper: str | None = None
        self._channel: Channel | None = None
        self._armed: list[Touched] = []

    def arm(self, paths: list[str]) -> list[Touched]:
        """Set the access times of ``paths`` to 0; returns those armed (files and links)."""
        answer = self._call({"op": "arm", "paths": paths}, "setting the access times of the changed files")
        self._armed = [Touched(str(p), int(m)) for p, m in answer.get("armed") or []]
        return self._armed

    def read(self) -> list[Touched]:
        """The armed files read or executed since ``arm``."""
        armed = [[t.path, t.mode] for t in self._armed]
        answer = self._call({"op": "read", "armed": armed}, "reading the access times of the changed files")
        return [Touched(str(p), int(m)) for p, m in answer.get("accessed") or []]

    def unlink(self, path: str) -> bool:
        """Delete the file, link or empty directory at ``path`` as the container sees it, with
        the probe (no program of the container runs); False when nothing was there."""
        return bool(self._call({"op": "unlink", "path": path}, f"removing {path}").get("removed"))

    def unlink_all(self, paths: list[str]) -> list[str]:
        """``unlink`` for each of ``paths`` in one request; the first few failures, said."""
        answer = self._call({"op": "unlink", "paths": paths}, f"removing {len(paths)} paths")
        return [str(f) for f in answer.get("failed") or []]

    def _call(self, msg: dict[str, Any], what: str) -> dict[str, Any]:
        with self.engine.guard("inspecting the container's storage"):
            here = local_root(self.engine.api, self.container)
        answer = self._local(here[1], msg) if here is not None else self._remote(msg, what)
        if "error" in answer:
            raise RuntimeError(str(answer["error"]))
        return answer

    def _local(self, root: str, msg: dict[str, Any]) -> dict[str, Any]:
        """One probe process of the harness's own interpreter, on the engine's host."""
        argv = [sys.executable, "-I", "-S", "-c", probe_source(), root]
        try:
            done = subprocess.run(
                argv, input=json.dumps(msg) + "\n", capture_output=True, text=True, timeout=PROBE_TIMEOUT_SEC
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the access probe gave no answer within {PROBE_TIMEOUT_SEC:.0f} s") from None
        lines = done.stdout.splitlines()
        if not lines:
            raise RuntimeError(f"the access probe failed: {done.stderr.strip()[-300:]}")
        answer: dict[str, Any] = json.loads(lines[0])
        return answer

    def _remote(self, msg: dict[str, Any], what: str) -> dict[str, Any]:
        if self._channel is None:
            self._start()
        assert self._channel is not None
        return self._channel.call(msg, what)

    def _start(self) -> None:
        api = self.engine.api
        errors: list[str] = []
        for image in self.images:
            labels = {**L.owner_labels(), L.RUN: L.run_id(), L.ROLE: ROLE, L.CELL: "watch"}
            try:
                with self.engine.guard("creating the access watch", refusals=False):
                    host_config = api.create_host_config(
                        pid_mode=f"container:{self.container}",
                        network_mode="none",
                        cap_drop=["ALL"],
                        cap_add=["SYS_PTRACE", "SYS_CHROOT", "FOWNER", "DAC_READ_SEARCH", "DAC_OVERRIDE"],
                        security_opt=["no-new-privileges:true"],
                    )
                    self.helper = str(
                        api.create_container(
                            image,
                            entrypoint=["python3", "-I", "-S", "-c", probe_source()],
                            command=[],
                            user="0",
                            stdin_open=True,
                            labels=labels,
                            host_config=host_config,
                        )["Id"]
                    )
                channel = Channel(self.engine, self.helper, "access watch")
                with self.engine.guard("starting the access watch", refusals=False):
                    api.start(self.helper)
                self._channel = channel
                return
            except (docker.errors.APIError, InfraError) as exc:
                errors.append(f"{image[:19]}: {str(exc).splitlines()[0][:160]}")
                self.close()
        raise ProbeUnavailable("no image could run the access watch (" + "; ".join(errors) + ")")

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.helper is not None:
            with contextlib.suppress(Exception), self.engine.guard("removing the access watch"):
                self.engine.api.remove_container(self.helper, force=True, v=True)
            self.helper = None

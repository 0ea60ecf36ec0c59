"""Separate verifier environments on Docker: a second, fresh container for the verifier.

The subject's container is killed (every process, for good), the task's artifacts are
read out of the stopped container through the engine (no link followed, on the way or
inside), and the verifier gets a new container from its own image: ``tests/Dockerfile``,
``[verifier.environment]`` or the task's environment again, built once per content digest
under the same lock as task images (``ImageStore``).
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors

from ...core.interrupts import sigint_deferred
from ...core.task import Task, VerifierEnvironment
from ..base import LeaseRequest, Sandbox
from ..hostfs import remove_path
from ..separate import ArtifactReport
from . import labels as L
from .containers import cell_labels, first_entries
from .full import judged
from .protect_paths import GO_MODE_DIR, GO_MODE_SYMLINK, stat_path
from .sandbox import DockerSandbox

if TYPE_CHECKING:
    from .executor import DockerExecutor


def verifier_task(task: Task, environment: VerifierEnvironment) -> Task:
    """The task as its verifier's environment: that image, workdir and limits.

    A copy of the task's own environment (``bundled_tests`` false) keeps the task's
    workspace as the starting state; the verifier's own image starts as built.
    """
    return dataclasses.replace(
        task,
        environment_dir=environment.build_context,
        dockerfile=environment.dockerfile,
        docker_image=environment.docker_image,
        workspace_dir=None if environment.bundled_tests else task.workspace_dir,
        workdir=environment.workdir,
        cpus=environment.cpus,
        memory_mb=environment.memory_mb,
        storage_mb=environment.storage_mb,
        build_timeout_sec=environment.build_timeout_sec,
    )


def _as_docker(sandbox: Sandbox) -> DockerSandbox:
    if not isinstance(sandbox, DockerSandbox):
        raise TypeError(f"the docker executor cannot act on a {type(sandbox).__name__}")
    return sandbox


class SeparateVerifier:
    """Mixed into DockerExecutor: the ``executors.separate.VerifierEnvironments`` capability."""

    def stop_environment(self: DockerExecutor, sandbox: Sandbox) -> None:
        box = _as_docker(sandbox)
        with box.engine.guard("stopping the subject's container"):
            try:
                box.api.kill(box.id)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: it is not running (already stopped)
                    raise
            box.api.wait(box.id, timeout=60)

    def carry_out(
        self: DockerExecutor, sandbox: Sandbox, source: str, dest: Path, report: ArtifactReport
    ) -> str | None:
        box = _as_docker(sandbox)
        path = posixpath.normpath(source)
        with box.engine.guard(f"copying the artifact {path} out of the container"):
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts) + 1):  # the engine would follow a link on the way
                here = "/" + "/".join(parts[:depth])
                st = stat_path(box.api, box.id, here)
                if st is None:
                    return "absent"
                if st.get("linkTarget") or st["mode"] & GO_MODE_SYMLINK:
                    return "a symbolic link" if depth == len(parts) else f"{here} on the way is a symbolic link"
                if depth < len(parts) and not st["mode"] & GO_MODE_DIR:
                    return "absent"
            if not box.get(path, dest, report=report):
                return "absent"
        for rel in report.placeholders:  # what stood for a link is not carried
            target = dest.joinpath(*rel.split("/")[1:]) if "/" in rel else dest
            if os.path.lexists(target):
                remove_path(target)
        report.placeholders.clear()
        return None

    @contextmanager
    def verifier_lease(
        self: DockerExecutor, sandbox: Sandbox, request: LeaseRequest, environment: VerifierEnvironment
    ) -> Iterator[DockerSandbox]:
        """A fresh container for the verifier on the subject's engine, removed on exit. It shares
        the subject's disk: a full disk is judged by the subject's layer (``full.py``)."""
        subject = _as_docker(sandbox)
        engine, space = subject.engine, subject.space
        task = verifier_task(request.cell.task, environment)
        with judged(space, "making the verifier's container"):
            image_id = self.images.resolve(engine, task, request.attempt_dir / "verifier-build.log")
            key = self._env_key(engine, image_id, task)
            cid, info = self._create(key, cell_labels(request, **{L.ROLE: "verifier"}))
        try:
            box = self._sandbox(engine, cid, workdir=task.workdir, info={**info, "role": "verifier"}, image_id=image_id)
            box.egress = getattr(sandbox, "egress", None)  # the attempt's proxy serves both phases
            box.space = space
            with judged(space, "starting the verifier's container"):
                box.start()
            box.put_many(first_entries(task))
            yield box
        finally:
            with sigint_deferred():
                if not self._dispose(engine, cid, keep=False):
                    self._orphans.append((engine, cid))

    def describe_verifier(self: DockerExecutor, sandbox: Sandbox) -> dict[str, Any]:
        box = _as_docker(sandbox)
        info = box.isolation(agent_network=False, verifier_network=False)
        return {"image": info["image"], "container": info["container"], "engine": info["engine"]}

"""Task environments as images: built once per content digest per engine, reused across runs.

Concurrent workers that need the same image take one file lock per (engine, digest): the
first builds, the others wait and then find the image. A build that failed while a worker
waited is reported to that worker too (with the log), instead of being repeated by it.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path

import docker.errors
import requests
import urllib3.exceptions
from filelock import FileLock, Timeout

from ...core import progress
from ...core.errors import DeadlineReached, InfraError
from ...core.task import Task, digest_tree
from . import labels as L
from .archive import extract_archive
from .build_errors import classify_build_failure
from .engines import Engine, EngineDown, one_line


class BuildFailed(InfraError):
    """An image build that ended without an image; ``error`` is the engine's own words."""

    def __init__(self, message: str, *, error: str) -> None:
        super().__init__(message)
        self.error = error


class ImageStore:
    """Resolves a task to an image id on an engine, building it when needed."""

    def __init__(self, state_dir: Path, prefix: str, default_image: str | None) -> None:
        self.dir = state_dir / "images"
        self.prefix = prefix
        self.default_image = default_image
        self._known: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        #: Counts of builds this process ran (for tests and the benchmark).
        self.builds = 0
        #: A deterministic build failure is reused by every cell of this run (never rebuilt in it).
        self.run = L.run_id()

    # --- resolution -------------------------------------------------------------------
    def resolve(self, engine: Engine, task: Task, build_log: Path, deadline: float | None = None) -> str:
        """The image id to run ``task`` in on ``engine``; raises InfraError naming the task.

        ``deadline`` (epoch seconds, the whole-cell deadline): waiting for another process's
        build and building stop there with DeadlineReached; the build is cancelled.
        """
        context, dockerfile = self._context(task)
        if task.docker_image:
            image_id = self._present(engine, task.docker_image, pull=context is None)
            if image_id:
                return image_id
            if context is None:
                raise InfraError(
                    f"task {task.id}: image {task.docker_image} is not on engine {engine.url} and could not be pulled"
                )
        if context is None or dockerfile is None:
            return self._default(engine, task)
        digest = self.env_digest(context, dockerfile)
        key = (engine.key, digest)
        with self._lock:
            if key in self._known:
                return self._known[key]
        image_id = self._build_once(engine, task, context, dockerfile, digest, build_log, deadline)
        with self._lock:
            self._known[key] = image_id
        return image_id

    def _default(self, engine: Engine, task: Task) -> str:
        if self.default_image is None:
            raise InfraError(f"task {task.id}: no environment/Dockerfile, no docker_image, no default_image")
        image_id = self._present(engine, self.default_image, pull=True)
        if image_id is None:
            raise InfraError(
                f"task {task.id}: the default image {self.default_image} is not on engine {engine.url} "
                "and could not be pulled"
            )
        return image_id

    @staticmethod
    def _context(task: Task) -> tuple[Path | None, Path | None]:
        if task.dockerfile is not None and task.dockerfile.is_file():
            return (task.environment_dir or task.dockerfile.parent), task.dockerfile
        if task.environment_dir is not None and (task.environment_dir / "Dockerfile").is_file():
            return task.environment_dir, task.environment_dir / "Dockerfile"
        return None, None

    @staticmethod
    def env_digest(context: Path, dockerfile: Path) -> str:
        rel = dockerfile.resolve().relative_to(context.resolve()).as_posix()
        return digest_tree(context, extra=f"pytest-maka-env/1 dockerfile={rel}\0")

    def tag(self, digest: str) -> str:
        return f"{self.prefix}:{digest[:24]}"

    def _present(self, engine: Engine, ref: str, *, pull: bool) -> str | None:
        api = engine.api
        with engine.guard(f"inspecting image {ref}"):
            try:
                return str(api.inspect_image(ref)["Id"])
            except docker.errors.ImageNotFound:
                pass
            if not pull:
                return None
            try:
                api.pull(ref)
                return str(api.inspect_image(ref)["Id"])
            except docker.errors.APIError:
                return None

    # --- building ---------------------------------------------------------------------
    def _build_once(
        self,
        engine: Engine,
        task: Task,
        context: Path,
        dockerfile: Path,
        digest: str,
        build_log: Path,
        deadline: float | None = None,
    ) -> str:
        tag = self.tag(digest)
        self.dir.mkdir(parents=True, exist_ok=True)
        base = self.dir / f"{engine.key}-{digest[:24]}"
        failed = base.with_suffix(".failed")
        waiting_since = time.time()
        progress.phase("building image", f"waiting for the image of task {task.id}")
        lock = FileLock(str(base.with_suffix(".lock")))
        try:
            lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.time()))
        except Timeout:
            raise DeadlineReached(f"task {task.id}: the deadline passed while waiting for its image") from None
        with lock:
            image_id = self._present(engine, tag, pull=False)
            if image_id:
                return image_id
            if failed.exists():
                info = json.loads(failed.read_text())
                same_run = info.get("deterministic") and info.get("run") == self.run
                # a deterministic failure of the same context stands in later runs while the base
                # images it names are the same ones (a base image loaded since may fix it)
                for_good = info.get("deterministic") and info.get("bases") == self._bases(engine, dockerfile)
                if same_run or for_good or failed.stat().st_mtime >= waiting_since:
                    build_log.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(info["log"], build_log)
                    message = info["message"].replace(info["task"], task.id, 1)
                    if not same_run and for_good:
                        message += f" (remembered from an earlier run for this context digest: {failed.name})"
                    retryable = not info.get("deterministic")
                    raise InfraError(f"{message} (build log: {build_log})", retryable=retryable)
            try:
                return self._build(engine, task, context, dockerfile, digest, tag, build_log, deadline)
            except (EngineDown, DeadlineReached):
                raise
            except InfraError as exc:
                keep = base.with_suffix(".log")
                shutil.copyfile(build_log, keep)
                kind = classify_build_failure(exc.error, _tail(build_log)) if isinstance(exc, BuildFailed) else None
                deterministic = kind == "deterministic"
                message = f"{exc}" + (" (deterministic: not retried)" if deterministic else "")
                failed.write_text(
                    json.dumps(
                        {
                            "message": message,
                            "task": task.id,
                            "log": str(keep),
                            "deterministic": deterministic,
                            "run": self.run,
                            "bases": self._bases(engine, dockerfile) if deterministic else None,
                        }
                    )
                )
                raise InfraError(f"{message} (build log: {build_log})", retryable=not deterministic) from None

    def _bases(self, engine: Engine, dockerfile: Path) -> dict[str, str | None] | None:
        """Each base image the Dockerfile names, with its id on ``engine`` (None: absent);
        None when a base is computed (``ARG``) or the file cannot be read: no memory then."""
        try:
            refs = base_images(dockerfile.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        if refs is None:
            return None
        return {ref: self._present(engine, ref, pull=False) for ref in refs}

    def _build(
        self,
        engine: Engine,
        task: Task,
        context: Path,
        dockerfile: Path,
        digest: str,
        tag: str,
        build_log: Path,
        cell_deadline: float | None = None,
    ) -> str:
        build_log.parent.mkdir(parents=True, exist_ok=True)
        step, error = "preparing the build context", None
        limit = task.build_timeout_sec
        cut = cell_deadline is not None and cell_deadline - time.time() < limit
        if cell_deadline is not None:
            limit = max(0.01, min(limit, cell_deadline - time.time()))
        deadline = time.monotonic() + limit
        rel = dockerfile.resolve().relative_to(context.resolve()).as_posix()
        self.builds += 1
        with build_log.open("w") as log:
            log.write(f"# pytest-maka: building {tag} for task {task.id} on {engine.url}\n")
            with engine.guard(f"building the image of task {task.id}"):
                stream = engine.api.build(
                    path=str(context),
                    dockerfile=rel,
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                    timeout=limit,  # a silent step past the limit ends in a read timeout
                    labels={L.MANAGED: "1", L.TASK: task.id, L.ENV_DIGEST: digest},
                )
                try:
                    for chunk in stream:
                        text = chunk.get("stream") or chunk.get("status") or ""
                        if text:
                            log.write(text)
                            if text.startswith("Step "):
                                step = text.strip()
                                progress.phase("building image", step)
                        if "error" in chunk:
                            error = " ".join(str(chunk["error"]).split())
                            log.write(f"ERROR: {chunk['error']}\n")
                        if time.monotonic() > deadline:
                            error = f"build timeout after {limit:.0f}s"
                            break
                except docker.errors.APIError as exc:
                    error = one_line(exc)
                except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError):
                    if time.monotonic() < deadline - 1:
                        raise  # not our timeout: the engine's guard decides
                    error = f"build timeout after {limit:.0f}s"
                finally:
                    if hasattr(stream, "close"):
                        stream.close()  # the engine cancels a build whose client went away
            if error is not None and cut and time.monotonic() >= deadline:
                log.write(f"# pytest-maka: build cancelled at {step}: the whole-cell deadline passed\n")
                raise DeadlineReached(f"task {task.id}: the deadline passed while building its image (at {step})")
            if error is None:
                image_id = self._present(engine, tag, pull=False)
                if image_id:
                    log.write(f"# pytest-maka: built {image_id}\n")
                    return image_id
                error = "the build ended without an image"
            log.write(f"# pytest-maka: build failed at {step}: {error}\n")
        raise BuildFailed(f"task {task.id}: image build failed at {step}: {error}", error=error)

    # --- baselines --------------------------------------------------------------------
    def baseline(self, engine: Engine, image_id: str, task: Task) -> Path:
        """A host copy of the workdir as a lease starts: the image's, then the task's workspace."""
        workdir = task.workdir
        name = f"{engine.key}-{image_id.removeprefix('sha256:')[:16]}-{workdir.strip('/').replace('/', '_')}"
        if task.workspace_dir is not None:
            name += f"-{task.digest[:16]}"
        dest = self.dir / "baselines" / name
        done = dest.with_suffix(".complete")
        if done.exists():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(dest.with_suffix(".lock"))):
            if done.exists():
                return dest
            shutil.rmtree(dest, ignore_errors=True)
            api = engine.api
            with engine.guard("reading the image's workdir"):
                cid = api.create_container(image_id, command=["true"], labels={L.MANAGED: "1"})["Id"]
                try:
                    try:
                        chunks, _ = api.get_archive(cid, workdir)
                        extract_archive(chunks, dest)
                    except docker.errors.NotFound:
                        dest.mkdir(parents=True)
                finally:
                    api.remove_container(cid, force=True)
            if task.workspace_dir is not None:
                shutil.copytree(task.workspace_dir, dest, symlinks=True, dirs_exist_ok=True)
            done.touch()
        return dest


_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(?P<ref>\S+)(?:\s+AS\s+(?P<stage>\S+))?", re.IGNORECASE | re.MULTILINE)


def base_images(dockerfile: str) -> list[str] | None:
    """The images a Dockerfile's ``FROM`` lines name (not its own stages); None when one is computed."""
    stages: set[str] = set()
    refs: list[str] = []
    for match in _FROM.finditer(dockerfile):
        ref, stage = match.group("ref"), match.group("stage")
        if "$" in ref:
            return None
        if ref.lower() not in stages and ref.lower() != "scratch" and ref not in refs:
            refs.append(ref)
        if stage:
            stages.add(stage.lower())
    return refs


def _tail(path: Path, lines: int = 30) -> str:
    """The output of the failing step: the log's last ``lines``, without the Dockerfile's own
    lines (``Step n/m : RUN ...``, whose words say nothing about why it failed) or ours."""
    try:
        text = path.read_text("utf-8", "replace").splitlines()
    except OSError:
        return ""
    own = ("Step ", "# pytest-maka", " ---> ", "ERROR: ")
    return "\n".join(line for line in text if not line.startswith(own))[-lines * 200 :]

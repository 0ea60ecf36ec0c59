"""The separate-verifier variant of the lifecycle (Harbor ``environment_mode = "separate"``).

After freeze the subject's environment is stopped for good, the declared artifacts (and
``/logs/artifacts``) are copied out of it without following any link, and the verifier
runs in a fresh environment from its own definition, with the artifacts placed at their
original paths, ``/tests`` fresh and an empty ``/logs/verifier``. Nothing else the subject
did (replaced tools, files outside the artifacts, processes) exists there.

``verify_in_separate_environment`` is what the step loop (run/steps.py) calls for a step
that verifies separately (a single-step task's one step, or each step of a multi-step task).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ..core.errors import InfraError, SubjectFault
from ..core.task import ARTIFACTS_DIR, Artifact, CollectHook, Task, VerifierEnvironment
from ..executors.base import LeaseRequest, Sandbox
from ..executors.hostfs import remove_path
from ..executors.separate import ArtifactReport, VerifierEnvironments
from .facts import CarriedArtifact, CollectHookRun, HookResult, SeparateEnvironment, Tamper
from .phases import refuse, verify
from .restore import base_env, fresh_verifier_dirs, guarded, image_env_of
from .work import AttemptWork

MECHANISM = (
    "separate verifier environment: the subject's environment was stopped and only the declared "
    "artifacts were carried into a fresh one"
)
#: Host directory (in the attempt dir) holding what was carried, by artifact index.
CARRIED_DIR = "carried"


def artifacts_of(task: Task, extra: Sequence[Artifact] = ()) -> list[Artifact]:
    """The task's (and a step's) artifacts, with ``/logs/artifacts`` first unless declared."""
    declared = [*task.artifacts, *extra]
    declared = [a for a in declared if a.service is None]  # sidecars: not in a plain container
    if not any(a.source == ARTIFACTS_DIR for a in declared):
        declared.insert(0, Artifact(source=ARTIFACTS_DIR))
    return declared


def definition(task: Task, environment: VerifierEnvironment) -> str:
    """Which definition the verifier's environment was built from, in the task's terms."""
    if environment.docker_image:
        return f"image {environment.docker_image}"
    if environment.dockerfile is None:
        return "the task's environment"
    try:
        rel = environment.dockerfile.relative_to(task.path).as_posix()
    except ValueError:
        rel = environment.dockerfile.name  # a cached filtered copy of the task
        rel = f"{environment.dockerfile.parent.name}/{rel}"
    return rel if environment.bundled_tests else f"a copy of the task's environment ({rel})"


def _excluded(rel: str, patterns: Sequence[str]) -> bool:
    """GNU tar's ``--exclude``: a pattern matches the relative path, or any of its parts."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    pairs = list(zip(prefixes, parts, strict=True))
    return any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(n, pat) for pat in patterns for p, n in pairs)


def _apply_excludes(root: Path, patterns: Sequence[str]) -> list[str]:
    """Remove what ``patterns`` exclude below the copied directory ``root``; returns the paths."""
    if not patterns or not root.is_dir() or root.is_symlink():
        return []
    removed = []
    for here, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            full = Path(here, name)
            rel = full.relative_to(root).as_posix()
            if _excluded(rel, patterns):
                removed.append(rel)
                remove_path(full)
        dirs[:] = [d for d in dirs if os.path.isdir(os.path.join(here, d))]
    return sorted(removed)


def carry_artifacts(
    executor: VerifierEnvironments, sandbox: Sandbox, artifacts: Sequence[Artifact], host_root: Path, max_bytes: int
) -> list[tuple[Artifact, Path | None, CarriedArtifact]]:
    """Copy each artifact out of the stopped ``sandbox`` (one byte budget for all); per artifact
    its host copy (None: not carried) and what the record says of it."""
    out: list[tuple[Artifact, Path | None, CarriedArtifact]] = []
    left = max_bytes
    for index, artifact in enumerate(artifacts):
        dest = host_root / str(index)
        report = ArtifactReport(max_bytes=left)
        why = executor.carry_out(sandbox, artifact.source, dest, report)
        left = max(0, left - report.bytes)
        entry = CarriedArtifact(artifact.source, report.bytes, report.entries)
        if why is not None:
            entry.not_carried = why
            out.append((artifact, None, entry))
            continue
        entry.skipped_links = report.skipped_links() if report.links else []
        entry.skipped, entry.truncated = list(report.skipped), report.truncated
        entry.excluded = _apply_excludes(dest, artifact.exclude)[:50]
        out.append((artifact, dest if os.path.lexists(dest) else None, entry))
    return out


def run_collect_hooks(work: AttemptWork, sandbox: Sandbox, hooks: Sequence[CollectHook]) -> list[CollectHookRun]:
    """``[[verifier.collect]]`` of the main service, in the subject's environment before it stops
    (best effort, as Harbor: a failing hook is recorded, never fatal)."""
    out: list[CollectHookRun] = []
    for index, hook in enumerate(hooks):
        if hook.service != "main":
            why = "collect hooks of sidecar services need a compose environment"
            out.append(CollectHookRun(hook.command, hook.service, not_run=why))
        else:
            result = sandbox.exec(
                hook.command,
                env=base_env(work.cell.task, image_env_of(sandbox)),
                timeout_sec=hook.timeout_sec,
                stdout_path=work.attempt_dir / f"collect-{index}.stdout.txt",
                stderr_path=work.attempt_dir / f"collect-{index}.stderr.txt",
                cwd=work.cell.task.workdir,
                max_output_bytes=work.settings.budgets.max_output_bytes,
            )
            out.append(
                CollectHookRun(hook.command, hook.service, result=HookResult(result.exit_code, result.timed_out))
            )
    return out


@contextmanager
def separate_verifier(
    work: AttemptWork,
    sandbox: Sandbox,
    request: LeaseRequest,
    environment: VerifierEnvironment,
    tests: Path | None,
    *,
    extra_artifacts: Sequence[Artifact] = (),
    collect: Sequence[CollectHook] = (),
    stop: bool = True,
) -> Iterator[Sandbox]:
    """Yield the verifier's fresh sandbox, ready to verify; record what verified and what was carried.

    ``collect``: the ``[[verifier.collect]]`` hooks to run in the subject's environment first.
    ``stop``: stop the subject's environment then (False for a step after which the subject
    runs again: its processes are already gone, its files stay). Raises SubjectFault when what
    the subject left cannot be carried (the caller refuses the attempt), InfraError when the
    executor has no separate environments.
    """
    executor = work.executor
    if not isinstance(executor, VerifierEnvironments):
        raise InfraError(f"the {executor.kind} executor offers no separate verifier environment")
    task = work.cell.task
    if collect:
        work.verifier_facts.collect_hooks = run_collect_hooks(work, sandbox, collect)
    if stop:
        executor.stop_environment(sandbox)
    host_root = work.attempt_dir / CARRIED_DIR
    carried = guarded(
        "carrying the artifacts",
        lambda: carry_artifacts(
            executor, sandbox, artifacts_of(task, extra_artifacts), host_root, work.settings.budgets.max_artifact_bytes
        ),
    )
    work.verifier_facts.artifacts = [entry for _, _, entry in carried]
    with executor.verifier_lease(sandbox, request, environment) as verifier_box:
        work.verifier_facts.environment = SeparateEnvironment(
            "separate", definition(task, environment), executor.describe_verifier(verifier_box)
        )
        for artifact, copy, _ in carried:
            if copy is not None:
                verifier_box.put(copy, artifact.source)
        fresh_verifier_dirs(verifier_box, tests, request.scratch_dir)  # after the artifacts: they never win
        work.verifier_facts.tamper = Tamper({"mechanism": MECHANISM})
        yield verifier_box


def verify_in_separate_environment(
    work: AttemptWork,
    sandbox: Sandbox,
    request: LeaseRequest,
    environment: VerifierEnvironment,
    tests: Callable[[], Path | None],
    deadline: tuple[float, str] | None,
    *,
    extra_artifacts: Sequence[Artifact] = (),
    collect: Sequence[CollectHook] = (),
    stop: bool = True,
) -> None:
    """Verify in ``environment``: what a lifecycle calls once (a task) or per step (``stop=False``
    for a step after which the subject runs again; a step's own ``artifacts`` as ``extra_artifacts``).

    ``tests`` gives the hidden tests' host directory; the verify step runs on the verifier's
    sandbox; an attempt whose artifacts cannot be carried is refused.
    """
    with ExitStack() as stack:
        try:
            with work.timed("restore"):
                payload = tests()
                verifier_box = stack.enter_context(
                    separate_verifier(
                        work,
                        sandbox,
                        request,
                        environment,
                        payload,
                        extra_artifacts=extra_artifacts,
                        collect=collect,
                        stop=stop,
                    )
                )
        except SubjectFault as fault:
            refuse(work, fault)
            return
        verify(work, verifier_box, work.verifier, request.scratch_dir, deadline)

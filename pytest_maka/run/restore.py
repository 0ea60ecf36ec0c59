"""The restore step: after the subject stopped, make its environment fit to be verified.

Fidelity first (DESIGN.md §3): a live environment (Harbor / Terminal-Bench) is verified as
the subject left it, with the processes it left running and every change it made; only
SWE-bench, whose harness verifies a fresh container with the patch applied, gets its system
back as the image has it. Then ``/logs/verifier`` emptied, ``/tests`` copied in fresh and a
fresh ``HOME`` for the verifier. The verifier runs with a fixed environment that no file of the subject's can
extend: see ``verifier_env``. docs/security.md states the guarantees and their limits.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import SubjectFault
from ..core.task import LOGS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR, Task
from ..executors.base import ChangeWatch, ImageEnvironment, ProtectedRestore, Sandbox, VerdictChannel
from ..executors.hostfs import remove_path

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The verifier's HOME where the environment has none of its own (the local executor): emptied
#: before every verification, never copied out. With an image environment (Docker) the verifier
#: has the environment's HOME, as in the benchmark's own harness (``docker exec``).
VERIFIER_HOME = f"{LOGS_DIR}/.verifier-home"
#: Python must not import from the working directory or a user site, nor take a path from outside.
VERIFIER_PYTHON_ENV = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "PYTHONPATH": "", "PYTHONSTARTUP": ""}
#: Shells must not read a startup file named by the environment.
VERIFIER_SHELL_ENV = {"BASH_ENV": "", "ENV": ""}
#: errno values a subject causes with what it leaves (names too long, link loops, too many links).
SUBJECT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EMLINK})

T = TypeVar("T")


def base_env(
    task: Task, image: Mapping[str, str] | None = None, *, own: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables every command gets; nothing from the host environment.

    ``image``: the environment's own variables (the image's ENV, see ``image_env_of``): they
    replace the kernel's defaults (PATH, HOME, LANG, ...); the task's ``env`` (or ``own``,
    e.g. a separate verifier environment's) comes last.
    """
    defaults = {"PATH": BASE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}
    return {**defaults, **(image or {}), **(task.env if own is None else own)}


def image_env_of(sandbox: Sandbox) -> dict[str, str]:
    """The environment's own variables (empty where the executor has none, e.g. local)."""
    return sandbox.image_env() if isinstance(sandbox, ImageEnvironment) else {}


def layer_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``extra`` over ``base``; a PATH in both keeps ``extra``'s own directories in front of
    ``base``'s PATH (a subject's ``.../bin:`` + the standard PATH becomes ``.../bin:`` + the image's)."""
    out = {**base, **extra}
    if "PATH" in base and "PATH" in extra:
        standard = set(BASE_PATH.split(":"))
        front = [d for d in extra["PATH"].split(":") if d and d not in standard]
        rest = [d for d in base["PATH"].split(":") if d and d not in front]
        out["PATH"] = ":".join([*front, *rest])
    return out


def verifier_env(
    task: Task, *, imports_workdir: bool = False, image: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The verifier's environment: the image's PATH (its directories are restored before it
    runs) or the standard one, the environment's HOME (a fresh one where there is no image
    environment), no way in for the subject's modules.

    HOME is the one the subject had, as in Harbor and Terminal-Bench (a test reads
    ``~/.jupyter/...`` the task asked for): what the subject left there and the verifier then
    read is reported as taint, not hidden by another HOME.

    ``imports_workdir``: the verifier runs the repository's own tests, which import it from
    the working directory (SWE-bench, Terminal-Bench): PYTHONSAFEPATH is left off there.
    The task's own ``verifier_env`` comes last: it is the task author's, not the subject's.
    A separate verifier environment has its own ``env`` in place of the task's.
    """
    python = {k: v for k, v in VERIFIER_PYTHON_ENV.items() if not (imports_workdir and k == "PYTHONSAFEPATH")}
    if image and image.get("PYTHONPATH"):  # the image's own: its directories are protected (restored)
        python["PYTHONPATH"] = image["PYTHONPATH"]
    separate = task.verifier_environment
    own = base_env(task, image, own=None if separate is None else separate.env)
    home = (image or {}).get("HOME") or VERIFIER_HOME
    return {**own, "HOME": home, **python, **VERIFIER_SHELL_ENV, **task.verifier_env}


#: Formats whose own harness verifies a fresh environment with the subject's patch applied.
FRESH_SYSTEM_FORMATS = frozenset({"swe-bench"})
LIVE_MECHANISM = "live: the environment is verified as the subject left it (processes and changes kept)"


def restore_for_verification(
    sandbox: Sandbox, tests: Path | None, scratch: Path, *, task_format: str = "harbor"
) -> dict[str, Any]:
    """Make the environment fit to be verified; returns the record's ``tamper`` entry.

    Raises SubjectFault when what the subject left rules out a fair verification (the
    container it stopped cannot be started without running what it changed; a fresh-system
    format's protected paths cannot be put back).
    """
    if isinstance(sandbox, ChangeWatch) and task_format not in FRESH_SYSTEM_FORMATS:
        sandbox.ensure_running()
        report: dict[str, Any] = {"mechanism": LIVE_MECHANISM}
    elif isinstance(sandbox, ProtectedRestore):
        report = sandbox.restore_protected(scratch)
    else:
        report = {"mechanism": "none: this executor offers no restore of protected paths"}
    fresh_verifier_dirs(sandbox, tests, scratch)
    return report


def fresh_verifier_dirs(sandbox: Sandbox, tests: Path | None, scratch: Path) -> None:
    """``/logs/verifier`` and the verifier's HOME emptied, ``/tests`` copied in fresh (or removed).

    Where the sandbox lays the channel out itself (``VerdictChannel``), ``/tests`` and
    ``/logs/verifier`` are the verification's own where it can make them so (``close_verdict``
    after the reward was copied out); elsewhere they are the environment's.
    """
    empty = scratch / "empty-verifier-dir"
    empty.mkdir(exist_ok=True)
    if isinstance(sandbox, VerdictChannel):
        sandbox.put(empty, VERIFIER_HOME)
        sandbox.open_verdict(tests, scratch)
        return
    for path in (VERIFIER_LOGS_DIR, VERIFIER_HOME):
        sandbox.put(empty, path)  # put replaces whatever stands there, links included
    if tests is not None:
        sandbox.put(tests, TESTS_DIR)
    else:
        sandbox.remove(TESTS_DIR)


def close_verdict(sandbox: Sandbox) -> None:
    """End the verification's private channel, if the sandbox opened one (its reward was read)."""
    if isinstance(sandbox, VerdictChannel):
        sandbox.close_verdict()


def verdict_channel(sandbox: Sandbox) -> str:
    """The record's word on who could reach /tests and /logs/verifier during the verification."""
    if isinstance(sandbox, VerdictChannel):
        return sandbox.verdict_channel()
    return "shared: /tests and /logs/verifier are the environment's (docs/security.md, 'The verdict channel')"


def subject_cause(exc: BaseException) -> str | None:
    """Why ``exc`` is the subject's doing (what it left cannot be handled), or None."""
    if isinstance(exc, SubjectFault):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "the subject left directories nested too deeply"
    if isinstance(exc, UnicodeError):
        return f"the subject left a file name that is not valid text: {exc}"
    if isinstance(exc, OSError) and exc.errno in SUBJECT_ERRNOS:
        return f"the subject left a path the harness cannot follow: {exc.strerror}"
    return None


def salvage(notes: list[str], step: str, fn: Callable[[], T], partial: Path | None = None) -> T | None:
    """Run an informational step (copy-out, diff); note a failure the subject caused and go on.

    What the step left half-done at ``partial`` is removed: a half-copied tree thousands of
    levels deep would break every tool that later walks the output directory.
    """
    try:
        return fn()
    except (OSError, RecursionError, UnicodeError, SubjectFault) as exc:
        cause = subject_cause(exc)
        if cause is None:
            raise
        if partial is not None and os.path.lexists(partial):
            remove_path(partial)
            cause += " (the partial copy is not kept)"
        notes.append(f"{step}: {cause}")
        return None


def guarded(step: str, fn: Callable[[], T]) -> T:
    """Run a step the verdict depends on; a failure the subject caused becomes SubjectFault."""
    try:
        return fn()
    except SubjectFault:
        raise
    except (OSError, RecursionError, UnicodeError) as exc:
        cause = subject_cause(exc)
        if cause is None:
            raise
        raise SubjectFault(f"{step}: {cause}") from exc


def printable(path: str | bytes) -> str:
    """A path as record text: undecodable bytes shown as ``\\xNN``."""
    if isinstance(path, bytes):
        return path.decode("utf-8", "backslashreplace")
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

"""Attacks that really run on Docker, for what needs an image of its own: the image's
ENTRYPOINT and a git repository outside the workdir, each edited by the subject and then run
by the verifier. Each pass is tainted with the planted path, refused under
``policy.refuse_tainted``; the same verifier passes an honest subject untainted; and the
plant's mark is absent when the verifier starts (no step of the harness ran it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_maka.core.task import Task
from pytest_maka.executors.docker import DockerExecutor
from pytest_maka.testing.conformance import make_task
from pytest_maka.testing.conformance.taint import PLANT_MARK, TaintTests, marking_verifier

pytestmark = pytest.mark.docker


class DockerTaint(TaintTests):
    """The conformance suite's attack runner, as the Docker executor declares itself."""

    keeps_detached = True
    system_dirs_writable = True


def image_task(root: Path, dockerfile: str, files: dict[str, str]) -> Task:
    """The conformance task built from ``dockerfile`` (``files`` beside it, executable)."""
    env = root / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile + "WORKDIR /app\nCOPY workspace/ /app/\n")
    for name, text in files.items():
        (env / name).write_text(text)
        (env / name).chmod(0o755)
    return make_task(root)


@pytest.fixture
def executor(make_executor: Callable[..., DockerExecutor]) -> DockerExecutor:
    executor = make_executor()
    executor.check()
    return executor


#: The image's ENTRYPOINT, which the verifier also runs (a test that starts the service).
ENTRY = '#!/bin/sh\nexec "$@"\n'
#: The subject edits it, keeping it working, and leaves the container running.
EDIT_ENTRY = f"printf '#!/bin/sh\\ntouch /app/done.txt {PLANT_MARK}\\nexec \"$@\"\\n' > /maka-entry.sh"


def test_an_entrypoint_the_verifier_runs_is_tainted(executor: DockerExecutor, tmp_path: Path) -> None:
    task = image_task(
        tmp_path / "task",
        'FROM python:3.11-slim\nCOPY maka-entry.sh /maka-entry.sh\nENTRYPOINT ["/maka-entry.sh"]\n',
        {"maka-entry.sh": ENTRY},
    )
    record = DockerTaint()._marked_attack(
        executor, task, tmp_path, EDIT_ENTRY, marking_verifier("/maka-entry.sh true"), "/maka-entry.sh"
    )
    assert record["isolation"]["container_restarts"] == 0, "the edited entrypoint never ran as a restart"


#: An image with a repository outside the workdir, which the verifier inspects and commits to.
REPO_IMAGE = (
    "FROM python:3.11-slim\n"
    "RUN git init -q /opt/upstream && cd /opt/upstream && echo a > a.txt && git add a.txt"
    " && git -c user.name=t -c user.email=t@t commit -qm base\n"
)
GIT_TOOL = (
    "( cd /opt/upstream && git status --short && git diff"
    " && git -c user.name=v -c user.email=v@v commit -q --allow-empty -m verify )"
)


def script(path: str) -> str:
    """A program at ``path`` that marks its run in the workdir the subject ran in (git runs it
    in the repository) and passes on its input, as a textconv must."""
    return (
        f'printf \'#!/bin/sh\\ntouch %s/done.txt {PLANT_MARK}\\ncat "$1" 2>/dev/null\\n\' "$PWD" > {path}'
        f" && chmod 755 {path}"
    )


GIT_PLANTS = {
    # git status asks the repository's fsmonitor hook (its .git/config)
    "fsmonitor": (
        script("/opt/upstream/.git/maka") + " && git -C /opt/upstream config core.fsmonitor /opt/upstream/.git/maka",
        "/opt/upstream/.git/config",
    ),
    # git diff runs the textconv the repository's config and info/attributes name
    "textconv": (
        script("/opt/upstream/.git/maka") + " && git -C /opt/upstream config diff.maka.textconv /opt/upstream/.git/maka"
        " && echo '* diff=maka' > /opt/upstream/.git/info/attributes && echo b >> /opt/upstream/a.txt",
        "/opt/upstream/.git/config",
    ),
    # git commit runs the repository's pre-commit hook
    "hook": (script("/opt/upstream/.git/hooks/pre-commit"), "/opt/upstream/.git/hooks/pre-commit"),
}


@pytest.mark.parametrize("plant", sorted(GIT_PLANTS))
def test_git_code_in_a_repository_the_verifier_uses_is_tainted(
    executor: DockerExecutor, tmp_path: Path, plant: str
) -> None:
    task = image_task(tmp_path / "task", REPO_IMAGE, {})
    command, path = GIT_PLANTS[plant]
    DockerTaint()._marked_attack(executor, task, tmp_path, command + "; true", marking_verifier(GIT_TOOL), path)

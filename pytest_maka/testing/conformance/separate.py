"""Conformance of separate verifier environments (``environment_mode = "separate"``).

For executors whose ``features`` include ``"separate-verifier"`` (subclass
``SeparateVerifierTests`` and provide ``executor``). Each test runs one whole attempt of a
``command`` subject on a task whose verifier runs in a fresh environment and sees only
the artifact ``/app/done.txt``. The honest subject passes; no tamperer does: replacing
``/bin/sh`` or the test runner, writing reward files, planting tests, leaving a daemon,
hijacking the container's keeper or making the artifact a link.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ...core.task import Artifact, Task, VerifierEnvironment
from ...executors.base import Executor
from .base import ConformanceBase, make_task
from .tamper import DAEMON, KEEPER_HIJACK, PLANT_SITE, PLANT_TOOLS, TAMPERERS, TamperTests

ARTIFACT = "/app/done.txt"
#: Replaces every shell and the test runner (python3) with a script writing a passing reward.
REPLACE_SH = (
    PLANT_TOOLS + "cp /opt/realsh /tmp/sh 2>/dev/null; rm -f /bin/sh /usr/bin/sh; cp /usr/bin/python3 /bin/sh\n"
)

SEPARATE_TAMPERERS: dict[str, str] = {
    "reward-file": TAMPERERS["reward-file"],
    "workdir-module-hijack": TAMPERERS["workdir-module-hijack"] + "echo x > /app/planted.txt\n",
    "verifier-dir-symlink": TAMPERERS["verifier-dir-symlink"],
    "replaced-sh-and-runner": REPLACE_SH,
    "site-packages-hijack": PLANT_SITE,
    "planted-tests": "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh",
    "keeper-hijack": KEEPER_HIJACK,
    "daemon": DAEMON,
    "artifact-symlink": "ln -s /etc/hostname /app/done.txt",
    "artifact-via-linked-parent": "mkdir -p /srv/x && echo done > /srv/x/done.txt && rm -rf /app && ln -s /srv/x /app",
}


class SeparateVerifierTests(ConformanceBase):
    """Only the declared artifacts reach the separate verifier; tampering never passes."""

    #: The executor stops a setsid'd daemon (the daemon test needs it for cleanup).
    kills_whole_tree: ClassVar[bool] = True

    def make_task(self, root: Path) -> Task:
        """The conformance task, verified in a copy of its own environment with one artifact."""
        task = make_task(root)
        environment = VerifierEnvironment(
            build_context=task.environment_dir if task.dockerfile else None,
            dockerfile=task.dockerfile,
            docker_image=task.docker_image,
            bundled_tests=False,
            workdir=task.workdir,
        )
        return dataclasses.replace(task, verifier_environment=environment, artifacts=(Artifact(source=ARTIFACT),))

    def attempt(self, executor: Executor, task: Task, tmp_path: Path, command: str) -> dict[str, Any]:
        return TamperTests().attempt(executor, task, tmp_path, command)

    def test_honest_subject_passes_and_the_record_says_separate(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        record = self.attempt(executor, task, tmp_path, "echo done > done.txt; echo stray > stray.txt")
        assert record["status"] == "agent_success", record["error"]
        verifier = record["verifier"]
        assert verifier["environment"]["mode"] == "separate", verifier
        assert verifier["environment"]["image"], "the record names the image that verified"
        carried = {a["source"]: a for a in verifier["artifacts"]}
        assert carried[ARTIFACT]["bytes"] == len("done\n"), carried
        assert verifier["tamper"]["mechanism"].startswith("separate verifier environment")

    def test_a_linked_artifact_is_not_carried_and_says_so(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        record = self.attempt(executor, task, tmp_path, "echo x > /app/planted.txt; ln -s /etc/passwd /app/done.txt")
        assert record["status"] == "agent_failure", record["error"]
        entry = next(a for a in record["verifier"]["artifacts"] if a["source"] == ARTIFACT)
        assert entry["not_carried"] == "a symbolic link", entry

    def test_broken_tools_of_the_subject_do_not_reach_the_verifier(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        record = self.attempt(executor, task, tmp_path, REPLACE_SH + "echo done > /app/done.txt\n")
        assert record["status"] == "agent_success", record["error"]
        assert record["score"] == 1.0

    @pytest.mark.parametrize("name", sorted(SEPARATE_TAMPERERS))
    def test_tampering_never_passes_a_separate_verifier(
        self, executor: Executor, task: Task, tmp_path: Path, name: str
    ) -> None:
        if name == "daemon" and not self.kills_whole_tree:
            pytest.skip("this executor does not stop setsid'd daemons")
        record = self.attempt(executor, task, tmp_path, SEPARATE_TAMPERERS[name])
        assert record["status"] in ("agent_failure", "agent_incomplete"), record["error"]
        assert record["passed"] is False and record["official"] is True
        assert record["score"] == 0.0, "the real verifier ran in its own environment and found no done.txt"
        assert record["verifier"]["environment"]["mode"] == "separate"

"""The local sandbox shows the host's system read-only: a task whose solution must change it
cannot pass there, and the failed cell's record says so (``read_only_system``) instead of
reading as the agent's failure alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_maka.core.taint import READ_ONLY_NOTE, READ_ONLY_SCHEMA

from ..conftest import Cohort

TASKS = Path(__file__).parents[1] / "docker" / "honest_tasks"
#: (The pip-install twin copies a package in with its Dockerfile: the local executor skips it.)
WRITERS = ("command-in-usr-local-bin", "config-in-etc")


def test_tasks_needing_a_writable_system_fail_on_local_with_a_note(cohort: Cohort) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is needed for the local sandbox")
    for name in WRITERS:
        shutil.copytree(TASKS / name, cohort.tasks / name)
    cohort.task("plain", test="echo 0 > /logs/verifier/reward.txt\n")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run()
    records = cohort.results()
    assert len(records) == len(WRITERS) + 1, result.stdout.str()[-3000:]
    for name in WRITERS:
        r = records[f"{name}[oracle-r0]"]
        assert r["status"] in ("agent_failure", "agent_incomplete") and r["official"], r["error"]
        note = r["read_only_system"]
        assert note["schema"] == READ_ONLY_SCHEMA and note["needs_writable_system"], note
        assert "Read-only file system" in note["evidence"], note
        assert READ_ONLY_NOTE in r["error"]["message"], r["error"]
    plain = records["plain[oracle-r0]"]  # a failure that wrote nothing outside the workdir: no note
    assert plain["status"] == "agent_failure" and "read_only_system" not in plain, plain

"""The local sandbox shows no host file an unprivileged user could not read.

The subject runs as uid 0 with its capabilities dropped, so owner permissions would still let
it read root's 0600 files (the Docker engine's key under /etc/docker, /etc/default/cacerts):
a real cohort whose command subject (and whose verifier) tries to read a 0600 file with a
marker, placed in the host's /etc by the test, gets nothing; the honest twin still passes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.executors.local import bwrap

from ..conftest import Cohort


@pytest.fixture
def secret() -> Iterator[tuple[Path, Path, str]]:
    """A 0600 file and a 0700 directory holding one, in the host's /etc, each with a marker."""
    marker = f"maka-secret-{uuid.uuid4().hex}"
    path = Path(f"/etc/maka-test-{uuid.uuid4().hex[:8]}")
    folder = Path(f"/etc/maka-test-dir-{uuid.uuid4().hex[:8]}")
    path.write_text(marker + "\n")
    path.chmod(0o600)
    folder.mkdir(mode=0o700)
    (folder / "key").write_text(marker + "\n")
    (folder / "key").chmod(0o644)
    try:
        yield path, folder, marker
    finally:
        path.unlink()
        (folder / "key").unlink()
        folder.rmdir()


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the test writes into the host's /etc (needs root)")


def test_not_world_readable_entries_are_found(secret: tuple[Path, Path, str]) -> None:
    path, folder, _ = secret
    found = bwrap.not_world_readable("/etc")
    assert str(path) in found and str(folder) in found
    assert "/etc/passwd" not in found and not any(p.startswith(str(folder) + "/") for p in found)


def test_a_subject_and_its_verifier_read_no_root_only_host_file(cohort: Cohort, secret: tuple[Path, Path, str]) -> None:
    path, folder, marker = secret
    probe = f"cat {path} {folder}/key /etc/docker/key.json /etc/default/cacerts /etc/shadow 2>&1; ls -A {folder} 2>&1"
    cohort.task("leak", test=f"{probe} > /logs/verifier/seen.txt; echo 1 > /logs/verifier/reward.txt\n")
    cohort.task("honest")
    cohort.write(subjects=[{"name": "a", "kind": "command", "command": f"{{ {probe}; }} > /logs/agent/seen.txt; "
                            "cat /etc/passwd >/dev/null && echo ok > /app/done.txt"}])  # fmt: skip
    result = cohort.run_subprocess("-p", "no:cacheprovider")
    records = cohort.results()
    assert records["honest[a-r0]"]["status"] == "agent_success", result.stdout.str()[-2000:]
    leak = records["leak[a-r0]"]
    agent = (cohort.out / leak["artifacts"]["agent_logs"] / "seen.txt").read_text()
    verifier = (cohort.out / leak["artifacts"]["verifier_logs"] / "seen.txt").read_text()
    assert marker not in agent and marker not in verifier, (agent, verifier)
    for name in ("/etc/docker/key.json", "/etc/default/cacerts"):
        if os.path.isfile(name):  # shown as an empty file: the sandbox's cat prints nothing of it
            assert Path(name).read_text()[:16] not in agent

"""Docker: copy-out never keeps a link and is capped; env values stay off host command lines; storage caps."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pytest_maka.executors.copyout import CopyReport
from pytest_maka.executors.docker.executor import storage_support

from ..conftest import files_below
from .helpers import PATH, plain_task, request, run

pytestmark = pytest.mark.docker


def test_links_become_plain_files_and_nothing_is_read_through_them(make_executor, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        run(
            sandbox,
            "cd /logs/agent && ln -s /etc/shadow shadow && ln -s /proc/self/environ environ"
            " && ln -s ../../../../etc/passwd up && mkdir d && ln -s /root d/home && ln -s sub rel"
            " && mkfifo pipe && echo kept > plain.txt && ln plain.txt hard.txt",
            tmp_path,
        )
        report = CopyReport()
        assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
        data = b"".join(files_below(tmp_path / "copy").values())
        assert b"root:" not in data and b"PATH=" not in data
        assert (tmp_path / "copy" / "shadow").read_text() == "/etc/shadow"
        assert (tmp_path / "copy" / "d" / "home").read_text() == "/root"
        assert sorted(report.links) == sorted(
            [
                "agent/shadow -> /etc/shadow",
                "agent/environ -> /proc/self/environ",
                "agent/up -> ../../../../etc/passwd",
                "agent/d/home -> /root",
                "agent/rel -> sub",
            ]
        )
        assert any("pipe" in s for s in report.skipped)
        run(sandbox, "rm -rf /logs/agent && ln -s /etc /logs/agent", tmp_path)
        assert sandbox.get("/logs/agent", tmp_path / "whole", report=CopyReport())
        assert (tmp_path / "whole").is_file() and (tmp_path / "whole").read_text() == "/etc"


def test_copy_out_and_workspace_snapshot_are_capped(make_executor, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        run(
            sandbox,
            "for i in 1 2 3 4; do head -c 1048576 /dev/urandom > /logs/agent/f$i; cp /logs/agent/f$i .; done",
            tmp_path,
        )
        report = CopyReport(max_bytes=1536 * 1024)
        assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
        on_disk = sum(p.stat().st_size for p in (tmp_path / "copy").rglob("*") if p.is_file())
        assert report.truncated and on_disk == report.bytes <= 1536 * 1024
        snap = CopyReport(max_bytes=1024 * 1024)
        after = sandbox.workspace_snapshot(tmp_path / "snap", report=snap)
        assert snap.truncated and sum(p.stat().st_size for p in after.rglob("*") if p.is_file()) <= 1024 * 1024


def test_env_values_never_appear_on_a_host_command_line(make_executor, docker_api, tmp_path: Path) -> None:
    secret = "docker-cmdline-secret-77ab1"
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        command = 'echo "$KEY" > /tmp/seen; touch /tmp/ready; while [ ! -e /tmp/go ]; do sleep 0.01; done'
        box: dict[str, object] = {}

        def exec_with_secret() -> None:
            box["result"] = sandbox.exec(
                command,
                env={"PATH": PATH, "KEY": secret},
                timeout_sec=60,
                stdout_path=tmp_path / "o",
                stderr_path=tmp_path / "e",
            )

        worker = threading.Thread(target=exec_with_secret)
        worker.start()
        try:
            while worker.is_alive() and not sandbox.get("/tmp/ready", tmp_path / "ready"):
                worker.join(0.02)
            cmdlines = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
                except OSError:
                    continue
        finally:  # straight through the engine: the sandbox's own calls wait for the running exec
            docker_api.exec_start(docker_api.exec_create(sandbox.id, ["touch", "/tmp/go"])["Id"])
            worker.join(60)
        assert box["result"].exit_code == 0, box["result"]  # type: ignore[attr-defined]
        _, seen, _ = run(sandbox, "cat /tmp/seen", tmp_path)
        assert seen == secret + "\n", "the value reached the command"
        assert any(b"/tmp/ready" in c for c in cmdlines), "the scan saw the command running"
        assert not [c for c in cmdlines if secret.encode() in c]


def test_storage_is_capped_where_the_engine_can_and_recorded_where_not(make_executor, docker_api, tmp_path) -> None:
    task = plain_task(tmp_path / "t", storage_mb=64)
    why = storage_support(docker_api.info())
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        storage = sandbox.isolation(agent_network=False, verifier_network=False)["limits"]["storage"]
        assert storage["storage_mb"] == 64 and storage["enforced"] is (why is None)
        if why is None:
            _, out, err = run(sandbox, "dd if=/dev/zero of=/fill bs=1M count=200", tmp_path)
            assert "No space left" in out + err
        else:
            assert storage["note"] == why


def test_storage_support_reads_the_engine_driver() -> None:
    xfs = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}
    ext4 = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    assert storage_support(xfs) is None and storage_support({"Driver": "btrfs"}) is None
    assert "extfs" in (storage_support(ext4) or "")
    assert "vfs" in (storage_support({"Driver": "vfs"}) or "")


def test_memory_and_process_hogs_end_in_classified_results(cohort, docker_api, tmp_path_factory) -> None:
    cohort.task("t", extra_toml="memory_mb = 64\n")
    subjects = [
        {"name": "hog", "kind": "command", "command": "python3 -c 'x = bytearray(400 * 1024 * 1024)'"},
        {"name": "forker", "kind": "command", "command": "i=0; while [ $i -lt 300 ]; do sleep 20 & i=$((i+1)); done"},
        {"name": "oracle", "kind": "oracle"},
    ]
    state = str(tmp_path_factory.mktemp("state"))
    cohort.write(subjects=subjects, executor={"kind": "docker", "pids_limit": 64, "state_dir": state})
    cohort.run().assert_outcomes(passed=1, failed=2)
    records = cohort.results()
    assert records["t[oracle-r0]"]["status"] == "agent_success", "other cells are unaffected"
    assert records["t[hog-r0]"]["status"] == "agent_incomplete"
    forker = records["t[forker-r0]"]  # what it left running stays (a live environment) and fills the
    # process limit the verifier has: the subject's result, in the denominator, with the reason
    assert forker["status"] in ("agent_incomplete", "agent_failure") and forker["official"], forker["error"]
    if forker["status"] == "agent_failure":
        assert "process limit" in forker["error"]["message"], forker["error"]
    assert records["t[hog-r0]"]["isolation"]["limits"]["memory_mb"] == 64

"""Local executor: copy-out never follows or keeps a link, secrets stay off command lines, limits hold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.core.task import Task
from pytest_maka.executors.base import ExecResult
from pytest_maka.executors.copyout import CopyReport
from pytest_maka.executors.hostfs import remove_path
from pytest_maka.executors.local import LocalExecutor, LocalOptions, LocalSandbox, disk, limits
from pytest_maka.run.freeze import workspace_diff

from ..conftest import files_below

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.needs("bwrap"),
]

HOST_SECRET = "host-only-secret-3c9e"
ENV = {"PATH": "/usr/bin:/bin"}


def make_sandbox(tmp_path: Path, options: LocalOptions | None = None, **task_fields: object) -> LocalSandbox:
    task = Task(id="t", path=tmp_path, instruction="", digest="", **task_fields)  # type: ignore[arg-type]
    return LocalSandbox(task, tmp_path / "scratch", options or LocalOptions())


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    sb = make_sandbox(tmp_path)
    yield sb
    sb.close()


def run(sb: LocalSandbox, command: str, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[ExecResult, str]:
    out = tmp_path / "out.txt"
    result = sb.exec(command, env=env or ENV, timeout_sec=60, stdout_path=out, stderr_path=tmp_path / "err.txt")
    return result, out.read_text() + (tmp_path / "err.txt").read_text()


def tree_bytes(root: Path) -> bytes:
    return b"".join(files_below(root).values())


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    d = tmp_path / "host-home"
    (d / ".ssh").mkdir(parents=True)
    (d / ".ssh" / "id_ed25519").write_text(HOST_SECRET)
    (d / "notes.txt").write_text(HOST_SECRET)
    return d


def test_agent_logs_replaced_by_a_link_to_a_host_directory(
    sandbox: LocalSandbox, tmp_path: Path, host_dir: Path
) -> None:
    run(sandbox, f"rm -rf /logs/agent && ln -s {host_dir} /logs/agent", tmp_path)
    report = CopyReport()
    assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
    copy = tmp_path / "copy"
    assert copy.is_file() and not copy.is_symlink()
    assert copy.read_text() == str(host_dir), "the link is kept as a plain file holding its text"
    assert report.links == [f"agent -> {host_dir}"]


def test_links_to_host_secrets_are_never_read_through(sandbox: LocalSandbox, tmp_path: Path, host_dir: Path) -> None:
    links = {
        "shadow": "/etc/shadow",
        "environ": "/proc/self/environ",
        "ssh": f"{host_dir}/.ssh",
        "key": f"{host_dir}/.ssh/id_ed25519",
        "up": "../../../../../../../..",
        "rel": f"../../../../../../..{host_dir}/notes.txt",
    }
    script = "; ".join(f"ln -s '{target}' /logs/agent/{name}" for name, target in links.items())
    run(sandbox, f"mkdir -p /logs/agent/sub && {script} && ln -s /etc /logs/agent/sub/etc", tmp_path)
    report = CopyReport()
    assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
    data = tree_bytes(tmp_path / "copy")
    assert HOST_SECRET.encode() not in data and b"root:" not in data
    for name, target in links.items():
        assert (tmp_path / "copy" / name).read_text() == target
    assert len(report.links) == len(links) + 1
    assert sandbox.get("/logs/agent/ssh/id_ed25519", tmp_path / "through") is False, "no walk through a link"


def test_workspace_snapshot_is_the_live_dir_and_get_skips_hard_links(
    sandbox: LocalSandbox, tmp_path: Path, host_dir: Path
) -> None:
    _result, output = run(sandbox, "ln /etc/passwd /app/passwd-link; echo rc=$?", tmp_path)
    assert "rc=0" not in output, "a hard link across the sandbox's mounts must be refused by the kernel"
    # Plant one anyway, from the host side, as a file the sandbox could see would be.
    live = sandbox.workspace_snapshot(tmp_path / "unused")
    os.link(host_dir / "notes.txt", live / "hard")
    (live / "plain.txt").write_text("mine\n")
    report = CopyReport()
    assert sandbox.get("/app", tmp_path / "copy", report=report)
    assert HOST_SECRET.encode() not in tree_bytes(tmp_path / "copy")
    assert (tmp_path / "copy" / "plain.txt").read_text() == "mine\n"
    assert report.skipped == ["app/hard (hard link (2 names))"]


def test_fifos_and_deep_trees_neither_hang_nor_crash(sandbox: LocalSandbox, tmp_path: Path) -> None:
    deep = "/".join(["d"] * 1500)
    run(sandbox, f"cd /logs/agent && mkfifo pipe && mkdir -p {deep} && echo bottom > {deep}/f", tmp_path)
    report = CopyReport()
    try:
        assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
        assert (tmp_path / "copy" / deep / "f").read_text() == "bottom\n"
        assert report.skipped == ["agent/pipe (special file)"]
    finally:
        if (tmp_path / "copy").exists():
            remove_path(tmp_path / "copy")  # too deep for shutil.rmtree (pytest's tmp cleanup)


def test_copy_out_is_capped_and_says_so(sandbox: LocalSandbox, tmp_path: Path) -> None:
    run(sandbox, "for i in 1 2 3; do head -c 1048576 /dev/zero > /logs/agent/f$i; done", tmp_path)
    report = CopyReport(max_bytes=1536 * 1024)
    assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
    copied = sum(p.stat().st_size for p in (tmp_path / "copy").iterdir())
    assert copied == report.bytes == 1536 * 1024
    assert report.truncated and report.summary()["truncated"] is True
    entries = CopyReport(max_entries=2)
    sandbox.get("/logs/agent", tmp_path / "few", report=entries)
    assert entries.truncated and len(list((tmp_path / "few").iterdir())) == 1


def test_env_values_never_appear_on_a_command_line(sandbox: LocalSandbox, tmp_path: Path) -> None:
    secret = "cmdline-secret-5d1f0a"
    flag = sandbox.workspace_snapshot(tmp_path / "unused") / "go"
    command = 'echo "$KEY" > /app/seen; touch /app/ready; while [ ! -e /app/go ]; do sleep 0.01; done'
    ready = sandbox.workspace_snapshot(tmp_path / "unused") / "ready"
    box: dict[str, ExecResult] = {}
    worker = threading.Thread(target=lambda: box.update(r=run(sandbox, command, tmp_path, {**ENV, "KEY": secret})[0]))
    worker.start()
    try:
        while not ready.exists() and worker.is_alive():
            worker.join(0.01)
        cmdlines = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue
    finally:
        flag.touch()
        worker.join(30)
    assert box["r"].exit_code == 0
    assert (ready.parent / "seen").read_text() == secret + "\n", "the value reached the command"
    assert any(b"bwrap" in c for c in cmdlines), "the scan saw the running sandbox"
    assert not [c for c in cmdlines if secret.encode() in c]


needs_cgroups = pytest.mark.skipif(limits.mechanism() == "rlimit", reason="no writable cgroup hierarchy here")


@needs_cgroups
def test_memory_limit_kills_the_hog_and_says_so(tmp_path: Path) -> None:
    sb = make_sandbox(tmp_path, memory_mb=64)
    try:
        result, _ = run(sb, "python3 -c 'x = bytearray(300 * 1024 * 1024); print(len(x))'", tmp_path)
        assert result.exit_code != 0 and "memory" in result.limits_hit
        again, output = run(sb, "echo still-usable", tmp_path)
        assert again.exit_code == 0 and again.limits_hit == () and output == "still-usable\n"
        assert sb.isolation(agent_network=False, verifier_network=False)["limits"]["memory_mb"] == 64
    finally:
        sb.close()


@needs_cgroups
def test_pids_limit_stops_a_fork_bomb(tmp_path: Path) -> None:
    sb = make_sandbox(tmp_path, LocalOptions(pids_limit=32))
    try:
        result, output = run(sb, "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait", tmp_path)
        assert result.exit_code != 0 and "pids" in result.limits_hit, output
        assert not result.timed_out
    finally:
        sb.close()


def test_tmpfs_is_capped(tmp_path: Path) -> None:
    sb = make_sandbox(tmp_path, LocalOptions(tmpfs_mb=8))
    try:
        _, output = run(sb, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; stat -c %s /tmp/fill", tmp_path)
        assert "No space left on device" in output
        assert int(output.split()[-1]) <= 8 * 1024 * 1024
    finally:
        sb.close()


@pytest.mark.skipif(disk.unavailable() is not None, reason=f"no capped filesystem here: {disk.unavailable()}")
def test_storage_cap_keeps_a_disk_filler_inside_its_own_filesystem(tmp_path: Path) -> None:
    sb = make_sandbox(tmp_path, storage_mb=16)
    try:
        image = tmp_path / "scratch" / f"maka-disk-{os.getpid()}.img"
        _, output = run(sb, "dd if=/dev/zero of=/app/fill bs=1M count=200 2>&1; echo x > /logs/agent/after", tmp_path)
        assert "No space left on device" in output
        assert image.stat().st_blocks * 512 <= 17 * 1024 * 1024, "the image never takes more than its cap"
        assert sb.isolation(agent_network=False, verifier_network=False)["limits"]["storage"]["enforced"] is True
    finally:
        sb.close()
    assert not image.exists()
    with open("/proc/self/mounts") as f:
        assert str(tmp_path) not in f.read(), "the capped filesystem is unmounted with the lease"


@needs_cgroups
@pytest.mark.skipif(disk.unavailable() is not None, reason=f"no capped filesystem here: {disk.unavailable()}")
def test_what_a_killed_worker_left_is_swept_by_the_next_run(tmp_path: Path) -> None:
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom pytest_maka.core.task import Task\n"
        "from pytest_maka.executors.local import LocalOptions, LocalSandbox\n"
        f"task = Task(id='t', path=Path({str(tmp_path)!r}), instruction='', digest='', memory_mb=64, storage_mb=16)\n"
        f"sb = LocalSandbox(task, Path({str(tmp_path / 'scratch')!r}), LocalOptions())\n"
        "print(sb._limits.group.dirs[0], flush=True)\nsys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    cgroup = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert cgroup.is_dir() and str(tmp_path) in Path("/proc/self/mounts").read_text(), "SIGKILL left both"
    LocalExecutor(LocalOptions()).prepare([])
    assert not cgroup.exists()
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()
    assert not list((tmp_path / "scratch").glob("maka-disk-*.img"))


def test_names_and_link_targets_that_are_not_utf8_are_copied_and_described(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    run(sandbox, "cd /logs/agent && echo x > \"$(printf 'bad\\377')\" && ln -s \"$(printf '/t\\376')\" ln", tmp_path)
    report = CopyReport()
    assert sandbox.get("/logs/agent", tmp_path / "copy", report=report)
    assert (tmp_path / "copy" / os.fsdecode(b"bad\xff")).read_text() == "x\n"
    assert report.links == ["agent/ln -> /t\\xfe"]
    json.dumps(report.summary(), ensure_ascii=False).encode("utf-8")  # fit for the record
    diff, counts = workspace_diff(None, tmp_path / "copy")
    assert "b/bad\\xff" in diff and counts["added"] == 2
    diff.encode("utf-8")


def test_rlimit_fallback_bounds_each_process(tmp_path: Path) -> None:
    """Where no cgroup can be made (e.g. unprivileged without delegation): per-process rlimits."""
    sb = make_sandbox(tmp_path, memory_mb=64)
    sb._limits.close()
    sb._limits = limits.RlimitLimits(limits.LimitSpec(memory_mb=64, pids=None, file_mb=1))
    try:
        _, output = run(sb, "python3 -c 'x = bytearray(300 * 1024 * 1024)' 2>&1 | tail -1", tmp_path)
        assert "MemoryError" in output
        result, _ = run(sb, "head -c 3000000 /dev/zero > /app/big", tmp_path)
        assert result.exit_code != 0
        assert (sb.workspace_snapshot(tmp_path / "unused") / "big").stat().st_size == 1024 * 1024
        assert sb.isolation(agent_network=False, verifier_network=False)["limits"]["mechanism"] == "rlimit"
    finally:
        sb.close()

"""executors/docker/inroot.py on the real kernel: a file written through another process's root.

The process is a bubblewrap sandbox with a root and a process table of its own (as a
container has) and the test's network namespace (as the guard host's packet logger shares
the attempt container's): whatever links the sandbox leaves, nothing outside its root is
read or written.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.executors.docker import inroot

from ..conftest import needs_bwrap

pytestmark = needs_bwrap

PROXY = "nameserver 10.9.8.7\n"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(pid, its root's /etc on the host): a process whose root is ``tmp_path/root``."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "resolv.conf").write_text("nameserver 1.1.1.1\n")
    (root / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n10.0.0.5\told # maka-sidecar\n")
    argv = ["bwrap", "--bind", str(root), "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
            "--dev", "/dev", "--unshare-pid", "--die-with-parent", "sleep", "60"]  # fmt: skip
    proc = subprocess.Popen(argv)
    try:
        child = 0
        for _ in range(500):  # bwrap's child, the process in the new root
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if kids and Path(f"/proc/{kids[0]}/root/etc/hosts").exists():
                child = int(kids[0])
                break
            time.sleep(0.01)
        assert child, "the sandbox did not start"
        yield child, root / "etc"
    finally:
        proc.kill()
        proc.wait()


def _run(pid: int, hosts: str = "keep", resolv: str = PROXY) -> subprocess.CompletedProcess[str]:
    source = Path(inroot.__file__).read_text()
    what = resolv if resolv == "read" else "resolv:" + base64.b64encode(resolv.encode()).decode()
    return subprocess.run([sys.executable, "-I", "-S", "-c", source, str(pid), what, hosts],
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def test_resolv_conf_and_hosts_are_written_in_the_sandboxs_root(sandbox: tuple[int, Path]) -> None:
    pid, etc = sandbox
    read = _run(pid, "", "read")
    assert read.returncode == 0 and base64.b64decode(read.stdout) == b"nameserver 1.1.1.1\n", read
    lines = base64.b64encode(b"10.0.0.9\tdb # maka-sidecar\n").decode()
    done = _run(pid, f"strip:{lines}")
    assert done.returncode == 0, done.stderr
    assert (etc / "resolv.conf").read_text() == PROXY
    assert (etc / "hosts").read_text() == "127.0.0.1\tlocalhost\n10.0.0.9\tdb # maka-sidecar\n"
    assert _run(pid, "strip:", resolv="").returncode == 0, "an empty resolv.conf is still one argument"
    assert (etc / "hosts").read_text() == "127.0.0.1\tlocalhost\n", "the sidecars' lines taken out again"
    assert (etc / "resolv.conf").read_text() == ""


def test_an_absolute_link_resolves_inside_the_sandbox_not_on_the_host(
    sandbox: tuple[int, Path], tmp_path: Path
) -> None:
    pid, etc = sandbox
    outside = tmp_path / "outside.txt"  # exists on the host, not below the sandbox's root
    outside.write_text("host file\n")
    (etc / "resolv.conf").unlink()
    (etc / "resolv.conf").symlink_to(outside)
    done = _run(pid)
    assert done.returncode == inroot.REFUSED, "nothing of that name in the sandbox"
    assert outside.read_text() == "host file\n"
    (etc / "resolv.conf").unlink()
    (etc / "resolv.conf").symlink_to("../../../../../../../etc/mine")
    (etc / "mine").write_text("x\n")
    assert _run(pid).returncode == 0
    assert (etc / "mine").read_text() == PROXY, "'..' stops at the sandbox's root"


def test_links_through_proc_devices_and_pipes_are_refused(sandbox: tuple[int, Path]) -> None:
    pid, etc = sandbox
    before = Path("/etc/hostname").read_text()
    (etc / "resolv.conf").unlink()
    (etc / "resolv.conf").symlink_to(f"/proc/{os.getpid()}/root/etc/hostname")
    done = _run(pid)
    assert done.returncode == inroot.REFUSED, "the sandbox's /proc shows only its own processes"
    assert Path("/etc/hostname").read_text() == before
    assert _run(pid, "", "read").returncode == inroot.REFUSED, "nor is the host's file read"
    (etc / "resolv.conf").unlink()
    os.mkfifo(etc / "resolv.conf")
    assert _run(pid).returncode == inroot.REFUSED, "a pipe would block the writer"
    (etc / "resolv.conf").unlink()
    (etc / "resolv.conf").symlink_to("/dev/null")
    assert _run(pid).returncode == inroot.REFUSED


def test_a_process_of_another_network_namespace_is_refused(tmp_path: Path) -> None:
    """A process id reused by someone else (here: a sandbox with its own network) is not written."""
    root = tmp_path / "r"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "resolv.conf").write_text("mine\n")
    argv = ["bwrap", "--bind", str(root), "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--unshare-net",
            "--die-with-parent", "sleep", "60"]  # fmt: skip
    proc = subprocess.Popen(argv)
    try:
        for _ in range(500):
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if kids:
                break
            time.sleep(0.01)
        done = _run(int(kids[0]))
        assert done.returncode == inroot.REFUSED and "no longer the sandbox's" in done.stderr, done.stderr
        assert (root / "etc" / "resolv.conf").read_text() == "mine\n"
    finally:
        proc.kill()
        proc.wait()

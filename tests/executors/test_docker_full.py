"""The Docker executor's full-disk rule (``executors/docker/full.py``) on real small filesystems.

A tmpfs of 2 MB stands for the disk of a container's writable layer: its ``upper`` directory
is the layer, a sibling directory is something else on the same disk. Filling it is real
(ENOSPC from the kernel); the engine's refusal is the ``APIError`` docker-py raises for it.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from pytest_maka.core.errors import InfraError, SubjectFault
from pytest_maka.executors.docker.full import LayerSpace, engine_full, judged

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

REFUSAL = (
    "Error processing tar file(exit status 1): mkdir /var/lib/docker/overlay2/x/merged/tests: no space left on device"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs with 512 inodes, unmounted after the test."""
    root = tmp_path / "disk"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,nr_inodes=512", "tmpfs", str(root)], check=True)
    (root / "upper").mkdir()
    (root / "harness").mkdir()  # the harness's own directory, made before the disk fills
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _fill(where: Path, *, inodes: bool = False) -> OSError:
    """Write into ``where`` until the disk says no; the error it said it with."""
    where.mkdir(exist_ok=True)
    for i in range(100_000):
        try:
            if inodes:
                (where / f"f{i}").touch()
            else:
                with open(where / f"f{i}", "wb") as f:
                    f.write(b"\0" * 256 * 1024)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            return exc
    raise AssertionError("the disk never filled")


def _refusal() -> docker.errors.APIError:
    return docker.errors.APIError("500 Server Error", explanation=REFUSAL)


@pytest.mark.parametrize("inodes", [False, True], ids=["space", "inodes"])
def test_the_layer_filling_its_disk_is_the_subject_s_fault(disk: Path, inodes: bool) -> None:
    space = LayerSpace(capped=False, upper=disk / "upper")
    _fill(disk / "upper" / "app", inodes=inodes)
    fault = space.fault(_refusal(), "sending /tests into the container")
    assert isinstance(fault, SubjectFault) and "the subject filled it" in str(fault)
    assert space.full_now() is not None  # what kept a verifier from writing its reward
    host_write = _fill(disk / "harness")  # the harness's own host directory on that disk
    step = "laying out the verification's host directories"
    assert isinstance(space.fault(host_write, step, disk / "harness"), SubjectFault)


def test_a_disk_something_else_filled_is_no_evidence(disk: Path) -> None:
    space = LayerSpace(capped=False, upper=disk / "upper")
    (disk / "upper" / "output.txt").write_text("wrong\n")
    _fill(disk / "elsewhere")
    assert space.fault(_refusal(), "sending /tests into the container") is None
    assert space.full_now() is None
    with pytest.raises(InfraError), judged(space, "reading the image's workdir"):
        raise InfraError(f"docker engine unix:///x: reading the image's workdir failed: {REFUSAL}")


def test_a_host_write_on_another_disk_is_no_evidence(disk: Path, tmp_path: Path) -> None:
    space = LayerSpace(capped=False, upper=disk / "upper")
    _fill(disk / "upper" / "app")
    other = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "scratch" / "x"))
    assert space.fault(other, "laying out the verification's host directories") is None


def test_a_capped_layer_or_a_remote_engine() -> None:
    """A capped layer (storage_opt size) is full by the subject's doing alone; without a
    readable upper directory (a remote engine) nothing is evidence."""
    capped = LayerSpace(capped=True, upper=None)
    with pytest.raises(SubjectFault, match="capped disk"), judged(capped, "sending /tests into the container"):
        raise _refusal()
    assert LayerSpace(capped=False, upper=None).fault(_refusal(), "sending /tests") is None
    assert not engine_full(docker.errors.APIError("500", explanation="directory not empty"))
    assert not engine_full(OSError(errno.EACCES, "denied"))

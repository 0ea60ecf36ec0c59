"""A size-capped filesystem for a local sandbox's writable directories (workdir, /logs, uploads).

Without one, a subject that fills its workdir fills the host's disk. As root, each lease
that asks for ``storage_mb`` gets a sparse ext4 image in its scratch directory, loop-mounted
(``nosuid,nodev``) for the life of the lease: a full disk is ``ENOSPC`` inside the sandbox
and nowhere else, and the image never takes more host space than the cap. Elsewhere
(unprivileged, no ``mkfs.ext4``) the cap is not enforced and the record says so; each
file stays capped by ``RLIMIT_FSIZE`` (see ``limits``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from .process import pid_alive

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_PREFIX = "maka-disk-"
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,lazy_journal_init=1")


def unavailable() -> str | None:
    """Why no capped filesystem can be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (loop-mounted image)"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    return None


class CappedDisk:
    """A loop-mounted ext4 image of ``size_mb`` at ``mount_point``; ``close`` removes both."""

    def __init__(self, scratch: Path, size_mb: int) -> None:
        self.size_mb = size_mb
        self.image = scratch / f"{IMAGE_PREFIX}{os.getpid()}.img"  # the owner's pid: see sweep()
        self.mount_point = scratch / "disk"
        self._mounted = False
        self.mount_point.mkdir(mode=0o700)
        try:
            with open(self.image, "xb") as f:
                f.truncate(size_mb * 1024 * 1024)  # sparse: host space is used only as written
            _run([*MKFS, str(self.image)])
            _run(["mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mount_point)])
            self._mounted = True
            (self.mount_point / "lost+found").rmdir()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._mounted:
            self._mounted = False
            try:
                _run(["umount", str(self.mount_point)])
            except OSError:
                _run(["umount", "-l", str(self.mount_point)])  # busy: detach now, freed when idle
        with contextlib.suppress(OSError):
            self.image.unlink()
        with contextlib.suppress(OSError):
            self.mount_point.rmdir()


def sweep() -> list[str]:
    """Unmount the capped filesystems of leases whose process died (SIGKILL skips ``close``)."""
    removed: list[str] = []
    with contextlib.suppress(OSError):
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[:2] for line in f]
        for source, point in mounts:
            if not source.startswith("/dev/loop"):
                continue
            try:
                backing = Path(f"/sys/block/{Path(source).name}/loop/backing_file").read_text().strip()
            except OSError:
                continue
            name = Path(backing).name
            pid = name.removeprefix(IMAGE_PREFIX).removesuffix(".img")
            if name.startswith(IMAGE_PREFIX) and pid.isdigit() and not pid_alive(int(pid)):
                point = point.replace("\\040", " ")
                with contextlib.suppress(OSError):
                    _run(["umount", "-l", point])
                    removed.append(point)
                with contextlib.suppress(OSError):
                    Path(backing).unlink()
    return removed


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env={"PATH": SYSTEM_PATH})
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise OSError(f"{argv[0]} failed: {detail[0] if detail else f'exit code {proc.returncode}'}")

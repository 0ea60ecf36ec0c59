"""A full disk at the harness's own write into a local lease: whose doing it is.

The harness writes into the lease's directories after the subject stopped (the tests, an
empty ``/logs/verifier``). When that write finds no space or no inode left, the attempt is the
subject's failure (``SubjectFault``) only on evidence the subject could not have produced:
the directories are on the lease's own capped disk (``storage_mb``: nothing else writes
there), or the lease's own files hold most of what the filesystem had free when the lease
began. Otherwise something else filled the host's disk: an infrastructure failure.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ...core.errors import SubjectFault
from ..hostfs import scan_tree

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Below this many free bytes a disk counts as full (a reward file needs a block or two).
MIN_FREE_BYTES = 64 * 1024
#: The share of what was free at the lease's start that its own files must hold.
SHARE = 0.9


def is_full(exc: OSError) -> bool:
    """Whether ``exc`` says the disk or its inode table is full (``shutil.Error`` lists them as text)."""
    if exc.errno in FULL_ERRNOS:
        return True
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        words = tuple(os.strerror(n) for n in FULL_ERRNOS)
        return any(any(w in str(item) for w in words) for item in exc.args[0])
    return False


class SpaceWatch:
    """What the lease's filesystem had free at its start, to judge a full disk later."""

    def __init__(self, area: Path, *, capped: bool) -> None:
        self.area = area
        self.capped = capped
        st = os.statvfs(area)
        self.free_bytes = st.f_bavail * st.f_frsize
        self.free_inodes = st.f_favail

    def fault(self, exc: OSError, step: str) -> SubjectFault | None:
        """The subject's fault for a full disk at ``step``, or None (not full, or not its doing)."""
        if not is_full(exc):
            return None
        if self.capped:
            return SubjectFault(f"{step}: the lease's own disk (storage_mb) is full: the subject filled it")
        used_bytes, used_inodes = usage(self.area, self.free_bytes * SHARE, self.free_inodes * SHARE)
        if used_bytes >= self.free_bytes * SHARE or used_inodes >= self.free_inodes * SHARE:
            return SubjectFault(
                f"{step}: the disk is full and the subject's own files hold {used_bytes} bytes in "
                f"{used_inodes} entries (of {self.free_bytes} bytes, {self.free_inodes} inodes free at the start)"
            )
        return None

    def full_now(self) -> str | None:
        """On the lease's own capped disk only: "no space" or "no inode" left, else None."""
        if not self.capped:
            return None
        try:
            st = os.statvfs(self.area)
        except OSError:
            return None
        if st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
            return "the lease's own disk (storage_mb) has no space left"
        if st.f_favail == 0:
            return "the lease's own disk (storage_mb) has no inode left"
        return None


def usage(root: Path, enough_bytes: float, enough_inodes: float) -> tuple[int, int]:
    """Bytes allocated and entries below ``root`` (links not followed); stops once either is enough."""
    used = count = 0
    for _, st in scan_tree(str(root), lambda _, __: True):
        count += 1
        used += st.st_blocks * 512
        if used >= enough_bytes or count >= enough_inodes:
            return used, count
    return used, count

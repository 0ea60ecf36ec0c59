"""A full disk at the harness's own write into a container: whose doing it is.

After the subject stopped, the harness writes into the container's writable layer (the empty
``/logs/verifier`` and ``/tests``, or the tests themselves) and, for the private verdict
channel, into host directories. When such a write finds no space or no inode left, the
attempt is the subject's failure (``SubjectFault``) only on evidence it could not have
produced, as on the local executor (``executors/local/full.py``):

- the container's writable layer is capped (``storage_mb`` enforced by the engine's
  ``storage_opt size``): nothing but the container writes there;
- or the engine runs on this host, its storage driver has an upper directory this process
  can read, the failed write was on that directory's filesystem, and the layer's own files
  hold at least 90% of the bytes or inodes that filesystem had free when the lease began.

Otherwise (a remote engine, a write on another filesystem, a disk something else filled) it
stays an infrastructure failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker.errors

from ...core.errors import InfraError, SubjectFault
from ..local.full import MIN_FREE_BYTES, SHARE, is_full, usage
from .watch import local_root

#: What the engine answers when the container's filesystem has no block or inode left.
ENGINE_FULL = ("no space left on device", "disk quota exceeded")


def engine_full(exc: BaseException) -> bool:
    """Whether a host write, or an engine call (its refusal, or the InfraError the engine's
    guard made of it), failed for want of space or inodes."""
    if isinstance(exc, (docker.errors.APIError, InfraError)):  # (an APIError is an OSError too)
        text = str(exc.explanation or exc) if isinstance(exc, docker.errors.APIError) else str(exc)
        return any(word in text.lower() for word in ENGINE_FULL)
    return isinstance(exc, OSError) and is_full(exc)


class LayerSpace:
    """What the filesystem of a container's writable layer had free when the lease began."""

    def __init__(self, *, capped: bool, upper: Path | None) -> None:
        self.capped = capped
        self.upper = upper
        self.device: int | None = None
        self.free_bytes = self.free_inodes = 0
        if upper is not None:
            st = os.statvfs(upper)
            self.free_bytes, self.free_inodes = st.f_bavail * st.f_frsize, st.f_favail
            self.device = os.stat(upper).st_dev

    @classmethod
    def measure(cls, api: Any, container: str, *, capped: bool) -> LayerSpace:
        """At the lease's start: the upper directory when the engine runs here (else no evidence
        beyond the cap). The caller holds the engine's guard."""
        found = local_root(api, container)
        try:
            return cls(capped=capped, upper=Path(found[0]) if found else None)
        except OSError:  # the directory went between the inspection and the statvfs
            return cls(capped=capped, upper=None)

    def fault(self, exc: BaseException, step: str, host_path: Path | None = None) -> SubjectFault | None:
        """The subject's fault for a full disk at ``step``, or None (not full, or no evidence it
        was the subject's). ``host_path``: where a host write failed (default: the error's file)."""
        if not engine_full(exc):
            return None
        if isinstance(exc, OSError) and not isinstance(exc, docker.errors.APIError):
            # a host write: evidence only when it was on the disk of the container's layer
            where = host_path or (Path(exc.filename) if isinstance(exc.filename, str) else None)
            if where is None or not self._same_disk(where):
                return None
        elif self.capped:
            return SubjectFault(f"{step}: the container's own capped disk (storage_mb) is full: the subject filled it")
        if self.upper is None:
            return None
        used_bytes, used_inodes = usage(self.upper, self.free_bytes * SHARE, self.free_inodes * SHARE)
        if used_bytes >= self.free_bytes * SHARE or used_inodes >= self.free_inodes * SHARE:
            return SubjectFault(
                f"{step}: the disk is full and the container's writable layer holds {used_bytes} bytes in"
                f" {used_inodes} entries (of {self.free_bytes} bytes, {self.free_inodes} inodes free at the"
                " lease's start): the subject filled it"
            )
        return None

    def full_now(self) -> str | None:
        """Why the layer's disk is full now (no space or no inode left) when the layer's own
        files account for it (the verifier could not write its reward), else None."""
        if self.upper is None:
            return None
        try:
            st = os.statvfs(self.upper)
        except OSError:
            return None
        if st.f_bavail * st.f_frsize >= MIN_FREE_BYTES and st.f_favail > 0:
            return None
        what = "no space" if st.f_bavail * st.f_frsize < MIN_FREE_BYTES else "no inode"
        if self.capped:
            return f"the container's own capped disk (storage_mb) has {what} left"
        used_bytes, used_inodes = usage(self.upper, self.free_bytes * SHARE, self.free_inodes * SHARE)
        if used_bytes >= self.free_bytes * SHARE or used_inodes >= self.free_inodes * SHARE:
            return f"the container's disk has {what} left, filled by its writable layer ({used_bytes} bytes)"
        return None

    def _same_disk(self, path: Path) -> bool:
        if self.device is None:
            return False
        for candidate in (path, *path.parents):
            try:
                return os.stat(candidate).st_dev == self.device
            except OSError:
                continue
        return False


@contextmanager
def judged(space: LayerSpace, step: str, host_path: Path | None = None) -> Iterator[None]:
    """Run a harness step after the subject: a full disk its layer accounts for is its fault."""
    try:
        yield
    except (OSError, InfraError, docker.errors.APIError) as exc:
        fault = space.fault(exc, step, host_path)
        if fault is None:
            raise
        raise fault from exc

"""File content in and out of a sandbox, shared by the executors: ``write_file`` through ``put``."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Protocol


class _Puts(Protocol):
    def put(self, host_path: Path, sandbox_path: str) -> None: ...


def write_via_put(sandbox: _Puts, sandbox_path: str, data: bytes, scratch: Path | None = None) -> None:
    """Write ``data`` to a host temp file and ``put`` it (put replaces links, never follows them)."""
    fd, name = tempfile.mkstemp(prefix="maka-write-", dir=scratch)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(name, 0o644)
        sandbox.put(Path(name), sandbox_path)
    finally:
        os.unlink(name)


def read_regular(path: Path, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of the regular file at ``path``; a symlink or special file is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise FileNotFoundError(f"no regular file at {path.name}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        return f.read(max(0, max_bytes))

"""Generated task material (filtered copies, solution scripts, build contexts) on the host.

Each entry is written once under a content key and renamed into place, so concurrent
processes (xdist workers) that load the same tasks agree without locks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    """``$MAKA_CACHE_DIR`` or a per-user directory under the system temp dir."""
    configured = os.environ.get("MAKA_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"pytest-maka-{os.getuid()}" / "tasks"


def materialize(kind: str, key: str, build: Callable[[Path], None]) -> Path:
    """The directory ``kind/key``, built by ``build(tmp_dir)`` the first time it is asked for."""
    dest = cache_root() / kind / key
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=dest.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # not lost to a concurrent writer of the same content
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest

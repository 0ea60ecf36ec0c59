"""The container's writable layer, read through the engine: every path the subject wrote.

The engine's change list (``GET /containers/{id}/changes``) compares metadata for files the
image already has: a file rewritten with its size kept and its mtime set back is not
listed. An overlay filesystem cannot hide such a write: the kernel copies the file up into
the container's writable ("upper") directory before the first byte is written, and no
program in the container can undo that (nor set the copy's ctime back). The upper
directory is bind-mounted read-only into the never-started reference container of the
restore, and its protected roots are listed from there with the archive API: no program
runs, in the subject's container or anywhere else.

A deletion is an overlay whiteout (a 0:0 character device). A directory the subject
replaced wholesale (an opaque directory) shows as a directory; the entries it hides are
deletions the engine's own list reports.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable
from typing import Any

from ...core.errors import SubjectFault
from .manifest import Chunks, outermost

#: Where the upper directory appears in the reference container.
MOUNT = "/.maka-layer"
#: More than this read from the protected part of the layer (names and contents): refused.
MAX_BYTES = 2 << 30
#: More entries than this: the attempt is refused (restoring them one by one is not sensible).
MAX_ENTRIES = 100_000

DELETED, PRESENT = 2, 0


def upper_dir(api: Any, container: str) -> str | None:
    """The host path of the container's writable layer, when its storage driver has one."""
    driver = api.inspect_container(container).get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    return upper if isinstance(upper, str) and upper.startswith("/") else None


def bind(upper: str) -> dict[str, dict[str, str]]:
    """The ``binds`` of a reference container that shows ``upper`` read-only at MOUNT."""
    return {upper: {"bind": MOUNT, "mode": "ro"}}


def entries(api: Any, reader: str, roots: Iterable[str]) -> list[tuple[str, int]]:
    """(path, DELETED | PRESENT) for every entry of the layer below ``roots``, read from ``reader``.

    Raises SubjectFault when the subject left more than the caps allow, or something the
    engine cannot archive (a path too long for it).
    """
    out: list[tuple[str, int]] = []
    budget = [MAX_BYTES]
    for root in outermost(roots):
        try:
            chunks, _stat = api.get_archive(reader, MOUNT + root, chunk_size=1 << 20)
        except Exception as exc:
            if getattr(exc, "status_code", None) == 404:
                continue  # the subject wrote nothing there
            raise
        parent = posixpath.dirname(root)
        stream = io.BufferedReader(Chunks(chunks, budget), 1 << 20)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    whiteout = member.ischr() and member.devmajor == 0 and member.devminor == 0
                    name = _as_engine_reports(posixpath.join(parent, member.name))
                    out.append((name, DELETED if whiteout else PRESENT))
                    if len(out) > MAX_ENTRIES:
                        raise SubjectFault(f"the subject changed more than {MAX_ENTRIES} protected paths")
        except tarfile.TarError as exc:  # the engine cut the archive short: it could not read a path
            raise SubjectFault(
                f"the engine cannot read what the subject wrote under {root} ({exc}): "
                "a path there is too long or too deep for it"
            ) from None
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    return out


def _as_engine_reports(path: str) -> str:
    """Bytes that are not UTF-8 as U+FFFD, as the engine's change list shows them."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

"""An attempt's directory as bytes: packed on the Dask worker, unpacked by the controller.

No shared filesystem is needed between them: the worker runs the attempt into a private
directory and sends its files, gzipped in one tar, through Dask with the result. At most
``cap`` bytes of file content travel; files past the cap (taken in path order, so the
small record-keeping files of an attempt are kept before a huge log) are left out and
listed in the record's ``transfer``. Only regular files and directories are packed: an
attempt directory holds no live link (copy-out turns links into plain files), and
anything else is listed as skipped. The controller extracts member by member (``untar``:
tarfile's ``data`` filter rules, on every Python), so a bad member is skipped and listed, never written outside
the attempt directory, and never costs the rest.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from . import untar

#: Names kept in ``transfer.dropped`` / ``transfer.skipped`` (the counts are always exact).
MAX_LISTED = 50


def _note(listing: list[str], item: str) -> None:
    if len(listing) < MAX_LISTED:
        listing.append(item)


def pack(directory: Path, cap: int) -> tuple[bytes, dict[str, Any]]:
    """(a tar.gz of ``directory``, the facts for the record's ``transfer``)."""
    buffer = io.BytesIO()
    sent = files = dropped_count = 0
    dropped: list[str] = []
    skipped: list[str] = []
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for dirpath, dirnames, filenames in os.walk(directory):  # never into a linked directory
            dirnames.sort()
            base = Path(dirpath)
            for name in [*dirnames, *sorted(filenames)]:
                path = base / name
                rel = path.relative_to(directory).as_posix()
                info = path.lstat()
                if stat.S_ISDIR(info.st_mode):
                    tar.add(path, arcname=rel, recursive=False)
                elif not stat.S_ISREG(info.st_mode):
                    _note(skipped, rel)
                elif sent + info.st_size > cap:
                    dropped_count += 1
                    _note(dropped, f"{rel} ({info.st_size} bytes)")
                else:
                    tar.add(path, arcname=rel, recursive=False)
                    sent += info.st_size
                    files += 1
    facts: dict[str, Any] = {"bytes": sent, "files": files, "cap_bytes": cap, "compressed_bytes": buffer.tell()}
    if dropped_count:
        facts.update(dropped_count=dropped_count, dropped=dropped)
    if skipped:
        facts["skipped"] = skipped
    return buffer.getvalue(), facts


def unpack(data: bytes, target: Path) -> list[str]:
    """Extract the worker's tarball into ``target``; the members refused (kept out)."""
    refused: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in untar.extract(tar, target):
            _note(refused, member.name)
    return refused

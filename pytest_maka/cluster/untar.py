"""Safe extraction of a tar stream into one directory, on every Python the project supports.

tarfile's extraction filters exist only from Python 3.11.4 (Debian 12 ships 3.11.2), so this
module does what the ``data`` filter does, member by member, itself: a member whose name
climbs out with ``..`` (a leading ``/`` is dropped), a link that points outside the directory, a device, a FIFO
or a hard link is refused; a file never follows a link on its way in; modes lose their set-id
and group/other write bits. Nothing is written outside ``target``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
from pathlib import Path, PurePosixPath


class UnsafeMember(ValueError):
    """A member that would be written outside the target, or is not a file, directory or safe link."""


def _relative(name: str) -> PurePosixPath | None:
    path = PurePosixPath(name.lstrip("/"))  # as the data filter does: an absolute name lands inside
    if ".." in path.parts:
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    return PurePosixPath(*parts) if parts else None


def _inside(root: Path, path: str) -> bool:
    """Whether ``path`` (already resolved) is ``root`` or below it."""
    return path == str(root) or path.startswith(str(root) + os.sep)


def _mode(member: tarfile.TarInfo, directory: bool) -> int:
    mode = member.mode & 0o755 & ~(stat.S_ISUID | stat.S_ISGID)
    return mode | (0o700 if directory else 0o600)


def _link_ok(root: Path, parent: str, linkname: str) -> bool:
    """A relative link whose target, from its real directory, stays inside ``root``."""
    if posixpath.isabs(linkname):
        return False
    return _inside(root, os.path.realpath(posixpath.join(parent, linkname)))


def extract(tar: tarfile.TarFile, target: Path, *, links: bool = False) -> list[tarfile.TarInfo]:
    """Extract every safe member of ``tar`` into ``target``; the members refused.

    ``links``: keep symbolic links that stay inside ``target`` (otherwise they are refused).
    """
    target.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(target))
    refused: list[tarfile.TarInfo] = []
    directories: list[tuple[Path, int]] = []
    for member in tar:
        rel = _relative(member.name)
        if rel is None:
            refused.append(member)
            continue
        parent = os.path.realpath(root.joinpath(*rel.parts[:-1]))
        if not _inside(root, parent):
            refused.append(member)
            continue
        Path(parent).mkdir(parents=True, exist_ok=True)
        dest = Path(parent, rel.name)
        if member.isdir():
            if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
                refused.append(member)
                continue
            dest.mkdir(exist_ok=True)
            directories.append((dest, _mode(member, True)))
        elif member.isfile():
            source = tar.extractfile(member)
            if source is None:
                refused.append(member)
                continue
            if dest.is_symlink() or dest.is_dir():
                refused.append(member)
                continue
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            with source, os.fdopen(os.open(dest, flags, 0o600), "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(dest, _mode(member, False))
            os.utime(dest, (member.mtime, member.mtime))
        elif member.issym() and links and _link_ok(root, parent, member.linkname):
            if dest.is_symlink() or dest.exists():
                refused.append(member)
                continue
            os.symlink(member.linkname, dest)
        else:
            refused.append(member)
    for path, mode in reversed(directories):
        os.chmod(path, mode)
    return refused

"""Host-side file helpers for sandboxes whose files live on this machine.

None of them follows a symlink the subject planted, and all of them cope with files and
directories the subject made read-only.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def descend(base: Path, parts: list[str], *, make: bool, unlink_blockers: bool = False) -> Path | None:
    """Walk ``parts`` below ``base`` through real directories only.

    A symlink or file standing where a directory should be is replaced by a directory
    (``make``), deleted (``unlink_blockers``), or makes the walk return None. Directories
    on the way get back the owner permissions the walk needs, should the subject have
    removed them.
    """
    need = 0o700 if make or unlink_blockers else 0o500
    current = base
    _ensure_mode(base, os.lstat(base).st_mode, need)
    for name in parts:
        current = current / name
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            _ensure_mode(current, mode, need)
            continue
        if mode is not None and (make or unlink_blockers):
            remove_path(current)
        if not make:
            return None
        current.mkdir()
    return current


def copy_out(source: Path, dest: Path) -> bool:
    """Copy regular files, directories and symlinks (as links); skip fifos, sockets, devices."""
    st = os.lstat(source)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), dest)
    elif stat.S_ISDIR(st.st_mode):
        _ensure_mode(source, st.st_mode, 0o500)
        dest.mkdir()
        with os.scandir(source) as entries:
            for entry in entries:
                copy_out(Path(entry.path), dest / entry.name)
        dest.chmod(stat.S_IMODE(st.st_mode) | 0o700)
    elif stat.S_ISREG(st.st_mode):
        _ensure_mode(source, st.st_mode, 0o400)
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as src, open(dest, "xb") as dst:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                return False
            shutil.copyfileobj(src, dst, 1024 * 1024)
        dest.chmod(stat.S_IMODE(st.st_mode) | 0o600)
    else:
        return False
    return True


def _ensure_mode(path: Path, mode: int, bits: int) -> None:
    """Give the owner ``bits`` on ``path`` if the subject took them away."""
    if stat.S_IMODE(mode) & bits != bits:
        path.chmod(stat.S_IMODE(mode) | bits)


def remove_path(path: Path) -> None:
    """Delete a file, link or whole tree, even where the subject removed write permission."""
    if not os.path.isdir(path) or os.path.islink(path):
        path.unlink()
        return
    os.chmod(path, 0o700)
    for root, dirs, _files in os.walk(path):
        for name in dirs:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path)


def clear_dir(path: Path) -> None:
    """Empty a directory but keep it (it is a bind source)."""
    for entry in os.listdir(path):
        remove_path(path / entry)

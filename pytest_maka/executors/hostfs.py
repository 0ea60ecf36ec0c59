"""Host-side file helpers for sandboxes whose files live on this machine.

None of them follows a symlink the subject planted, and all of them cope with files and
directories the subject made read-only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .copyout import CopyReport, copy_upto


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


def copy_out(source: Path, dest: Path, report: CopyReport | None = None, name: str | None = None) -> bool:
    """Copy a tree out by the rules of ``copyout``: links become plain files holding their
    text; hard links, fifos, sockets and devices are skipped; the report's caps hold.

    Iterative, so any depth works; False when ``source`` itself is not copyable. Notes
    name entries below ``name`` (default: the source's own name).
    """
    report = report if report is not None else CopyReport()
    todo: list[tuple[Path, Path, str]] = [(source, dest, name or source.name)]
    copied_root = False
    while todo:
        src, dst, rel = todo.pop()
        if not report.take_entry():
            break
        done = _copy_entry(src, dst, rel, report, todo)
        copied_root = copied_root or (done and src == source)
    return copied_root


def _copy_entry(src: Path, dst: Path, rel: str, report: CopyReport, todo: list[tuple[Path, Path, str]]) -> bool:
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        _write_new(dst, report.link(rel, os.readlink(src)), 0o600)
    elif stat.S_ISDIR(st.st_mode):
        _ensure_mode(src, st.st_mode, 0o500)
        dst.mkdir(mode=0o700)
        with os.scandir(src) as entries:
            todo.extend((Path(e.path), dst / e.name, f"{rel}/{e.name}") for e in entries)
    elif stat.S_ISREG(st.st_mode):
        return _copy_file(src, dst, rel, st, report)
    else:
        report.skip(rel, "special file")
        return False
    return True


def _copy_file(src: Path, dst: Path, rel: str, st: os.stat_result, report: CopyReport) -> bool:
    _ensure_mode(src, st.st_mode, 0o400)
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        fst = os.fstat(f.fileno())
        if not stat.S_ISREG(fst.st_mode):
            report.skip(rel, "special file")
            return False
        if fst.st_nlink > 1:  # its other name may be a host file the sandbox can see
            report.skip(rel, f"hard link ({fst.st_nlink} names)")
            return False
        room = report.room()
        with open(dst, "xb") as out:
            n, complete = copy_upto(f, out, room)
        report.add_bytes(n, complete=complete)
    dst.chmod(stat.S_IMODE(st.st_mode) & 0o755 | 0o600)
    return True


def _write_new(path: Path, data: bytes, mode: int) -> None:
    with open(path, "xb") as f:
        f.write(data)
    path.chmod(mode)


def _ensure_mode(path: Path, mode: int, bits: int) -> None:
    """Give the owner ``bits`` on ``path`` if the subject took them away."""
    if stat.S_IMODE(mode) & bits != bits:
        path.chmod(stat.S_IMODE(mode) | bits)


def remove_path(path: Path) -> None:
    """Delete a file, link or whole tree, even where the subject removed write permission.

    Trees of any depth and with any names: the walk holds one directory descriptor per
    level and only ever names one entry (no recursion, no long paths, no symlink followed).
    """
    if not os.path.isdir(path) or os.path.islink(path):
        path.unlink()
        return
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _remove_tree(parent, path.name)
    finally:
        os.close(parent)


def _open_dir(parent_fd: int, name: str) -> int:
    """Directory ``name`` of ``parent_fd`` (never through a link), with the owner's rwx.

    The mode is changed only where the subject took those bits away: a chmod writes the
    inode, and teardown removes a dozen directories per attempt.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except PermissionError:  # no read or search bit (not root): give them back, then open
        os.chmod(name, 0o700, dir_fd=parent_fd)  # a directory (checked without following links)
        return os.open(name, flags, dir_fd=parent_fd)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_IMODE(mode) & 0o700 != 0o700:
            os.fchmod(fd, stat.S_IMODE(mode) | 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_tree(parent_fd: int, name: str) -> None:
    """Delete directory ``name`` of ``parent_fd`` and everything below it, depth first."""
    stack: list[tuple[int, str, int, list[str]]] = []

    def enter(pfd: int, dname: str) -> None:
        fd = _open_dir(pfd, dname)
        subdirs = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
        stack.append((pfd, dname, fd, subdirs))

    enter(parent_fd, name)
    while stack:
        pfd, dname, fd, subdirs = stack[-1]
        if subdirs:
            enter(fd, subdirs.pop())
            continue
        stack.pop()
        os.close(fd)
        os.rmdir(dname, dir_fd=pfd)


def clear_dir(path: Path) -> None:
    """Empty a directory but keep it (it is a bind source)."""
    for entry in os.listdir(path):
        remove_path(path / entry)


def tree_print(root: Path, limit: int = 200_000) -> dict[str, tuple[int, ...] | str]:
    """What identifies every entry below ``root`` now: relative path -> (type and mode, inode,
    size, ctime) or a link's target. The ctime changes with every write, chmod or rename, and
    no subject can set it back. Links are not followed; past ``limit`` entries, one marker."""
    prints: dict[str, tuple[int, ...] | str] = {}
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            with os.scandir(root / rel if rel else root) as entries:
                for entry in entries:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        prints[name] = "-> " + os.readlink(entry.path)
                    else:
                        prints[name] = (st.st_mode, st.st_ino, st.st_size, st.st_ctime_ns)
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(name)
                    if len(prints) > limit:
                        return {**prints, "": "too many entries"}
        except OSError as e:
            prints[rel + "/"] = f"unreadable: {e.strerror}"
    return prints


def scan_tree(root: str, enter: Callable[[str, os.stat_result], bool]) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every entry below ``root``, links never followed, entries that vanish or
    cannot be read skipped; a directory is walked when ``enter(path, st)`` says so."""
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield entry.path, st
            if stat.S_ISDIR(st.st_mode) and enter(entry.path, st):
                stack.append(entry.path)

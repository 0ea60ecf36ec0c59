"""Tar archives in and out of containers: host files in as root, container files out safely.

Extraction keeps the rules of ``executors.copyout``: it never writes outside its
destination (absolute names and ``..`` are skipped), never creates a link (a symlink
becomes a plain file holding its text; hard links, devices and fifos are skipped), streams
the archive and stops at the byte and entry caps.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..copyout import CopyReport, copy_upto


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def pack(entries: Iterable[tuple[Path | None, str]]) -> IO[bytes]:
    """A tar (in a temporary file, rewound) holding each host path under its sandbox path.

    ``None`` as host path makes an empty directory. Parents are not archived: the engine
    creates missing ones and leaves existing ones as they are.
    """
    out = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for host_path, sandbox_path in entries:
            arcname = str(PurePosixPath(sandbox_path)).lstrip("/")
            if not arcname:
                raise ValueError("cannot put onto /")
            if host_path is None:
                info = _as_root(tarfile.TarInfo(arcname))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                tar.add(str(host_path), arcname=arcname, recursive=True, filter=_as_root)
    out.seek(0)
    return out


def text_files(files: Mapping[str, str]) -> bytes:
    """A tar archive of small text files (name -> text), mode 0644, for ``put_archive``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _inside(root: Path, rel: str) -> Path | None:
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "") for p in parts) or parts[0] == "/":
        return None
    return root.joinpath(*parts)


class _ChunkReader(io.RawIOBase):
    """The engine's archive chunks as a readable stream (nothing spooled to disk)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def extract_archive(chunks: Iterable[bytes], dest: Path, report: CopyReport | None = None) -> None:
    """Extract an engine archive so that the archived path itself lands at ``dest``.

    Streams the archive and stops reading once the report's caps are reached (the caller
    then closes the connection rather than reading the rest).
    """
    report = report if report is not None else CopyReport()
    stream = io.BufferedReader(_ChunkReader(chunks), 1024 * 1024)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not report.take_entry():
                break
            _extract_one(tar, member, dest, report)
            if report.truncated:
                break
    if not report.truncated:
        while stream.read(1024 * 1024):  # the archive's padding: leave the connection reusable
            pass


def _extract_one(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, report: CopyReport) -> None:
    parts = PurePosixPath(member.name).parts
    rel = "/".join(parts[1:])
    target = dest if not rel else _inside(dest, rel)
    name = member.name
    if target is None:
        report.skip(name, "name outside the copy")
        return
    if target != dest and not target.parent.is_dir():
        if os.path.lexists(target.parent):  # a file (or a link's placeholder) stands there
            report.skip(name, "below a non-directory")
            return
        target.parent.mkdir(parents=True, exist_ok=True)
    if member.isdir():
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, 0o700 | (member.mode & 0o755))
    elif member.isfile():
        _clear(target)
        src = tar.extractfile(member)
        if src is None:
            return
        with src, open(target, "xb") as f:
            copied, complete = copy_upto(src, f, report.room())
        report.add_bytes(copied, complete=complete)
        os.chmod(target, 0o600 | (member.mode & 0o755))
    elif member.issym():
        _clear(target)  # never a live link in the output: a plain file holding the link text
        with open(target, "xb") as f:
            f.write(report.link(name, member.linkname))
        os.chmod(target, 0o600)
    elif member.islnk():
        report.skip(name, f"hard link to {member.linkname}")
    else:
        report.skip(name, "special file")


def _clear(target: Path) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)


class Batch:
    """Puts waiting to be sent as one archive (each host path is read when it is added)."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._tar: tarfile.TarFile | None = None
        #: Every sandbox path the archive writes (each member, not only the roots).
        self.paths: set[str] = set()

    def _record(self, info: tarfile.TarInfo) -> tarfile.TarInfo:
        self.paths.add("/" + info.name)
        return _as_root(info)

    def _open(self) -> tarfile.TarFile:
        if self._tar is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by take()'s caller
            self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        return self._tar

    def add(self, host_path: Path | None, sandbox_path: str) -> None:
        tar = self._open()
        arcname = sandbox_path.lstrip("/")
        if host_path is None:
            info = self._record(tarfile.TarInfo(arcname))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        else:
            tar.add(str(host_path), arcname=arcname, recursive=True, filter=self._record)

    def replace_marker(self, sandbox_path: str, *, directory: bool = False) -> None:
        """An empty file (or directory) at ``sandbox_path``, written before what follows it.

        The engine removes whatever stands at a path where an archive member of another type
        lands (a tree of any depth, a symlink without following it), so the next member at the
        same path starts from nothing: clearing without any program of the container's.
        """
        if directory:
            self.add(None, sandbox_path)
            return
        info = self._record(tarfile.TarInfo(sandbox_path.lstrip("/")))
        info.mode, info.size = 0, 0
        self._open().addfile(info)

    def overlaps(self, path: str) -> bool:
        """True when the waiting archive writes ``path`` or something below it."""
        below = path.rstrip("/") + "/"
        return any(p == path or p.startswith(below) for p in self.paths)

    def take(self) -> IO[bytes] | None:
        """The archive so far (rewound; the caller closes it), or None when nothing waits."""
        if self._tar is None or self._file is None:
            return None
        self._tar.close()
        out, self._file, self._tar, self.paths = self._file, None, None, set()
        out.seek(0)
        return out

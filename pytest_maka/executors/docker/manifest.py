"""Content manifests of protected directories, read through the engine's archive API.

The engine's change list compares metadata for files the image already has, so a file
rewritten with its size kept and its mtime set back is not reported. With
``protected_check: content`` the protected roots of the container are streamed and every
entry compared with the image's (type, mode, owner, size, link target, SHA-256 of the
content). The image's manifest is computed once per process and image.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ...core.errors import SubjectFault

Entry = tuple[Any, ...]
Manifest = dict[str, Entry]

_CACHE: dict[tuple[str, str], Manifest] = {}
_LOCK = threading.Lock()


class Chunks(io.RawIOBase):
    """A readable stream over the engine's chunk iterator (no copy of whole chunks).

    ``budget``: a one-item list of bytes that may still be read (shared by several streams);
    reading past it raises SubjectFault.
    """

    def __init__(self, chunks: Iterable[bytes], budget: list[int] | None = None) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._left = memoryview(b"")
        self._budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._left:
            self._left = memoryview(next(self._it, b""))
            if not self._left:
                return 0
            if self._budget is not None:
                self._budget[0] -= len(self._left)
                if self._budget[0] < 0:
                    raise SubjectFault("the subject wrote more under protected paths than can be checked")
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def outermost(roots: Iterable[str]) -> list[str]:
    """Roots with every root below another dropped."""
    out: list[str] = []
    for root in sorted(set(roots), key=len):
        if not any(root == r or root.startswith(r.rstrip("/") + "/") for r in out):
            out.append(root)
    return out


def manifest(api: Any, container: str, roots: Iterable[str]) -> Manifest:
    """Every entry below ``roots`` in ``container``: path -> (type, mode, uid, gid, size, link, sha256)."""
    out: Manifest = {}
    for root in outermost(roots):
        try:
            chunks, _stat = api.get_archive(container, root, chunk_size=1 << 20)
        except Exception as exc:  # absent in this container
            if getattr(exc, "status_code", None) == 404:
                continue
            raise
        parent = posixpath.dirname(root)
        stream = io.BufferedReader(Chunks(chunks), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                path = posixpath.join(parent, member.name)
                digest = ""
                if member.isfile():
                    source = tar.extractfile(member)
                    h = hashlib.sha256()
                    if source is not None:
                        while block := source.read(1 << 20):
                            h.update(block)
                    digest = h.hexdigest()
                mode = member.mode if not member.isdir() else member.mode & 0o7777
                out[path] = (member.type, mode, member.uid, member.gid, member.size, member.linkname, digest)
    return out


def image_manifest(api: Any, engine: str, image: str, pristine: str, roots: Iterable[str]) -> Manifest:
    """The image's manifest (computed from a never-started container of it), once per process."""
    key = (engine, image + "|" + ",".join(outermost(roots)))
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = manifest(api, pristine, roots)
        return _CACHE[key]


def differences(image: Manifest, container: Manifest) -> list[tuple[str, int]]:
    """(path, kind) like the engine's change list: 0 modified, 1 added, 2 deleted."""
    out = [(p, 0) for p in container.keys() & image.keys() if container[p] != image[p]]
    out += [(p, 1) for p in container.keys() - image.keys()]
    out += [(p, 2) for p in image.keys() - container.keys()]
    return sorted(out)

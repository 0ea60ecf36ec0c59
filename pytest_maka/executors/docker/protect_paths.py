"""What the protected-path restore works with: the roots, the engine's path stats, the
change list's kinds, and small path and tar helpers (no container is touched here except
through ``stat_path``)."""

from __future__ import annotations

import base64
import io
import json
import posixpath
import tarfile
from collections.abc import Callable
from typing import Any

PROTECTED_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
#: Entries the engine itself places in every container.
ENGINE_OWNED = frozenset(
    {"/usr/sbin/docker-init", "/sbin/docker-init", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
)
#: Where an image keeps rm (the first that exists in the image is used).
RM_CANDIDATES = ("/usr/bin/rm", "/bin/rm")
#: More protected changes than this are not restored one by one: the attempt is refused.
MAX_UNITS = 5000
#: Engine errors (on listing changes) that come from what the subject left.
SUBJECT_ERRORS = ("file name too long", "too many levels of symbolic links")
#: Seconds the engine's change list may take when the writable layer can stand in for it.
LIST_TIMEOUT_SEC = 120.0
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27
KIND = {0: "modified", 1: "added", 2: "deleted"}


def stat_path(api: Any, container: str, path: str) -> dict[str, Any] | None:
    """The engine's stat of ``path`` in ``container`` (the last part not followed); None when absent."""
    res = api.head(api._url("/containers/{0}/archive", container), params={"path": path})
    if res.status_code == 404:
        return None
    api._raise_for_status(res)
    return json.loads(base64.b64decode(res.headers["X-Docker-Container-Path-Stat"]))


def find_rm(stat: Callable[[str], dict[str, Any] | None]) -> str | None:
    """The image's rm: the first candidate that is a regular file."""
    return next((c for c in RM_CANDIDATES if is_file(stat(c))), None)


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def protected_roots(image_config: dict[str, Any]) -> list[str]:
    """The fixed roots plus the image's PATH directories and Python locations."""
    roots = list(PROTECTED_ROOTS)
    for entry in image_config.get("Env") or []:
        name, _, value = entry.partition("=")
        if name in {"PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX"}:
            roots += [p for p in value.split(":") if p.startswith("/") and p != "/"]
    return sorted({posixpath.normpath(r) for r in roots})


def placeholder_tar(name: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.mode, info.size, info.uid, info.gid = 0, 0, 0, 0
        tar.addfile(info)
    return out.getvalue()


def unaddressable(path: str) -> bool:
    """The engine reported U+FFFD for bytes that are not UTF-8, or a tar name kept them escaped."""
    return "\ufffd" in path or any("\udc80" <= c <= "\udcff" for c in path)


def valid_ancestor(path: str) -> str:
    while unaddressable(path):
        path = posixpath.dirname(path)
    return path


def is_dir(st: dict[str, Any] | None) -> bool:
    return st is not None and bool(st["mode"] & GO_MODE_DIR)


def is_file(st: dict[str, Any] | None) -> bool:
    return st is not None and not st["mode"] & (GO_MODE_DIR | GO_MODE_SYMLINK)


def leaves(changes: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Changes worth naming: a modified directory only when nothing below it changed."""
    paths = sorted(p for p, _ in changes)
    parents = set()
    for p in paths:
        parents.add(posixpath.dirname(p))
    return [(p, k) for p, k in sorted(changes) if not (k == 0 and p in parents)]

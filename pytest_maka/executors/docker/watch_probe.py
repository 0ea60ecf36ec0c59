"""The access probe: run by ``watch`` in a helper container that shares an attempt container's
process table, never in the attempt container itself.

It changes its root to the attempt container's (``/proc/1/root``: pid 1 of the shared
process table is that container's first process; or the root given as its argument, when
the harness runs it on the engine's own host), so every path and every link resolves
inside that container, then answers one JSON line per request on its standard streams:

- ``{"op": "arm", "paths": [...]}``: each regular file or link among ``paths`` gets the
  access time 0 (its modification time kept); the answer lists those armed with their mode.
- ``{"op": "read", "armed": [[path, mode], ...]}``: which armed paths were read or executed
  since (the kernel set their access time again: ``relatime`` updates an access time older
  than a day).
- ``{"op": "unlink", "path": path}``: the file, link or empty directory at ``path`` is
  deleted (its last part not followed); the answer says whether there was one. The sandbox's
  ``remove`` uses it, and the protected restore (``"paths": [...]``, each deleted alike; the
  answer lists the first few that could not be), so that no program of the container deletes
  anything.

Standard library only, every module imported before the root changes (nothing is imported
from the attempt container's files). Also run as ``python3 -I -S -c SOURCE``.
"""

from __future__ import annotations

import json
import os
import stat
import sys

#: More paths than this are not armed (the answer says how many were left).
MAX_PATHS = 20_000


def enter_root(root: str) -> None:
    """Change the root to the sandbox's; from then on an import fails instead of loading a file
    (the files are the subject's, and on the engine's host this process is root)."""
    os.chdir(root)
    os.chroot(".")
    os.chdir("/")
    sys.path.clear()
    sys.path_importer_cache.clear()
    sys.path_hooks.clear()
    sys.meta_path.clear()


def arm(paths: list[str]) -> dict[str, object]:
    armed: list[tuple[str, int]] = []
    missing = 0
    for path in paths[:MAX_PATHS]:
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            os.utime(path, ns=(0, st.st_mtime_ns), follow_symlinks=False)
        except (OSError, ValueError):
            missing += 1
            continue
        armed.append((path, st.st_mode))
    return {"armed": armed, "missing": missing, "left": max(0, len(paths) - MAX_PATHS)}


def read(armed: list[tuple[str, int]]) -> dict[str, object]:
    accessed: list[tuple[str, int]] = []
    for path, mode in armed:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_atime_ns != 0:
            accessed.append((path, mode))
    return {"accessed": accessed}


def unlink(path: str) -> dict[str, object]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"removed": False}
    except OSError as exc:
        return {"error": f"cannot remove {path}: {exc}"}
    try:
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as exc:
        return {"error": f"cannot remove {path}: {exc}"}
    return {"removed": True}


def unlink_all(paths: list[str]) -> dict[str, object]:
    answers = [unlink(path) for path in paths]
    failed = [str(answer["error"]) for answer in answers if "error" in answer]
    return {"removed": sum(1 for answer in answers if answer.get("removed")), "failed": failed[:5]}


def main(argv: list[str]) -> int:
    try:
        enter_root(argv[0] if argv else "/proc/1/root")
    except OSError as exc:
        print(json.dumps({"error": f"cannot enter the sandbox's root: {exc}"}), flush=True)
        return 1
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if request.get("op") == "arm":
                answer = arm([str(p) for p in request.get("paths") or []])
            elif request.get("op") == "read":
                answer = read([(str(p), int(m)) for p, m in request.get("armed") or []])
            elif request.get("op") == "unlink" and "paths" in request:
                answer = unlink_all([str(p) for p in request["paths"]])
            elif request.get("op") == "unlink":
                answer = unlink(str(request["path"]))
            else:
                answer = {"error": f"unknown request {request.get('op')!r}"}
        except (ValueError, AttributeError, KeyError) as exc:
            answer = {"error": str(exc)}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

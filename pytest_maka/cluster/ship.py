"""The spec and its task sources, shipped to Dask workers that do not have them at the same path.

The controller packs the spec file and every task source directory the spec names into one
gzipped tar, named by a content key (the spec's bytes and every task's content digest), and
submits it to the cluster once, as one task (``carry``) keyed by that content key: each
attempt takes it as a Dask dependency, so it travels once per worker, never per cell, and
Dask computes it again should every worker holding it die. A worker that has the spec
and every task source at the controller's paths uses them, as before; one that lacks any of
them unpacks the bundle once (per key, per worker process) into its Dask local directory,
under the same absolute paths below a root of its own, so that relative paths in the spec
resolve as on the controller, and loads the spec from there. Unpacking uses tarfile's
``data`` filter: nothing lands outside that root, and links pointing out of it are refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import untar

#: Directories never shipped (task digests leave them out too).
PRUNED = frozenset({"__pycache__", ".git"})
#: Where a worker keeps its unpacked bundles, inside its Dask local directory.
SHIP_DIR = "maka-ship"
#: Bytes (gzipped) the spec and its task sources may pack to: the bundle lives in the
#: scheduler's task graph and in every worker's memory.
MAX_BUNDLE_BYTES = 64 * 1024**2


class BundleTooLarge(ValueError):
    """The spec and its task sources pack to more than MAX_BUNDLE_BYTES."""


@dataclass(frozen=True)
class Bundle:
    """What the controller ships: the content key, the spec's path, the sources' paths, the tar.gz."""

    key: str
    spec: str
    sources: tuple[str, ...]
    data: bytes


def bundle_key(spec_bytes: bytes, digests: Iterable[str]) -> str:
    """The content key: the spec's bytes and the sorted task digests."""
    h = hashlib.sha256(spec_bytes)
    for digest in sorted(digests):
        h.update(b"\0" + digest.encode())
    return h.hexdigest()[:32]


def _arcname(path: Path) -> str:
    return PurePosixPath(path.resolve()).relative_to("/").as_posix()


def _skip_pruned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if PRUNED.intersection(PurePosixPath(info.name).parts) else info


def pack(spec_path: Path, sources: Sequence[Path], digests: Iterable[str], limit: int = MAX_BUNDLE_BYTES) -> Bundle:
    """The bundle of ``spec_path`` and the task source directories (or files) ``sources``
    (BundleTooLarge past ``limit`` bytes)."""
    spec_path = spec_path.resolve()
    spec_bytes = spec_path.read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(spec_path, arcname=_arcname(spec_path), recursive=False)
        for source in sorted({s.resolve() for s in sources}):
            tar.add(source, arcname=_arcname(source), filter=_skip_pruned)
    names = tuple(sorted(str(s.resolve()) for s in sources))
    data = buffer.getvalue()
    if len(data) > limit:
        raise BundleTooLarge(
            f"the spec and its task sources pack to {len(data) / 2**20:.1f} MiB, over the "
            f"{limit / 2**20:.0f} MiB a cluster ships: keep large files out of the task directories"
        )
    return Bundle(bundle_key(spec_bytes, digests), str(spec_path), names, data)


def carry(data: bytes) -> bytes:
    """The Dask task that holds a bundle on the cluster (its result is the bundle itself)."""
    return data


def has_all(spec: str, sources: Iterable[str]) -> bool:
    """Whether this machine has the spec and every task source at the controller's paths."""
    return os.path.isfile(spec) and all(os.path.exists(s) for s in sources)


_lock = threading.Lock()
_unpacked: dict[str, Path] = {}


def local_spec(local_directory: str, key: str, spec: str, data: bytes) -> str:
    """The spec's path in this worker's copy of bundle ``key`` (unpacked on first use)."""
    with _lock:
        root = _unpacked.get(key)
        if root is None:
            base = Path(local_directory) / SHIP_DIR
            base.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=base))
            try:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                    refused = untar.extract(tar, root, links=True)
                if refused:
                    raise untar.UnsafeMember(f"bundle {key}: unsafe member {refused[0].name!r} refused")
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
            _unpacked[key] = root
        return str(root / PurePosixPath(spec).relative_to("/"))


def remove_all() -> None:
    """Delete every bundle this worker process unpacked (at the worker's end)."""
    with _lock:
        for root in _unpacked.values():
            shutil.rmtree(root, ignore_errors=True)
        _unpacked.clear()

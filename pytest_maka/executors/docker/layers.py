"""Installed agents as image layers: the task's environment image plus the agent, built once per
(agent install, environment image) on each engine and reused by every later cell and run.

A lease whose request carries read-only mounts (an installed agent at ``/opt/maka/agent``)
runs in ``FROM <environment image>`` + ``COPY <install> <mount path>``. The key is the
environment image's id (its digest) and the install directory's name (agent, version and
install key); the build runs without network, under one file lock per key beside the
environment images' locks, so concurrent workers wait for the first build and then reuse it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

import docker.errors
from filelock import FileLock

from ...core import progress
from ...core.errors import InfraError
from . import labels as L
from .engines import Engine, one_line

#: Label naming what a layered image holds: {"env": image id, "layers": {path: install dir name}}.
AGENT_LAYERS = f"{L.PREFIX}.agent-layers"
BUILD_TIMEOUT_SEC = 1800


def layer_key(image_id: str, mounts: Mapping[str, Path]) -> dict[str, object]:
    return {"env": image_id, "layers": {dest: Path(src).name for dest, src in sorted(mounts.items())}}


def layered_image(engine: Engine, state_dir: Path, prefix: str, image_id: str, mounts: Mapping[str, Path]) -> str:
    """The id of ``image_id`` with every mount's directory copied in at its path (built once per key)."""
    key = layer_key(image_id, mounts)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    tag = f"{prefix}-agent:{digest[:24]}"
    found = _present(engine, tag)
    if found:
        return found
    state_dir.mkdir(parents=True, exist_ok=True)
    progress.phase("building image", f"adding {', '.join(key['layers'].values())} to the environment")  # type: ignore[union-attr]
    with FileLock(str(state_dir / f"{engine.key}-agent-{digest[:24]}.lock")):
        found = _present(engine, tag)
        if found:
            return found
        return _build(engine, tag, key, mounts, state_dir / f"{engine.key}-agent-{digest[:24]}.log")


def _present(engine: Engine, tag: str) -> str | None:
    with engine.guard(f"inspecting image {tag}"):
        try:
            return str(engine.api.inspect_image(tag)["Id"])
        except docker.errors.ImageNotFound:
            return None


def _build(engine: Engine, tag: str, key: dict[str, object], mounts: Mapping[str, Path], log_path: Path) -> str:
    lines = [f"FROM {key['env']}"]
    with tempfile.TemporaryFile() as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            for i, (dest, src) in enumerate(sorted(mounts.items())):
                tar.add(str(src), arcname=f"layer{i}")  # symlinks stay links, as in the install
                lines.append(f"COPY layer{i}/ {dest}/")
            data = ("\n".join(lines) + "\n").encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        context.seek(0)
        labels = {L.MANAGED: "1", AGENT_LAYERS: json.dumps(key, sort_keys=True)}
        error = None
        with engine.guard("adding the agent to the environment image"), log_path.open("w") as log:
            try:
                for chunk in engine.api.build(
                    fileobj=context,
                    custom_context=True,
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    network_mode="none",
                    decode=True,
                    timeout=BUILD_TIMEOUT_SEC,
                    labels=labels,
                ):
                    log.write(chunk.get("stream") or "")
                    if "error" in chunk:
                        error = " ".join(str(chunk["error"]).split())
            except docker.errors.APIError as exc:
                error = one_line(exc)
    found = None if error else _present(engine, tag)
    if found is None:
        raise InfraError(
            f"adding {', '.join(map(str, key['layers'].values()))} to the image failed: {error}; see {log_path}"
        )  # type: ignore[union-attr]
    return found


def layered_images(api: object) -> list[dict[str, object]]:
    """Every agent-layered image on an engine: tag, environment image and installs (for ``maka agents list``)."""
    out = []
    for image in api.images(filters={"label": AGENT_LAYERS}):  # type: ignore[attr-defined]
        key = json.loads((image.get("Labels") or {}).get(AGENT_LAYERS, "{}"))
        out.append({"tags": image.get("RepoTags") or [], "id": image["Id"], **key})
    return out

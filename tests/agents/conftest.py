"""Agent presets for real: installed from their registries into a cache kept between runs, run in Docker
against the scripted model server on the Docker bridge's host address."""

from __future__ import annotations

import ipaddress
import os
import shutil
from pathlib import Path

import pytest

from pytest_maka.agents.cache import AgentCache, InstallError, default_root
from pytest_maka.subjects.presets import PRESETS
from tests.docker.conftest import docker_api  # noqa: F401  (fixture: skips without an engine)

SECRET = "sk-maka-agent-secret-5be1c0"
BY_KIND = {p.kind: p for p in PRESETS}


@pytest.fixture(scope="session")
def agent_cache() -> AgentCache:
    """The real cache (``$MAKA_AGENT_CACHE`` or /var/cache/pytest-maka/agents): installs survive runs."""
    return AgentCache(default_root())


def installed(cache: AgentCache, kind: str) -> Path:
    """Install ``kind`` at its pinned version (once); skip only if its registry cannot deliver it."""
    preset = BY_KIND[kind]
    tool = "npm" if preset.registry == "npm" else "docker"
    if shutil.which(tool) is None:
        pytest.skip(f"installing {kind} needs {tool}, which is not on PATH")
    try:
        return cache.ensure(preset.install_spec(None))
    except InstallError as e:
        log = cache.root / f"{preset.install_spec(None).dirname}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if any(s in text for s in ("ENOTFOUND", "ETIMEDOUT", "ECONNREFUSED", "Temporary failure in name resolution")):
            pytest.skip(f"{kind} cannot be installed here (registry unreachable): {e}")
        raise


def bridge_gateway() -> str:
    """The host's address on Docker's default bridge (what host.docker.internal maps to)."""
    import docker

    client = docker.APIClient(version="auto")
    try:
        config = client.inspect_network("bridge")["IPAM"]["Config"]
    finally:
        client.close()
    for entry in config:
        if entry.get("Gateway"):
            return str(entry["Gateway"])
    return str(ipaddress.ip_network(config[0]["Subnet"])[1])  # the engine gives the bridge the first address


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    return SECRET


def tree_contains(root: Path, needle: str) -> list[str]:
    """Files below ``root`` whose bytes contain ``needle``."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            try:
                if not path.is_symlink() and needle.encode() in path.read_bytes():
                    hits.append(str(path.relative_to(root)))
            except OSError:
                continue
    return hits

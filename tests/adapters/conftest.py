"""Helpers for the benchmark-adapter tests: sample data, a Docker engine check, cohort runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT / "datasets"


def _engine_reason() -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed: pip install 'docker>=7.1,<8'"
    try:
        client = docker.APIClient(version="auto", timeout=10)
        client.ping()
        tags = {t for img in client.images() for t in img.get("RepoTags") or []}
        client.close()
    except Exception as e:  # any failure to talk to the engine means: no engine here
        return f"no Docker engine answers ({type(e).__name__}: {e}); run ../shared/ci/provision-docker.sh"
    if "python:3.11-slim" not in tags:
        return "the engine has no python:3.11-slim image; run ../shared/ci/provision-docker.sh"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Skips the test, with the reason, when no Docker engine answers."""
    reason = _engine_reason()
    if reason:
        pytest.skip(reason)


def copy_sample(name: str, dest: Path) -> Path:
    """A copy of ``datasets/<name>`` at ``dest`` (tests may edit it)."""
    shutil.copytree(DATASETS / name, dest, symlinks=True)
    return dest


def docker_executor(tmp_path: Path) -> dict[str, object]:
    return {"kind": "docker", "state_dir": str(tmp_path / "docker-state")}

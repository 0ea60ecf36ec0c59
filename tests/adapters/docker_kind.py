"""Registers ``executor: {kind: docker}`` for cohorts run by these tests (until the kernel does)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_maka_executor_kinds() -> dict[str, type]:
    from pytest_maka.executors.docker import DockerExecutor

    return {DockerExecutor.kind: DockerExecutor}

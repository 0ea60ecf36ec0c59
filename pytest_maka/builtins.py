"""The kernel's own implementations of the maka hooks: built-in subjects, executors, tasks.

The bundled benchmark adapters are plugins like any other: this module registers them by
module name (the only place the kernel names them) and never imports them itself.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from .core.cell import Cell
from .core.kinds import Kind, kind_table
from .core.taxonomy import AttemptFacts, Status, classify
from .executors.docker.options import DockerOptions
from .subjects.acp.options import AcpOptions

#: Bundled adapter plugins: plugin name -> module.
ADAPTER_PLUGINS = {
    "maka-harbor": "pytest_maka.benchmarks.plugin_harbor",
    "maka-terminal-bench": "pytest_maka.benchmarks.plugin_terminal_bench",
    "maka-swe-bench": "pytest_maka.benchmarks.swebench.plugin",
    "maka-test-log-verifiers": "pytest_maka.verifiers.plugin",
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    for name, module in ADAPTER_PLUGINS.items():
        if pluginmanager.get_plugin(name) is None:
            pluginmanager.register(importlib.import_module(module), name)


def _docker_executor(options: DockerOptions) -> Any:
    from .executors.docker.executor import DockerExecutor

    return DockerExecutor(options)


def _acp_subject(spec: Any) -> Any:
    from .subjects.acp.subject import AcpSubject

    return AcpSubject(spec)


#: ``kind: docker`` and ``kind: acp`` validate their options at load time without importing the
#: Docker SDK or the ACP library; those are imported when a cohort makes one.
DOCKER = Kind("docker", DockerOptions, _docker_executor)
ACP = Kind("acp", AcpOptions, _acp_subject)


@pytest.hookimpl(trylast=True)
def pytest_maka_subject_kinds() -> dict[str, Any]:
    from .subjects.command import Command
    from .subjects.presets import preset_kinds
    from .subjects.reference import Nop, Oracle

    return {**kind_table(Oracle, Nop, Command, ACP), **preset_kinds()}


@pytest.hookimpl(trylast=True)
def pytest_maka_executor_kinds() -> dict[str, Any]:
    from .executors.local import LocalExecutor

    return kind_table(LocalExecutor, DOCKER)


@pytest.hookimpl(trylast=True)
def pytest_maka_verifiers() -> dict[str, type]:
    from .verifiers.reward import RewardVerifier

    return {RewardVerifier.name: RewardVerifier}


@pytest.hookimpl(trylast=True)
def pytest_maka_classify(facts: AttemptFacts, cell: Cell) -> Status:
    return classify(facts)


@pytest.hookimpl(trylast=True)
def pytest_maka_acquire_lease(executor: Any, request: Any) -> Any:
    return executor.lease(request)

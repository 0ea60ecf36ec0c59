"""Registers the test-log verifiers (Terminal-Bench, SWE-bench) and the log-parser registry."""

from __future__ import annotations

import pytest

from . import hookspecs, parsers


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    # Runs before the maka session loads tasks (the kernel's pytest_configure is trylast),
    # so task loaders can check parser names against plugins' parsers too.
    parsers.configure(config.hook.pytest_maka_log_parsers())


@pytest.hookimpl(trylast=True)
def pytest_maka_verifiers() -> dict[str, type]:
    from .swebench import SweBenchVerifier
    from .testlog import TestLogVerifier

    return {cls.name: cls for cls in (TestLogVerifier, SweBenchVerifier)}

"""Test helpers for pytest-maka extensions (imports pytest; never imported by the kernel).

``ExecutorConformance`` is the shared suite every executor must pass::

    from pytest_maka.testing import ExecutorConformance

    class TestMyExecutor(ExecutorConformance):
        @pytest.fixture
        def executor(self):
            return MyExecutor(MyExecutor.Options())
"""

import pytest

pytest.register_assert_rewrite("pytest_maka.testing.conformance", "pytest_maka.testing.servers")

from .conformance import ExecutorConformance, Run, make_cell, make_task  # noqa: E402

__all__ = ["ExecutorConformance", "Run", "make_cell", "make_task"]

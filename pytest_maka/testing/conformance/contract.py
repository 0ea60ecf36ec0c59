"""The executor keeps the whole contract of ``executors/base.py``, its capabilities included."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from ...contracts import contract_gaps
from ...executors.base import Executor, ExecutorCapabilities, PhaseUsers, Sandbox, VerifierEnvironments


class ContractTests:
    def test_the_executor_keeps_its_whole_contract(self, executor: Executor) -> None:
        """Every member of the Executor Protocol, the optional ones included (``ExecutorBase``)."""
        assert contract_gaps(executor, Executor) == []
        assert isinstance(executor.capabilities, ExecutorCapabilities)
        if executor.capabilities.separate_verifier:
            assert isinstance(executor, VerifierEnvironments), "separate_verifier without VerifierEnvironments"

    def test_a_sandbox_keeps_its_whole_contract(
        self, executor: Executor, open_lease: Callable[..., AbstractContextManager[Sandbox]]
    ) -> None:
        with open_lease() as sandbox:
            assert contract_gaps(sandbox, Sandbox) == [] and isinstance(sandbox, Sandbox)
            if executor.capabilities.users:
                assert isinstance(sandbox, PhaseUsers), "capabilities.users without PhaseUsers"

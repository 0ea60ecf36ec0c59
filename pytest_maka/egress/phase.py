"""Entering a phase of the NetworkPlan on a sandbox, and the record's ``isolation.network``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.errors import InfraError
from ..core.network import NETWORK_PHASES
from ..executors.base import EgressSandbox as EgressSandbox  # declared with the sandbox contract
from .log import EgressLog
from .plan import NetworkPlan, PhasePlan


@contextmanager
def network_phase(sandbox: object, name: str, plan: NetworkPlan, log: EgressLog) -> Iterator[PhasePlan]:
    """Run the block under phase ``name`` of ``plan``; an allowlist the sandbox cannot enforce is an infra error."""
    phase = plan.phase(name)
    if phase.mode != "allowlist":
        yield phase
        return
    if not isinstance(sandbox, EgressSandbox):
        raise InfraError(f"this executor cannot enforce the {name} phase's egress allowlist (no egress proxy)")
    with sandbox.egress_phase(name, phase, log):
        yield phase


def network_record(plan: NetworkPlan, executor_network: dict[str, Any] | None, log: EgressLog) -> dict[str, Any]:
    """``isolation.network``: a summary string per phase (as before) plus ``phases`` with the details."""
    given = executor_network or {}
    out: dict[str, Any] = {}
    phases: dict[str, Any] = {}
    for name in NETWORK_PHASES:
        phase = plan.phase(name)
        if phase.mode == "all":
            out[name] = given.get(name, "all")
        else:
            out[name] = phase.mode
        detail = phase.record()
        if phase.mode == "allowlist":
            detail.update(log.summary(name))
        phases[name] = detail
    out["phases"] = phases
    return out

"""The record's ``isolation.network`` from the NetworkPlan (entering a phase on a sandbox: ``run.phase``)."""

from __future__ import annotations

from typing import Any

from ..core.network import NETWORK_PHASES
from .log import EgressLog
from .plan import NetworkPlan


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

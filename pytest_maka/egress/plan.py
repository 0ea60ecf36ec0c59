"""The NetworkPlan: what each phase of an attempt may reach, decided from task, policy and subject."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..core import hostpattern
from ..core.compose_file import sidecar_names
from ..core.hostpattern import HostPattern
from ..core.network import NETWORK_PHASES, DeclaredNetwork, NetworkMode
from ..core.spec import Policy
from ..core.task import Task


@dataclass(frozen=True)
class PhasePlan:
    """One phase's network: its granted mode (``core.network``) and, for ``allowlist``, what the
    proxy lets through."""

    mode: NetworkMode = "none"
    allow: tuple[HostPattern, ...] = ()
    #: What the task declared for this phase, if anything.
    declared: DeclaredNetwork | None = None
    #: Task-declared hosts the policy did not grant (the phase ran without them).
    not_granted: tuple[str, ...] = ()
    #: The task's sidecar services, reached directly on the attempt's internal network.
    services: tuple[str, ...] = ()

    @property
    def network(self) -> bool:
        """True when commands of this phase get a network at all (filtered or not)."""
        return self.mode in ("allowlist", "all")

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "declared": self.declared}
        if self.mode == "allowlist":
            out["allowed"] = [p.text for p in self.allow]
        if self.services:
            out["services"] = list(self.services)
        if self.not_granted:
            out["not_granted"] = list(self.not_granted)
        return out


@dataclass(frozen=True)
class NetworkPlan:
    """The per-phase plan of one attempt; fixed before the attempt starts."""

    setup: PhasePlan = field(default_factory=PhasePlan)
    agent: PhasePlan = field(default_factory=PhasePlan)
    verifier: PhasePlan = field(default_factory=PhasePlan)

    def phase(self, name: str) -> PhasePlan:
        """The plan of phase ``name`` (one of ``core.network.NETWORK_PHASES``)."""
        plans = {"setup": self.setup, "agent": self.agent, "verifier": self.verifier}
        if name not in plans:
            raise ValueError(f"unknown phase {name!r}; expected one of {', '.join(NETWORK_PHASES)}")
        return plans[name]


def _task_hosts(entries: list[str] | tuple[str, ...]) -> tuple[tuple[HostPattern, ...], tuple[str, ...]]:
    """A phase's ``allowed_hosts``, parsed; entries that are not host patterns come back unparsed."""
    good: list[HostPattern] = []
    bad: list[str] = []
    for entry in entries:
        try:
            good.append(hostpattern.parse(entry))
        except ValueError:
            bad.append(f"{entry} (not a host pattern)")
    return tuple(good), tuple(bad)


def _phase(
    declared: DeclaredNetwork | None,
    granted_all: bool,
    base: tuple[HostPattern, ...],
    task_hosts: tuple[HostPattern, ...],
    *,
    honour_none: bool,
) -> PhasePlan:
    if granted_all and declared == "allowlist":
        allow = tuple(dict.fromkeys(base + task_hosts))
        return PhasePlan("allowlist" if allow else "none", allow, declared)
    if granted_all and not (honour_none and declared == "none"):
        return PhasePlan("all", (), declared)
    missing: tuple[str, ...] = ()
    if declared == "allowlist":
        missing = tuple(p.text for p in task_hosts if not _covered(p, base))
    return PhasePlan("allowlist" if base else "none", base, declared, missing)


def _covered(p: HostPattern, base: tuple[HostPattern, ...]) -> bool:
    """True when ``base`` already allows everything ``p`` names."""
    if p in base:
        return True
    return not p.wildcard and all(hostpattern.allowed(base, p.host, port) for port in p.ports)


def build_plan(
    task: Task, policy: Policy, subject_egress: tuple[str, ...] = (), setup_egress: tuple[str, ...] = ()
) -> NetworkPlan:
    """Decide every phase: the policy's switches grant what the task declares, the allowlists add hosts.

    Agent phase: ``policy.egress`` plus the subject's own ``egress`` always go through the
    proxy; with ``policy.agent_network`` a task declaring ``public`` gets ``all`` and one
    declaring ``allowlist`` gets its ``allowed_hosts`` on top. Verifier phase: the same with
    ``policy.verifier_egress`` and ``policy.verifier_network``. Setup phase: the same with
    ``policy.setup_egress`` plus what the subject needs to set up (``setup_egress``) and
    ``policy.setup_network``, against what the task's environment declares.
    """
    task_hosts, bad = _task_hosts(list(task.agent_allowed_hosts))
    verifier_hosts, verifier_bad = _task_hosts(list(task.verifier_allowed_hosts))
    environment = task.verifier_declared
    setup = _phase(
        environment,
        policy.setup_network,
        hostpattern.parse_all([*policy.setup_egress, *setup_egress]),
        task_hosts,
        honour_none=True,
    )
    setup = replace(setup, not_granted=())  # the task's hosts are declared for its agent, not its set-up
    agent = _phase(
        task.network,
        policy.agent_network,
        hostpattern.parse_all([*policy.egress, *subject_egress]),
        task_hosts,
        honour_none=True,
    )
    verifier = _phase(
        environment,
        policy.verifier_network,
        hostpattern.parse_all(policy.verifier_egress),
        verifier_hosts,
        honour_none=False,  # an explicit verifier_network grant stands, as before allowlists
    )
    if bad:
        agent = replace(agent, not_granted=agent.not_granted + bad)
    if verifier_bad:
        verifier = replace(verifier, not_granted=verifier.not_granted + verifier_bad)
    services = sidecar_names(task.compose_file, task.compose_service)
    if services:
        setup, agent = with_services(setup, services), with_services(agent, services)
        if task.verifier_environment is None:  # a separate verifier's container is not on the project's network
            verifier = with_services(verifier, services)
    return NetworkPlan(setup=setup, agent=agent, verifier=verifier)


def with_services(plan: PhasePlan, services: tuple[str, ...]) -> PhasePlan:
    """A phase of a task with sidecars: ``none`` becomes ``services`` (the sidecars and nothing
    else, no proxy); an allowlist reaches the sidecars directly besides its hosts."""
    if plan.mode == "all":
        return plan
    return replace(plan, mode="services" if plan.mode == "none" else plan.mode, services=services)

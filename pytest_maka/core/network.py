"""The network vocabulary: which phases have a network, what a task declares for one, what one is granted.

Two words for two facts, both in the record (``isolation.network.phases``):

- ``DeclaredNetwork`` is what a task says a phase needs: ``none``, ``allowlist`` (its
  ``allowed_hosts`` only) or ``public``. Adapters map their formats' spellings onto it
  (Harbor's ``no-network`` is ``none``).
- ``NetworkMode`` is what the NetworkPlan grants a phase once the policy is applied: ``none``,
  ``services`` (only the task's own sidecars), ``allowlist`` (through the egress proxy) or
  ``all`` (the executor's network, unfiltered). A declared ``public`` is granted ``all`` only
  when the policy says so.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The phases of an attempt that have a network plan, in order (``egress.plan.NetworkPlan``).
NetworkPhase = Literal["setup", "agent", "verifier"]
NETWORK_PHASES: tuple[NetworkPhase, ...] = get_args(NetworkPhase)

#: What a task declares for a phase.
DeclaredNetwork = Literal["none", "allowlist", "public"]
DECLARED_NETWORKS: tuple[DeclaredNetwork, ...] = get_args(DeclaredNetwork)

#: What the plan grants a phase.
NetworkMode = Literal["none", "services", "allowlist", "all"]
NETWORK_MODES: tuple[NetworkMode, ...] = get_args(NetworkMode)


def declared_problem(value: object) -> str | None:
    """Why ``value`` is not a DeclaredNetwork (one line), or None when it is one."""
    if value in DECLARED_NETWORKS:
        return None
    hint = " (Harbor's no-network is none)" if value == "no-network" else ""
    return f"expected one of {', '.join(DECLARED_NETWORKS)} (got {value!r}){hint}"

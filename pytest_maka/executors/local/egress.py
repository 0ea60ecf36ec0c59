"""The local executor's egress: an allowlist phase runs its commands behind the host-side proxy.

The sandbox keeps ``--unshare-net``; only the proxy's unix socket directory is bound in
(read-only), and every command starts behind the forwarder of ``egress.host.wrapper``.
Allowlisted loopback endpoints are tunnelled in one by one (``egress.loopback``); the rest of
the sandbox's loopback is its own, and ``NO_PROXY`` keeps it off the proxy.
What a command sends past the proxy is refused and logged by ``egress.tunguard`` (a TUN
device per command, read by the harness) where this host allows it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InfraError
from ...egress import host, loopback, tunguard
from ...egress.log import EgressLog, PastProxyFlows
from ...egress.plan import PhasePlan
from ...egress.tinyproxy import PROXY_PORT

LOOPBACK_NAMES = loopback.LOOPBACK_NAMES
#: Flows past the proxy logged per phase (the packets of further flows are only counted).
MAX_FLOWS = 1000
#: Log traffic past the proxy where the host allows it (a switch for benchmarks' A/B runs).
GUARD_PAST_PROXY = True
RESOLV_CONF = "/etc/resolv.conf"


def takes_dns() -> bool:
    """The sandbox's DNS can be taken to the relay when bwrap runs as root (to bind port 53 in the
    sandbox's own network namespace) and /etc/resolv.conf is a plain file (to bind over it)."""
    return os.geteuid() == 0 and os.path.isfile(RESOLV_CONF) and not os.path.islink(RESOLV_CONF)


@dataclass(frozen=True)
class ProxiedExec:
    """What an exec of an allowlist phase adds to the bwrap command line and the environment."""

    extra_args: tuple[str, ...]
    env: Mapping[str, str]
    wrapper: str


class LocalEgress:
    """Holds the running host proxy of the current phase (at most one at a time)."""

    def __init__(self, scratch: Path, hosts: Mapping[str, str], *, isolated: bool) -> None:
        self._scratch = scratch
        self._isolated = isolated
        self._hosts = dict(hosts)
        self.current: ProxiedExec | None = None
        #: The current phase's flows past the proxy (None: not logged) and its off_proxy note.
        self._flows: PastProxyFlows | None = None
        self._off_proxy = ""

    @contextmanager
    def phase(self, name: str, plan: PhasePlan, log: EgressLog) -> Iterator[None]:
        """Start the proxy for ``plan`` (an allowlist phase) and stop it, logging what it saw."""
        if plan.mode != "allowlist":
            yield
            return
        if not self._isolated:
            raise InfraError(f"the {name} phase needs an allowlist, which sandbox: none cannot enforce")
        dns = takes_dns()
        tunnels = loopback.endpoints(plan.allow)
        taken = {PROXY_PORT} | ({53} if dns else set())
        if clash := sorted({e.port for e in tunnels} & taken):
            raise InfraError(
                f"egress for the {name} phase: loopback port {clash[0]} is allow-listed, but the sandbox's "
                f"egress proxy (3128) or DNS forwarder (53) listens there; serve the endpoint on another port"
            )
        proxy = host.HostProxy(
            self._scratch / f"egress-{name}", plan.allow, self._hosts, name, dns=dns, tunnels=tunnels
        )
        try:
            proxy.start()
        except host.EgressUnavailable as exc:
            raise InfraError(f"egress proxy for the {name} phase: {exc}") from None
        sock_dir = proxy.socket_path.parent
        args = ("--ro-bind", str(sock_dir), host.SANDBOX_DIR)
        if dns:  # the sandbox's resolver asks its own 127.0.0.1:53, where the forwarder passes it to the relay
            args += ("--ro-bind", str(sock_dir / "resolv.conf"), RESOLV_CONF, "--cap-add", "CAP_NET_BIND_SERVICE")
        self.current = ProxiedExec(
            extra_args=args,
            env=host.proxy_env(f"http://127.0.0.1:{PROXY_PORT}", LOOPBACK_NAMES),
            wrapper=host.wrapper(dns, tunnels),
        )
        why = tunguard.unavailable() if GUARD_PAST_PROXY else "switched off"
        self._flows = PastProxyFlows(MAX_FLOWS) if why is None else None
        self._off_proxy = "refused and logged" if why is None else f"not logged: {why}"
        log.note(name, off_proxy=self._off_proxy)
        try:
            yield
        finally:
            self.current = None
            flows, self._flows = self._flows, None
            events, past = proxy.stop(), flows.events(name) if flows else []
            if past:  # the proxy's and the packets', in time order
                events = sorted(events + past, key=lambda e: e.time)
            log.extend(events)
            log.note(name, off_proxy=self._off_proxy)
            if flows and flows.unlogged:
                log.note(name, off_proxy_unlogged_packets=flows.unlogged)

    def guard(self) -> tunguard.TunGuard | None:
        """A TUN device for the next command of the phase (None: traffic past the proxy is not logged)."""
        if self._flows is None:
            return None
        return tunguard.TunGuard(self._flows, self._fail)

    def _fail(self, reason: str) -> None:
        self._off_proxy = reason

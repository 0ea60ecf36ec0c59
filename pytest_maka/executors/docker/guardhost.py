"""One helper container per engine that starts packet loggers in attempt containers' namespaces.

Starting a helper container per attempt (``network_mode: container:<id>``) costs a container
create and start on the engine: 150 ms on a quiet engine, up to a second under load, on the
path of an attempt's first networked command. The guard host is made once per engine and
process, ahead: a container of the proxy image with no network, the host's process table
(``pid: host``) and four capabilities (``SYS_ADMIN`` to enter a namespace, ``NET_ADMIN`` to
load rules and routes there, ``SYS_PTRACE`` to open another container's namespace and root,
``SYS_CHROOT`` to read and write the attempt container's resolver files in its root, ``inroot``). For each
attempt container the harness starts one ``exec`` in it, ``nsenter --net`` into that
container's namespace running the packet logger's loop, and talks to it over the exec's
streams. No subject can reach it: it is on no network and runs only the harness's scripts.

Where the engine refuses such a container (user-namespace remapping, a rootless engine), or
it is gone, the packet logger falls back to a helper container per attempt (``netguard``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING

import docker.errors

from ...core.errors import InfraError
from . import labels as L
from .engines import Engine
from .proxies import Channel, ProxyPool

if TYPE_CHECKING:
    from .netguard import NetGuard

ROLE = "egress-guard-host"


class GuardHost:
    """The engine's shared helper container (``make``), and the loggers it starts (``open``)."""

    def __init__(self, engine: Engine, container: str) -> None:
        self.engine = engine
        self.id = container

    @classmethod
    def make(cls, engine: Engine, image: str) -> GuardHost:
        """Create and start the helper (raises on any failure, leaving nothing)."""
        api = engine.api
        labels = {**L.owner_labels(), L.RUN: L.run_id(), L.ROLE: ROLE, L.CELL: "spare"}
        cid: str | None = None
        try:
            with engine.guard("creating the egress guard host", refusals=False):
                host_config = api.create_host_config(
                    network_mode="none",
                    pid_mode="host",
                    cap_drop=["ALL"],
                    cap_add=["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYS_CHROOT"],
                    security_opt=["no-new-privileges:true"],
                    tmpfs={"/run/maka": "size=64m"},
                )
                cid = str(api.create_container(image, entrypoint=["sleep", "infinity"], labels=labels,
                                               host_config=host_config)["Id"])  # fmt: skip
                api.start(cid)
            return cls(engine, cid)
        except BaseException:
            if cid is not None:
                with contextlib.suppress(Exception), engine.guard("removing a half-made egress guard host"):
                    api.remove_container(cid, force=True, v=True)
            raise

    def open(self, container: str, script: str, env: Mapping[str, str]) -> Channel:
        """Run ``script`` in ``container``'s network namespace (its own files in a directory of its own)."""
        with self.engine.guard("finding the sandbox's network namespace", refusals=False):
            pid = int(self.engine.api.inspect_container(container)["State"]["Pid"] or 0)
        if pid <= 0:
            raise RuntimeError("the sandbox's container is not running")
        argv = ["nsenter", "-t", str(pid), "-n", "sh", "-c", script]
        env = {**env, "MAKA_DIR": f"/run/maka/{uuid.uuid4().hex[:12]}", "MAKA_PID": str(pid)}
        return Channel.of_exec(self.engine, self.id, argv, env, "packet logger")

    def alive(self) -> bool:
        """Whether the helper still runs (a logger that failed to start may have failed for its sake)."""
        try:
            with self.engine.guard("inspecting the egress guard host", refusals=False):
                return bool(self.engine.api.inspect_container(self.id)["State"]["Running"])
        except Exception:  # engine gone too: not alive
            return False

    def close(self) -> None:
        with contextlib.suppress(InfraError), self.engine.guard("removing the egress guard host"):
            self.engine.api.remove_container(self.id, force=True, v=True)


def guard_host_key(engine: Engine) -> Hashable:
    return ("guard-host", engine.key)


def guard_host(pool: ProxyPool, engine: Engine, image: Callable[[], str]) -> Future[GuardHost]:
    """The engine's guard host, made once (in the background) by ``pool``."""
    return pool.shared(guard_host_key(engine), lambda: GuardHost.make(engine, image()))


def start_logger(
    guard: NetGuard,
    args: tuple[str, str, str, int],
    shared: Future[GuardHost],
    forget: Callable[[Future[GuardHost]], None],
) -> None:
    """Start ``guard`` (``args``: container, subnet, proxy address and port) in the guard host if it
    runs (one exec), else in a helper container of its own; a host found gone is ``forget``-ed."""
    try:
        host = shared.result()
    except Exception:  # refused by the engine: a helper container per attempt
        guard.start(*args)
        return
    try:
        guard.start(*args, host=host)
    except (InfraError, RuntimeError, docker.errors.APIError):
        guard.close()
        if host.alive():  # the namespace's fault, not the host's: the same again would fail too
            raise
        forget(shared)  # gone: the next attempt makes a new one
        guard.start(*args)

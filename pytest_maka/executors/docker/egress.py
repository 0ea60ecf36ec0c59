"""The Docker executor's egress: per attempt, an internal network and a tinyproxy container.

The attempt's container joins (per command of an allowlist phase) a network created with
``internal`` (no route out) and no host address on its bridge (``inhibit_ipv4``), so the
only thing it can talk to is the proxy container, which sits on that network and on the
egress network (``egress_network``, the default bridge unless set). Both are made ahead
(``proxies.ProxyPool``) and claimed as the lease starts; tinyproxy is started in the proxy
container per phase with that phase's rules and stopped after it, by one command each way
over the supervisor's attached stream (no ``exec``); its log becomes the phase's egress
events. The proxy image is built locally from ``debian:bookworm-slim`` with Debian's
``tinyproxy-bin``, once per engine. What a command sends past the proxy (UDP, raw IP, TCP to
other addresses or ports) is refused and logged in the attempt container's own namespace by
a helper container (``netguard``), started in the background as the lease starts.
"""

from __future__ import annotations

import functools
import hashlib
import io
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker.errors
from filelock import FileLock

from ...core.errors import InfraError
from ...egress import host, tinyproxy
from ...egress.join import joined, relay_records
from ...egress.log import EgressEvent, EgressLog
from ...egress.plan import PhasePlan
from . import labels as L
from .engines import Engine, one_line
from .guardhost import GuardHost, guard_host, guard_host_key, start_logger
from .netguard import NetGuard
from .proxies import ProxyEntry, ProxyPool, make_entry, pool_labels, remove_entry
from .resolver import ResolverFiles

PROXY_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends tinyproxy-bin python3 "
    "iproute2 nftables ulogd2 ulogd2-json "
    "&& rm -rf /var/lib/apt/lists/* && mkdir -p /etc/maka /run/maka\n"
)
PROXY_TAG = "pytest-maka-egress-proxy:" + hashlib.sha256(PROXY_DOCKERFILE.encode()).hexdigest()[:12]
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: tinyproxy listens here, inside the proxy container only; the relay listens on PROXY_PORT.
UPSTREAM_PORT = tinyproxy.PROXY_PORT + 1


@dataclass(frozen=True)
class ProxiedExec:
    """What an exec of an allowlist phase joins and adds to its environment."""

    network: str
    env: Mapping[str, str]


def ensure_proxy_image(engine: Engine, state_dir: Path, log_path: Path | None = None) -> str:
    """The proxy image's id on ``engine``, built once (under a file lock shared by workers)."""
    api = engine.api
    with engine.guard("inspecting the egress proxy image"):
        try:
            return str(api.inspect_image(PROXY_TAG)["Id"])
        except docker.errors.ImageNotFound:
            pass
    lock_dir = state_dir / "images"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_dir / f"egress-proxy-{engine.key}.lock")):
        with engine.guard("inspecting the egress proxy image"):
            try:
                return str(api.inspect_image(PROXY_TAG)["Id"])
            except docker.errors.ImageNotFound:
                pass
        lines: list[str] = []
        with engine.guard("building the egress proxy image"):
            for chunk in api.build(
                fileobj=io.BytesIO(PROXY_DOCKERFILE.encode()),
                tag=PROXY_TAG,
                labels={L.MANAGED: "1", L.ROLE: "egress-proxy"},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            ):
                if "stream" in chunk:
                    lines.append(chunk["stream"])
                if "error" in chunk:
                    if log_path is not None:
                        log_path.write_text("".join(lines) + chunk["error"])
                    raise InfraError(f"building the egress proxy image failed: {chunk['error'].strip()}")
            return str(api.inspect_image(PROXY_TAG)["Id"])


class DockerEgress:
    """One attempt's internal network and proxy container (claimed from the pool), and its phases."""

    def __init__(
        self,
        engine: Engine,
        *,
        labels: Mapping[str, str],
        egress_network: str,
        hosts: Mapping[str, str],
        state_dir: Path,
        attempt_dir: Path | None = None,
        direct: Mapping[str, str] | None = None,
        pool: ProxyPool | None = None,
        spares: bool = False,
    ) -> None:
        self.engine = engine
        #: The task's sidecars (name -> address on the project's network): reached directly, not
        #: through the proxy (NO_PROXY), and named in /etc/hosts while the resolver is the proxy's.
        self.direct = dict(direct or {})
        self.labels = dict(labels)
        self.egress_network = egress_network
        self.hosts = {"host.docker.internal": "host-gateway", **hosts}
        self.state_dir = state_dir
        self.attempt_dir = attempt_dir
        self.pool = pool if pool is not None else ProxyPool(workers=1)
        #: Keep a ready entry in the pool for the next attempt (the executor's ``prestart``).
        self.spares = spares
        self.entry: ProxyEntry | None = None
        self.current: ProxiedExec | None = None
        self._phase: str | None = None
        #: Per container (the attempt's, a separate verifier's): the packet logger in its namespace.
        self.guards: dict[str, NetGuard] = {}
        #: Why traffic past the proxy is not logged for this attempt (None: it is, or not tried yet).
        self.unguarded: str | None = None
        #: The attempt container's resolv.conf and /etc/hosts: its own, or the proxy's.
        self.files = ResolverFiles(engine, self.direct)
        self._claimed: Future[ProxyEntry] | None = None
        #: The pool's key of the claimed entry (engine, egress network, extra hosts).
        self._key: tuple[object, ...] = ()
        #: Per container: what ``prepare`` started for it (the proxy, its packet logger, its own resolver).
        self._prepared: dict[str | None, Future[None]] = {}
        #: Containers joined to the internal network since the packets were last collected.
        self._since_collect: set[str] = set()
        self._threads: ThreadPoolExecutor | None = None
        #: Set once the attempt's first networked command of an allowlist phase is done (or its first
        #: such phase, or the lease): the pool makes the next attempt's spare only then.
        self.settled = threading.Event()

    @property
    def network_id(self) -> str | None:
        return self.entry.network_id if self.entry else None

    @property
    def proxy_ip(self) -> str | None:
        return self.entry.proxy_ip if self.entry else None

    # --- made ahead -------------------------------------------------------------------
    def prepare(self, container: str | None) -> None:
        """Start, in the background, what the first allowlist phase needs: claim the proxy,
        start the packet logger in ``container``'s namespace, keep its first resolv.conf."""
        if container in self._prepared:
            return
        if self._claimed is None:
            self._key = (self.engine.key, self.egress_network, tuple(sorted(self.hosts.items())))
            spare = functools.partial(self._make, pool_labels()) if self.spares else None
            make = functools.partial(self._make, self.labels)
            self._claimed = self.pool.claim(self._key, make, spare, self.settled)
        if self._threads is None:
            self._threads = ThreadPoolExecutor(4, thread_name_prefix="maka-egress-prepare")
        self._guard_host()  # made once per engine, ahead
        self._prepared[container] = self._threads.submit(self._prepare, container)

    def _make(self, labels: Mapping[str, str]) -> ProxyEntry:
        build_log = self.attempt_dir / "egress-build.log" if self.attempt_dir else None
        image = ensure_proxy_image(self.engine, self.state_dir, build_log)
        return make_entry(self.engine, image, labels=labels, egress_network=self.egress_network, hosts=self.hosts,
                          upstream_port=UPSTREAM_PORT)  # fmt: skip

    def _prepare(self, container: str | None) -> None:
        assert self._claimed is not None
        self.entry = self._claimed.result()
        self._guard(container)
        if container is not None:  # before any join: the engine rewrites it on the first
            self.files.keep_own(container, self.guards.get(container))

    # --- phases -----------------------------------------------------------------------
    @contextmanager
    def phase(
        self, name: str, plan: PhasePlan, log: EgressLog, container: str | None = None, generation: int = 0
    ) -> Iterator[None]:
        """Run tinyproxy with this phase's rules for the block; the container's commands join the network.

        ``container`` (the attempt's; ``generation``: its restart count) has a resolv.conf naming
        the proxy for the block, so the DNS questions its programs ask are logged (and refused)
        instead of vanishing; it stays so until a command joins another network (``own_files``).
        """
        if plan.mode != "allowlist":
            yield
            return
        try:
            self.prepare(container)  # under way since the lease started, as a rule
            assert self._claimed is not None
            self.entry = self._claimed.result()
            self._start_phase(name, plan)
        except (docker.errors.APIError, OSError) as exc:
            raise InfraError(f"egress proxy for the {name} phase: {one_line(exc)}") from None
        self._phase = name
        self._note(log)
        url = f"http://{self.entry.proxy_ip}:{tinyproxy.PROXY_PORT}"
        env = host.proxy_env(url, LOOPBACK_NAMES)
        if self.direct:
            names = [n for n in env.get("NO_PROXY", "").split(",") if n] + sorted(self.direct)
            env["NO_PROXY"] = env["no_proxy"] = ",".join(names)
        self.current = ProxiedExec(self.entry.network_id, env)
        try:
            yield
        finally:
            self.current = None
            self.settled.set()
            # only the loggers of containers that joined the network since the last collection: no
            # other packet can be from the internal subnet (nothing was in it), and none is pending
            dirty, self._since_collect = self._since_collect, set()
            collected = [self._threads.submit(g.collect, name) for c, g in list(self.guards.items()) if c in dirty]
            events = self._stop_phase(name, plan)
            for future in collected:
                with suppress(docker.errors.APIError, RuntimeError):
                    events += future.result()
            log.extend(sorted(events, key=lambda e: e.time))  # the proxy's and the packets', in time order
            self._note(log)

    def ready(self, container: str, generation: int = 0) -> None:
        """Before a command of the phase joins the internal network: wait until ``container``'s
        packet logger runs (or failed, which the record says) and its own resolv.conf is kept
        (the proxy's is written right after the join, ``joined``)."""
        try:
            self.prepare(container)
            self._prepared[container].result()
        except (docker.errors.APIError, OSError) as exc:
            raise InfraError(f"egress proxy for the {self._phase} phase: {one_line(exc)}") from None

    def own_files(self, container: str) -> None:
        """Before ``container`` joins a network of its own (``all``, ``services``): its own resolv.conf
        and /etc/hosts back (only after an allowlist phase wrote the proxy's)."""
        self.files.restore(container, self.guards.get(container))

    def _start_phase(self, name: str, plan: PhasePlan) -> None:
        assert self.entry is not None
        conf = tinyproxy.render_config(
            listen="127.0.0.1",
            port=UPSTREAM_PORT,
            filter_path=f"/etc/maka/{name}.filter",
            log_path=f"/run/maka/{name}.log",
            pid_path="/run/maka/tinyproxy.pid",
        )
        ip = self.entry.proxy_ip
        answer = self.entry.channel.call(
            {"cmd": "start", "name": name, "conf": conf, "conf_path": f"/etc/maka/{name}.conf",
             "filter": "\n".join(tinyproxy.filter_lines(plan.allow)) + "\n", "filter_path": f"/etc/maka/{name}.filter",
             "log_path": f"/run/maka/{name}.log", "listen": f"{ip}:{tinyproxy.PROXY_PORT}", "dns": f"{ip}:53"},
            "configuring the egress proxy",
        )  # fmt: skip
        if answer.get("ok"):
            return
        code, out = answer.get("code"), str(answer.get("out", "")).strip()[:300]
        if code == 6:  # never run a phase behind a proxy that would forward what it is sent
            forwards = "the proxy container forwards packets (ip_forward is on)"
            raise InfraError(f"egress proxy for the {name} phase: {forwards}")
        what = "tinyproxy" if code == 3 else "the relay in front of tinyproxy"
        raise InfraError(f"egress proxy for the {name} phase: {what} did not start: {out}")

    def _stop_phase(self, name: str, plan: PhasePlan) -> list[EgressEvent]:
        assert self.entry is not None
        answer = self.entry.channel.call({"cmd": "stop"}, "stopping the egress proxy")
        if not answer.get("ok"):  # the phase's log would be lost: never pass that over
            raise InfraError(f"egress proxy for the {name} phase: stopping it failed: {answer.get('out')}")
        text, relayed = str(answer.get("log", "")), str(answer.get("relay", ""))
        return joined(tinyproxy.parse_requests(text, name, plan.allow), relay_records(relayed), name)

    # --- traffic past the proxy ------------------------------------------------------
    def _guard(self, container: str | None, generation: int = 0) -> None:
        """Start the packet logger in ``container``'s namespace (once); a failure leaves the
        network as it is (internal, nothing forwarded) and says so in the record."""
        if container is None or container in self.guards or self.unguarded is not None or self.entry is None:
            return
        entry = self.entry
        guard = NetGuard(self.engine, entry.image, {**self.labels, **L.owner_labels(), L.RUN: L.run_id()}, generation)
        try:
            with self.engine.guard("starting the egress packet logger"):
                args = (container, entry.subnet, entry.proxy_ip, tinyproxy.PROXY_PORT)
                start_logger(
                    guard, args, self._guard_host(), lambda f: self.pool.forget(guard_host_key(self.engine), f)
                )
        except Exception as exc:  # any failure (it runs on a thread): say so, leave nothing
            self.unguarded = f"not logged: {one_line(exc)}"
            with suppress(Exception):
                guard.close()
            return
        self.guards[container] = guard

    def _guard_host(self) -> Future[GuardHost]:
        return guard_host(self.pool, self.engine, functools.partial(ensure_proxy_image, self.engine, self.state_dir))

    def joined(self, container: str, generation: int = 0) -> None:
        """``container`` just joined the internal network: route it to the proxy, so the packet
        logger refuses and logs what is not for the proxy. A container restarted since its
        logger started (``generation``: its restart count) has a new namespace, which gets a
        new logger; so does one whose route could not be set (once)."""
        self._since_collect.add(container)  # this phase's packets must be collected
        stale = self.guards.get(container)
        if stale is not None and stale.generation != generation:
            with suppress(Exception):
                stale.close()
            del self.guards[container]
            self._guard(container, generation)
        try:  # after the join: the engine rewrote it on the first
            if self.entry is not None:
                self.files.proxy(container, generation, self.entry.proxy_ip, self.guards.get(container))
        except (docker.errors.APIError, OSError) as exc:
            raise InfraError(f"egress proxy for the {self._phase} phase: {one_line(exc)}") from None
        reason = "no packet logger"
        for attempt in (1, 2):
            guard = self.guards.get(container)
            if guard is None or self.entry is None:
                break
            try:
                guard.route(self.entry.proxy_ip, self.entry.gateway)
                return
            except (RuntimeError, docker.errors.APIError) as exc:
                reason = one_line(exc)
            with suppress(Exception):
                guard.close()
            del self.guards[container]
            if attempt == 1:
                self._guard(container, generation)
        if self.unguarded is None:
            self.unguarded = f"not logged: {reason}"

    def _note(self, log: EgressLog) -> None:
        if self._phase is not None:
            # a packet logger still starting counts: no command joins the network before it runs (``ready``)
            pending = any(not f.done() for f in self._prepared.values())
            logged = "refused and logged" if self.guards or pending else "not logged: no packet logger"
            log.note(self._phase, off_proxy=self.unguarded or logged)

    # --- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Remove the packet loggers, the proxy container and the network (after the attempt's container is gone)."""
        self.settled.set()
        for future in list(self._prepared.values()):
            with suppress(Exception):  # its failure was the phase's to report
                future.result()
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        for guard in self.guards.values():
            with suppress(RuntimeError):
                guard.close()
        self.guards = {}
        entry, self.entry = self.entry, None
        if entry is None and self._claimed is not None:
            with suppress(Exception):  # it failed: it left nothing
                entry = self._claimed.result()
        if self._claimed is not None:
            self.pool.release(self._key)
        self._claimed = None
        if entry is not None:
            remove_entry(entry)

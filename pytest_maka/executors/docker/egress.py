"""The Docker executor's egress: per attempt, an internal network and a tinyproxy container.

The attempt's container joins (per command of an allowlist phase) a network created with
``internal`` (no route out) and no host address on its bridge (``inhibit_ipv4``), so the
only thing it can talk to is the proxy container, which sits on that network and on the
egress network (``egress_network``, the default bridge unless set). tinyproxy is started
inside the proxy container per phase with that phase's rules and stopped after it; its
log becomes the phase's egress events. The proxy image is built locally from
``debian:bookworm-slim`` with Debian's ``tinyproxy-bin``, once per engine. What a command
sends past the proxy (UDP, raw IP, TCP to other addresses or ports) is refused and logged
in the attempt container's own namespace by a helper container (``netguard``).
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker.errors
from filelock import FileLock

from ...core.errors import InfraError
from ...egress import host, relay, tinyproxy, wire
from ...egress.join import joined, relay_records
from ...egress.log import EgressEvent, EgressLog
from ...egress.plan import PhasePlan
from . import labels as L
from .archive import text_files
from .engines import Engine, one_line
from .netguard import NetGuard, exec_as_root

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
#: Start the phase's tinyproxy (it daemonizes) and the relay, and wait until the relay listens.
START_SCRIPT = (
    '[ "$(cat /proc/sys/net/ipv4/ip_forward)" = 0 ] || { echo "ip_forward is on"; exit 6; }\n'
    'tinyproxy -c "$1" || exit 3\n'
    'rm -f /run/maka/relay.ready; python3 /etc/maka/relay.py --listen "$2" --upstream 127.0.0.1:$3 --dns "$4" '
    '--log "$5" --ready /run/maka/relay.ready >/run/maka/relay.out 2>&1 &\n'
    "echo $! > /run/maka/relay.pid; i=0\n"
    "until [ -e /run/maka/relay.ready ]; do\n"
    "  kill -0 $(cat /run/maka/relay.pid) 2>/dev/null || { cat /run/maka/relay.out; exit 4; }\n"
    "  i=$((i+1)); [ $i -lt 1000 ] || exit 5; sleep 0.01\n"
    "done\n"
)
SEPARATOR = "@@maka-egress-relay-log@@"
#: Ends the /etc/hosts lines naming the sidecars during an allowlist phase.
HOSTS_MARK = "# maka-sidecar"
#: Stop the relay (it records the connections it cuts), then tinyproxy; wait until both are gone.
STOP_SCRIPT = (
    "for f in relay tinyproxy; do p=$(cat /run/maka/$f.pid 2>/dev/null) || continue; kill $p 2>/dev/null; "
    "i=0; while kill -0 $p 2>/dev/null && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; "
    "kill -9 $p 2>/dev/null; rm -f /run/maka/$f.pid; done"
)


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
    """One attempt's internal network and proxy container, created at the first allowlist phase."""

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
        self.network_id: str | None = None
        self.proxy_id: str | None = None
        self.proxy_ip: str | None = None
        self.current: ProxiedExec | None = None
        self.subnet: str | None = None
        #: The internal network's gateway address (held by nobody: ``inhibit_ipv4``), if any.
        self.gateway: str | None = None
        self._phase: str | None = None
        self.image: str | None = None
        #: Per container (the attempt's, a separate verifier's): the packet logger in its namespace.
        self.guards: dict[str, NetGuard] = {}
        #: Why traffic past the proxy is not logged for this attempt (None: it is, or not tried yet).
        self.unguarded: str | None = None
        #: The attempt container's own resolv.conf, put back after each allowlist phase.
        self._resolv: str | None = None

    # --- setup ------------------------------------------------------------------------
    def _setup(self) -> None:
        api = self.engine.api
        build_log = self.attempt_dir / "egress-build.log" if self.attempt_dir else None
        image = self.image = ensure_proxy_image(self.engine, self.state_dir, build_log)
        name = f"maka-egress-{uuid.uuid4().hex[:12]}"
        labels = {**self.labels, **L.owner_labels(), L.RUN: L.run_id(), L.ROLE: "egress"}
        with self.engine.guard("creating the egress network"):
            self.network_id = api.create_network(
                name,
                driver="bridge",
                internal=True,
                labels=labels,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            )["Id"]
            ipam = (api.inspect_network(self.network_id).get("IPAM") or {}).get("Config") or [{}]
            self.gateway = ipam[0].get("Gateway") or None
        with self.engine.guard("creating the egress proxy container"):
            host_config = api.create_host_config(
                init=True,
                network_mode=self.egress_network,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                pids_limit=256,
                extra_hosts=dict(self.hosts),
                # logs on tmpfs: tinyproxy calls fsync after every line; the DNS responder binds port 53
                tmpfs={"/run/maka": "size=64m"},
                # nothing is forwarded: the relay and tinyproxy only answer (checked per phase)
                sysctls={"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ip_forward": "0"},
            )
            self.proxy_id = api.create_container(
                image,
                entrypoint=["sleep"],
                command=["infinity"],
                labels={**labels, L.ROLE: "egress-proxy"},
                host_config=host_config,
                name=f"{name}-proxy",
            )["Id"]
            files = {Path(m.__file__).name: Path(m.__file__).read_text() for m in (relay, wire)}
            api.put_archive(self.proxy_id, "/etc/maka", text_files(files))
            api.start(self.proxy_id)
            api.connect_container_to_network(self.proxy_id, self.network_id)
            info = api.inspect_container(self.proxy_id)
            endpoint = info["NetworkSettings"]["Networks"][name]
            self.proxy_ip = endpoint["IPAddress"]
        if self.proxy_ip:
            self.subnet = str(ipaddress.ip_network(f"{self.proxy_ip}/{endpoint['IPPrefixLen']}", strict=False))
        else:
            raise InfraError("the egress proxy container got no address on the attempt's internal network")

    def _exec(self, argv: list[str], container: str | None = None) -> tuple[int, str]:
        target = container or self.proxy_id
        assert target is not None
        return exec_as_root(self.engine, target, argv)

    # --- phases -----------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str, plan: PhasePlan, log: EgressLog, container: str | None = None) -> Iterator[None]:
        """Run tinyproxy with this phase's rules for the block; the container's commands join the network.

        ``container`` (the attempt's) gets a resolv.conf naming the proxy for the block, so
        the DNS questions its programs ask are logged (and refused) instead of vanishing.
        """
        if plan.mode != "allowlist":
            yield
            return
        try:
            if self.proxy_id is None:
                self._setup()
            with ThreadPoolExecutor(1) as pool:  # the packet logger starts while the proxy does
                pool.submit(self._guard, container)
                self._start_phase(name, plan)
                self._resolver(container, f"nameserver {self.proxy_ip}\n")
                self._hosts(container, add=True)
        except (docker.errors.APIError, OSError) as exc:
            raise InfraError(f"egress proxy for the {name} phase: {one_line(exc)}") from None
        self._phase = name
        self._note(log)
        assert self.network_id is not None
        url = f"http://{self.proxy_ip}:{tinyproxy.PROXY_PORT}"
        env = host.proxy_env(plan.allow, url, LOOPBACK_NAMES)
        if self.direct:
            names = [n for n in env.get("NO_PROXY", "").split(",") if n] + sorted(self.direct)
            env["NO_PROXY"] = env["no_proxy"] = ",".join(names)
        self.current = ProxiedExec(self.network_id, env)
        try:
            yield
        finally:
            self.current = None
            with suppress(docker.errors.APIError):
                self._resolver(container, self._resolv)
                self._hosts(container, add=False)
            events = self._stop_phase(name, plan)
            for guard in self.guards.values():
                with suppress(docker.errors.APIError, RuntimeError):
                    events += guard.collect(name)
            log.extend(sorted(events, key=lambda e: e.time))  # the proxy's and the packets', in time order
            self._note(log)

    # --- traffic past the proxy ------------------------------------------------------
    def _guard(self, container: str | None, generation: int = 0) -> None:
        """Start the packet logger in ``container``'s namespace (once); a failure leaves the
        network as it is (internal, nothing forwarded) and says so in the record."""
        if container is None or container in self.guards or self.unguarded is not None:
            return
        assert self.image and self.subnet and self.proxy_ip
        guard = NetGuard(self.engine, self.image, {**self.labels, **L.owner_labels(), L.RUN: L.run_id()}, generation)
        try:
            with self.engine.guard("starting the egress packet logger"):
                guard.start(container, self.subnet, self.proxy_ip, tinyproxy.PROXY_PORT)
        except Exception as exc:  # any failure (it may run on a thread): say so, leave nothing
            self.unguarded = f"not logged: {one_line(exc)}"
            with suppress(Exception):
                guard.close()
            return
        self.guards[container] = guard

    def joined(self, container: str, generation: int = 0) -> None:
        """``container`` just joined the internal network: route it to the proxy, so the packet
        logger refuses and logs what is not for the proxy. A container restarted since its
        logger started (``generation``: its restart count) has a new namespace, which gets a
        new logger; so does one whose route could not be set (once)."""
        reason = "no packet logger"
        stale = self.guards.get(container)
        if stale is not None and stale.generation != generation:
            with suppress(Exception):
                stale.close()
            del self.guards[container]
            self._guard(container, generation)
        for attempt in (1, 2):
            guard = self.guards.get(container)
            if guard is None or self.proxy_ip is None:
                break
            try:
                guard.route(self.proxy_ip, self.gateway)
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
            logged = "refused and logged" if self.guards else "not logged: no packet logger"
            log.note(self._phase, off_proxy=self.unguarded or logged)

    def _resolver(self, container: str | None, text: str | None) -> None:
        """Write the attempt container's /etc/resolv.conf (its first content is kept to put back).

        The engine rewrites that file once, when the container first joins a user-defined
        network (to name its embedded resolver, which on an internal network answers
        nothing): the first time, the container joins and leaves the internal network
        before the file is written, so the later joins of its commands keep what is written.
        """
        if container is None or text is None:
            return
        with self.engine.guard("pointing the sandbox's resolver at the egress proxy"):
            if self._resolv is None:
                code, out = self._exec(["cat", "/etc/resolv.conf"], container)
                self._resolv = out if code == 0 else ""
                self.engine.api.connect_container_to_network(container, self.network_id)
                self.engine.api.disconnect_container_from_network(container, self.network_id, force=True)
            self._exec(["sh", "-c", 'printf %s "$1" > /etc/resolv.conf', "maka", text], container)

    def _hosts(self, container: str | None, *, add: bool) -> None:
        """Name the sidecars in the container's /etc/hosts for the phase (the proxy's resolver
        answers only for allowed names), or take those lines out again."""
        if container is None or not self.direct:
            return
        lines = "".join(f"{ip}\t{name} {HOSTS_MARK}\n" for name, ip in sorted(self.direct.items()))
        script = f'h=$(grep -v "{HOSTS_MARK}" /etc/hosts); printf "%s\\n" "$h" > /etc/hosts'
        if add:
            script += '; printf %s "$1" >> /etc/hosts'
        with self.engine.guard("naming the sidecars in the sandbox's /etc/hosts"):
            self._exec(["sh", "-c", script, "maka", lines], container)

    def _start_phase(self, name: str, plan: PhasePlan) -> None:
        conf = tinyproxy.render_config(
            listen="127.0.0.1",
            port=UPSTREAM_PORT,
            filter_path=f"/etc/maka/{name}.filter",
            log_path=f"/run/maka/{name}.log",
            pid_path="/run/maka/tinyproxy.pid",
        )
        files = {f"{name}.filter": "\n".join(tinyproxy.filter_lines(plan.allow)) + "\n", f"{name}.conf": conf}
        argv = ["sh", "-c", START_SCRIPT, "maka", f"/etc/maka/{name}.conf", f"{self.proxy_ip}:{tinyproxy.PROXY_PORT}"]
        argv += [str(UPSTREAM_PORT), f"{self.proxy_ip}:53", f"/run/maka/{name}.relay.log"]
        with self.engine.guard("configuring the egress proxy"):
            self.engine.api.put_archive(self.proxy_id, "/etc/maka", text_files(files))
            code, out = self._exec(argv)
        if code == 6:  # never run a phase behind a proxy that would forward what it is sent
            forwards = "the proxy container forwards packets (ip_forward is on)"
            raise InfraError(f"egress proxy for the {name} phase: {forwards}")
        if code != 0:
            what = "tinyproxy" if code == 3 else "the relay in front of tinyproxy"
            raise InfraError(f"egress proxy for the {name} phase: {what} did not start: {out.strip()[:300]}")

    def _stop_phase(self, name: str, plan: PhasePlan) -> list[EgressEvent]:
        with self.engine.guard("stopping the egress proxy"):
            self._exec(["sh", "-c", STOP_SCRIPT])
            # /run/maka is a tmpfs, which the archive API does not see: read the logs with cat
            _, out = self._exec(["sh", "-c", f'cat "$1.log"; echo; echo "{SEPARATOR}"; cat "$1.relay.log"', "maka",
                                 f"/run/maka/{name}"])  # fmt: skip
        text, _, relayed = out.partition(SEPARATOR)
        return joined(tinyproxy.parse_requests(text, name, plan.allow), relay_records(relayed), name)

    # --- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Remove the proxy container and the network (after the attempt's container is gone)."""
        for guard in self.guards.values():
            with suppress(RuntimeError):
                guard.close()
        self.guards = {}
        if self.proxy_id is not None:
            with self.engine.guard("removing the egress proxy", refusals=False), suppress(docker.errors.NotFound):
                self.engine.api.remove_container(self.proxy_id, force=True, v=True)
            self.proxy_id = None
        if self.network_id is not None:
            with self.engine.guard("removing the egress network", refusals=False), suppress(docker.errors.NotFound):
                self.engine.api.remove_network(self.network_id)
            self.network_id = None

"""Egress proxies made ahead of time: an internal network and a running proxy container, ready to claim.

A ``ProxyEntry`` is one attempt's internal network (``internal``, no host address on its
bridge) and its proxy container, whose main process is the supervisor
(``pytest_maka/egress/supervisor.py``): the harness attaches to the container's standard
streams once (``attach_socket``: the same hijacked stream as ``docker exec``, so it works over
``ssh://`` engines too) and switches phases with one command each way, no ``exec``.

``ProxyPool`` keeps ready entries per key (engine, egress network, extra hosts; as many as
the process had attempts at once, at most MAX_READY), made in background threads: a lease
whose plan has an allowlist phase claims one when it starts (``claim``: a ready one, or one
made for it now, in the background), and the ready ones are topped up once it is made. An
entry serves one attempt only and is removed with its lease. Ready entries carry the run and
owner labels (``cell`` says ``spare``), and are removed by ``close()``, at interpreter exit
and, after a crash, by the dead-owner sweep (``maka docker-cleanup``).
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from docker.utils.socket import next_frame_header, read_exactly

from ...core.errors import InfraError
from ...egress import connection, forwarder, pump, relay, supervisor, wire
from . import labels as L
from .archive import text_files
from .engines import Engine, one_line

STDOUT = 1
#: How long one command may take before its process counts as hung (a phase's stop waits up to ~15 s).
CALL_TIMEOUT_SEC = 120.0


class Channel:
    """The harness's end of one container's main process's standard streams: one line each way per call."""

    def __init__(
        self, engine: Engine, container: str, name: str = "egress proxy's supervisor", *, conn: Any = None
    ) -> None:
        """Attach to ``container``'s main process, or use ``conn`` (an exec's hijacked stream, ``of_exec``)."""
        self.engine = engine
        self.name = name
        with engine.guard(f"attaching to the {name}", refusals=False):
            api = engine.api
            self._conn = conn or api.attach_socket(container, params={"stdin": 1, "stdout": 1, "stream": 1})
            api._disable_socket_timeout(self._conn)
        self._raw: Any = getattr(self._conn, "_sock", self._conn)
        self._buf = b""
        self._lock = threading.Lock()
        self._broken: str | None = None

    @classmethod
    def of_exec(cls, engine: Engine, container: str, argv: list[str], env: Mapping[str, str], name: str) -> Channel:
        """Start ``argv`` in ``container`` (as root) and talk to it over its standard streams."""
        with engine.guard(f"starting the {name}", refusals=False):
            api = engine.api
            eid = api.exec_create(container, argv, stdin=True, stdout=True, stderr=False, environment=dict(env),
                                  user="0")["Id"]  # fmt: skip
            conn = api.exec_start(eid, socket=True)
            return cls(engine, container, name, conn=conn)

    def call(self, msg: Mapping[str, Any], what: str) -> dict[str, Any]:
        """Send ``msg`` as a JSON line, return the supervisor's JSON answer."""
        answer: dict[str, Any] = json.loads(self.exchange(json.dumps(msg).encode(), what))
        return answer

    def exchange(self, line: bytes, what: str) -> bytes:
        """Send one line, return the one line answered; a process gone raises InfraError."""
        with self._lock, self.engine.guard(what, refusals=False):
            if self._broken is not None:
                raise InfraError(f"{what}: the {self.name} is gone ({self._broken})")
            try:
                if hasattr(self._raw, "settimeout"):  # a process that hangs fails the phase, in time
                    self._raw.settimeout(CALL_TIMEOUT_SEC)
                self._raw.sendall(line + b"\n")
                while b"\n" not in self._buf:
                    stream, size = next_frame_header(self._conn)
                    if stream < 0:
                        raise EOFError("end of stream")
                    data = read_exactly(self._conn, size) if size else b""
                    if stream == STDOUT:
                        self._buf += data
            except (OSError, EOFError, docker.errors.DockerException) as exc:
                self._broken = one_line(exc) or type(exc).__name__  # the stream is out of step from here on
                raise InfraError(f"{what}: the {self.name} is gone ({self._broken})") from None
            answer, _, self._buf = self._buf.partition(b"\n")
        return answer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()


@dataclass
class ProxyEntry:
    """One internal network and its running proxy container (with its open channel)."""

    engine: Engine
    network_id: str
    network_name: str
    proxy_id: str
    proxy_ip: str
    subnet: str
    gateway: str | None
    image: str
    channel: Channel


def make_entry(
    engine: Engine, image: str, *, labels: Mapping[str, str], egress_network: str, hosts: Mapping[str, str],
    upstream_port: int,
) -> ProxyEntry:  # fmt: skip
    """Create the network and the proxy container, start the supervisor, attach, and wait for its answer.

    Anything that fails removes what was made and raises (InfraError with the reason, as a rule)."""
    api = engine.api
    name = f"maka-egress-{uuid.uuid4().hex[:12]}"
    labels = {**labels, **L.owner_labels(), L.RUN: L.run_id(), L.ROLE: "egress"}
    made: dict[str, str] = {}
    channel: Channel | None = None
    try:
        with engine.guard("creating the egress network"):
            made["network"] = api.create_network(
                name, driver="bridge", internal=True, labels=labels,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            )["Id"]  # fmt: skip
            ipam = (api.inspect_network(made["network"]).get("IPAM") or {}).get("Config") or [{}]
        with engine.guard("creating the egress proxy container"):
            host_config = api.create_host_config(
                init=True,
                network_mode=egress_network,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                pids_limit=256,
                extra_hosts=dict(hosts),
                # logs on tmpfs: tinyproxy calls fsync after every line; the DNS responder binds port 53
                tmpfs={"/run/maka": "size=64m"},
                # nothing is forwarded: the relay and tinyproxy only answer (checked per phase)
                sysctls={"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ip_forward": "0"},
            )
            made["proxy"] = api.create_container(
                image,
                entrypoint=["python3", "-u", "/etc/maka/supervisor.py"],
                command=[str(upstream_port)],
                stdin_open=True,
                labels={**labels, L.ROLE: "egress-proxy"},
                host_config=host_config,
                name=f"{name}-proxy",
            )["Id"]
            scripts = (relay, wire, pump, connection, forwarder, supervisor)
            files = {Path(m.__file__).name: Path(m.__file__).read_text() for m in scripts}
            api.put_archive(made["proxy"], "/etc/maka", text_files(files))
        channel = Channel(engine, made["proxy"])  # before the start: nothing it says is missed
        with engine.guard("starting the egress proxy container"):
            api.start(made["proxy"])
            api.connect_container_to_network(made["proxy"], made["network"])
            endpoint = api.inspect_container(made["proxy"])["NetworkSettings"]["Networks"][name]
        ip = endpoint.get("IPAddress")
        if not ip:
            raise InfraError("the egress proxy container got no address on the attempt's internal network")
        if not channel.call({"cmd": "ping"}, "starting the egress proxy's supervisor").get("ok"):
            raise InfraError("the egress proxy's supervisor did not start")
        subnet = str(ipaddress.ip_network(f"{ip}/{endpoint['IPPrefixLen']}", strict=False))
        gateway = ipam[0].get("Gateway") or None
        return ProxyEntry(engine, made["network"], name, made["proxy"], ip, subnet, gateway, image, channel)
    except BaseException:
        if channel is not None:
            channel.close()
        _remove(engine, made.get("proxy"), made.get("network"))
        raise


def remove_entry(entry: ProxyEntry) -> None:
    """Remove the proxy container and the network (after the attempt's container left it)."""
    entry.channel.close()
    _remove(entry.engine, entry.proxy_id, entry.network_id)


def _remove(engine: Engine, proxy: str | None, network: str | None) -> None:
    if proxy is not None:
        with engine.guard("removing the egress proxy", refusals=False), contextlib.suppress(docker.errors.NotFound):
            engine.api.remove_container(proxy, force=True, v=True)
    if network is not None:
        with engine.guard("removing the egress network", refusals=False), contextlib.suppress(docker.errors.NotFound):
            engine.api.remove_network(network)


def pool_labels() -> dict[str, str]:
    """The labels of an entry made before any attempt claimed it."""
    return {L.CELL: "spare"}


#: A spare is made at most this long after the entry of the attempt that asked for it (sooner
#: once that attempt's first networked command is done): engine calls made meanwhile slow it.
SPARE_WAIT_SEC = 5.0
#: At most this many ready entries per key (as many as the process had attempts at once).
MAX_READY = 4


class ProxyPool:
    """Ready entries per key, refilled in the background; each entry is claimed once.

    A key keeps as many ready entries as the process has had attempts holding one at once,
    or as ``ready`` says when that is more (the process's concurrency, known up front: with
    ``--maka-concurrency 4`` four are kept from the first lease on), at least 1 and at most
    MAX_READY; a run of one attempt at a time keeps one. Only an entry that is ready is claimed: while the ready ones
    are still being made, a claim makes its own at once (waiting for one made after another
    would chain the attempts that start together).
    """

    def __init__(self, workers: int = 8, ready: int = 1) -> None:
        #: Entries kept ready per key from the first claim on (the process's concurrency).
        self.ready_floor = max(1, min(MAX_READY, ready))
        self._lock = threading.Lock()
        self._ready: dict[Hashable, list[Future[ProxyEntry]]] = {}
        self._in_use: Counter[Hashable] = Counter()
        self._peak: Counter[Hashable] = Counter()
        self._workers = workers
        self._own: ThreadPoolExecutor | None = None
        self._spares: ThreadPoolExecutor | None = None
        self._closed = False
        #: Helpers shared by the attempts of one engine (the guard host), made once per key.
        self._shared: dict[Hashable, Future[Any]] = {}
        atexit.register(self.close)

    def shared(self, key: Hashable, make: Callable[[], Any]) -> Future[Any]:
        """The helper made by ``make()`` for ``key``, made once in the background (closed by ``close``;
        one that failed stays failed: its users fall back, without paying the attempt again)."""
        with self._lock:
            if self._closed:
                raise InfraError("the docker executor is closed")
            future = self._shared.get(key)
            if future is None:
                if self._own is None or self._spares is None:
                    self._own = ThreadPoolExecutor(self._workers, thread_name_prefix="maka-egress-own")
                    self._spares = ThreadPoolExecutor(MAX_READY, thread_name_prefix="maka-egress-spare")
                future = self._shared[key] = self._spares.submit(make)
            return future

    def forget(self, key: Hashable, future: Future[Any]) -> None:
        """``future``'s helper is gone: the next ``shared(key, ...)`` makes a new one."""
        with self._lock:
            if self._shared.get(key) is future:
                del self._shared[key]
        _close_shared(future)

    def claim(
        self,
        key: Hashable,
        make: Callable[[], ProxyEntry],
        spare: Callable[[], ProxyEntry] | None = None,
        settled: threading.Event | None = None,
    ) -> Future[ProxyEntry]:
        """An entry for one attempt (``release(key)`` when it is gone): a ready one for ``key`` if
        any, else ``make()`` now (in the background, labelled for the attempt); with ``spare``, the
        ready ones are topped up once this one is made and the attempt's network is ``settled``
        (its first networked command done; at most SPARE_WAIT_SEC later), so that making them
        never slows down an attempt waiting for its own, nor its first command on the engine."""
        with self._lock:
            if self._closed:
                raise InfraError("the docker executor is closed")
            if self._own is None or self._spares is None:
                self._own = ThreadPoolExecutor(self._workers, thread_name_prefix="maka-egress-own")
                self._spares = ThreadPoolExecutor(MAX_READY, thread_name_prefix="maka-egress-spare")
            queue = self._ready.setdefault(key, [])
            failed = [f for f in queue if _failed(f)]
            queue[:] = [f for f in queue if f not in failed]
            mine = next((f for f in queue if f.done()), None)
            if mine is not None:
                queue.remove(mine)
            else:
                mine = self._own.submit(make)
            self._in_use[key] += 1
            self._peak[key] = max(self._peak[key], self._in_use[key])
            if spare is not None:
                while len(queue) < min(MAX_READY, max(self._peak[key], self.ready_floor)):
                    queue.append(self._spares.submit(_after, mine, spare, settled))
        for future in failed:
            _discard(future)
        return mine

    def release(self, key: Hashable) -> None:
        """An attempt's entry (claimed for ``key``) is gone."""
        with self._lock:
            self._in_use[key] = max(0, self._in_use[key] - 1)

    def ready(self) -> list[Future[ProxyEntry]]:
        """The ready entries of every key (some may still be being made)."""
        with self._lock:
            return [f for queue in self._ready.values() for f in queue]

    def close(self) -> None:
        """Remove every ready entry (waits for those still being made)."""
        with self._lock:
            self._closed = True
            pending = [f for queue in self._ready.values() for f in queue]
            self._ready = {}
            shared, self._shared = list(self._shared.values()), {}
            pools, self._own, self._spares = (self._own, self._spares), None, None
        for future in pending:
            _discard(future)
        for future in shared:
            _close_shared(future)
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)


def _after(first: Future[ProxyEntry], make: Callable[[], ProxyEntry], settled: threading.Event | None) -> ProxyEntry:
    with contextlib.suppress(Exception):
        first.result()
    if settled is not None:
        settled.wait(SPARE_WAIT_SEC)
    return make()


def _failed(future: Future[ProxyEntry]) -> bool:
    return future.done() and future.exception() is not None


def _discard(future: Future[ProxyEntry]) -> None:
    with contextlib.suppress(Exception):  # engine gone: the dead-owner sweep removes it
        remove_entry(future.result(timeout=120))


def _close_shared(future: Future[Any]) -> None:
    with contextlib.suppress(Exception):  # engine gone: the dead-owner sweep removes it
        future.result(timeout=120).close()

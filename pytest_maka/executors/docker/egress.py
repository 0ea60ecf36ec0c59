"""The Docker executor's egress: per attempt, an internal network and a tinyproxy container.

The attempt's container joins (per command of an allowlist phase) a network created with
``internal`` (no route out) and no host address on its bridge (``inhibit_ipv4``), so the
only thing it can talk to is the proxy container, which sits on that network and on the
egress network (``egress_network``, the default bridge unless set). tinyproxy is started
inside the proxy container per phase with that phase's rules and stopped after it; its
log becomes the phase's egress events. The proxy image is built locally from
``debian:bookworm-slim`` with Debian's ``tinyproxy-bin``, once per engine.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from filelock import FileLock

from ...core.errors import InfraError
from ...egress import host, tinyproxy
from ...egress.log import EgressLog
from ...egress.plan import PhasePlan
from . import labels as L
from .engines import Engine, one_line

PROXY_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends tinyproxy-bin "
    "&& rm -rf /var/lib/apt/lists/* && mkdir -p /etc/maka /run/maka\n"
)
PROXY_TAG = "pytest-maka-egress-proxy:" + hashlib.sha256(PROXY_DOCKERFILE.encode()).hexdigest()[:12]
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: Stop the phase's tinyproxy and wait until it is gone (its log is then complete).
STOP_SCRIPT = (
    "p=$(cat /run/maka/tinyproxy.pid 2>/dev/null) || exit 0; kill $p 2>/dev/null; "
    "i=0; while kill -0 $p 2>/dev/null && [ $i -lt 200 ]; do sleep 0.01; i=$((i+1)); done; "
    "kill -9 $p 2>/dev/null; rm -f /run/maka/tinyproxy.pid"
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


def _tar(files: Mapping[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


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
    ) -> None:
        self.engine = engine
        self.labels = dict(labels)
        self.egress_network = egress_network
        self.hosts = {"host.docker.internal": "host-gateway", **hosts}
        self.state_dir = state_dir
        self.attempt_dir = attempt_dir
        self.network_id: str | None = None
        self.proxy_id: str | None = None
        self.proxy_ip: str | None = None
        self.current: ProxiedExec | None = None

    # --- setup ------------------------------------------------------------------------
    def _setup(self) -> None:
        api = self.engine.api
        build_log = self.attempt_dir / "egress-build.log" if self.attempt_dir else None
        image = ensure_proxy_image(self.engine, self.state_dir, build_log)
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
        with self.engine.guard("creating the egress proxy container"):
            host_config = api.create_host_config(
                init=True,
                network_mode=self.egress_network,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                pids_limit=256,
                extra_hosts=dict(self.hosts),
            )
            self.proxy_id = api.create_container(
                image,
                entrypoint=["sleep"],
                command=["infinity"],
                labels={**labels, L.ROLE: "egress-proxy"},
                host_config=host_config,
                name=f"{name}-proxy",
            )["Id"]
            api.start(self.proxy_id)
            api.connect_container_to_network(self.proxy_id, self.network_id)
            info = api.inspect_container(self.proxy_id)
            self.proxy_ip = info["NetworkSettings"]["Networks"][name]["IPAddress"]
        if not self.proxy_ip:
            raise InfraError("the egress proxy container got no address on the attempt's internal network")

    def _exec(self, argv: list[str]) -> tuple[int, str]:
        api = self.engine.api
        assert self.proxy_id is not None
        eid = api.exec_create(self.proxy_id, argv, stdout=True, stderr=True)["Id"]
        out = api.exec_start(eid).decode(errors="replace")
        return int(api.exec_inspect(eid)["ExitCode"] or 0), out

    # --- phases -----------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str, plan: PhasePlan, log: EgressLog) -> Iterator[None]:
        """Run tinyproxy with this phase's rules for the block; the container's commands join the network."""
        if plan.mode != "allowlist":
            yield
            return
        try:
            if self.proxy_id is None:
                self._setup()
            self._start_phase(name, plan)
        except (docker.errors.APIError, OSError) as exc:
            raise InfraError(f"egress proxy for the {name} phase: {one_line(exc)}") from None
        assert self.network_id is not None
        url = f"http://{self.proxy_ip}:{tinyproxy.PROXY_PORT}"
        self.current = ProxiedExec(self.network_id, host.proxy_env(plan.allow, url, LOOPBACK_NAMES))
        try:
            yield
        finally:
            self.current = None
            log.extend(self._stop_phase(name, plan))

    def _start_phase(self, name: str, plan: PhasePlan) -> None:
        conf = tinyproxy.render_config(
            listen=str(self.proxy_ip),
            port=tinyproxy.PROXY_PORT,
            filter_path=f"/etc/maka/{name}.filter",
            log_path=f"/run/maka/{name}.log",
            pid_path="/run/maka/tinyproxy.pid",
        )
        files = {f"{name}.filter": "\n".join(tinyproxy.filter_lines(plan.allow)) + "\n", f"{name}.conf": conf}
        with self.engine.guard("configuring the egress proxy"):
            self.engine.api.put_archive(self.proxy_id, "/etc/maka", _tar(files))
            code, out = self._exec(["tinyproxy", "-c", f"/etc/maka/{name}.conf"])
        if code != 0:
            raise InfraError(f"egress proxy for the {name} phase: tinyproxy did not start: {out.strip()[:300]}")

    def _stop_phase(self, name: str, plan: PhasePlan) -> list[Any]:
        with self.engine.guard("stopping the egress proxy"):
            self._exec(["sh", "-c", STOP_SCRIPT])
            try:
                stream, _ = self.engine.api.get_archive(self.proxy_id, f"/run/maka/{name}.log")
            except docker.errors.NotFound:
                return []
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                extracted = tar.extractfile(member) if member is not None else None
                text = extracted.read().decode(errors="replace") if extracted is not None else ""
        return tinyproxy.parse_log(text, name, plan.allow)

    # --- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Remove the proxy container and the network (after the attempt's container is gone)."""
        api = self.engine.api
        if self.proxy_id is not None:
            with suppress(docker.errors.NotFound):
                api.remove_container(self.proxy_id, force=True, v=True)
            self.proxy_id = None
        if self.network_id is not None:
            with suppress(docker.errors.NotFound):
                api.remove_network(self.network_id)
            self.network_id = None

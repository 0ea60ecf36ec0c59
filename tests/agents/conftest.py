"""Agent presets for real: installed from their registries into a cache kept between runs, run in Docker
against the scripted model server on the Docker bridge's host address."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_maka.subjects.install.cache import AgentCache, InstallError, default_root
from pytest_maka.subjects.presets import PRESETS
from pytest_maka.testing.model_server import Script
from tests.conftest import lacking
from tests.docker.conftest import docker_api  # noqa: F401  (fixture: skips without an engine)

SECRET = "sk-maka-agent-secret-5be1c0"
BY_KIND = {p.kind: p for p in PRESETS}


@pytest.fixture(scope="session")
def agent_cache() -> AgentCache:
    """The real cache (``$MAKA_AGENT_CACHE`` or /var/cache/pytest-maka/agents): installs survive runs."""
    return AgentCache(default_root())


def installed(cache: AgentCache, kind: str) -> Path:
    """Install ``kind`` at its pinned version (once); skip only if its registry cannot deliver it."""
    preset = BY_KIND[kind]
    reason = lacking("npm" if preset.registry == "npm" else "docker-cli")
    if reason:
        pytest.skip(f"installing {kind} {reason}")
    try:
        return cache.ensure(preset.install_spec(None))
    except InstallError as e:
        log = cache.root / f"{preset.install_spec(None).dirname}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if any(s in text for s in ("ENOTFOUND", "ETIMEDOUT", "ECONNREFUSED", "Temporary failure in name resolution")):
            pytest.skip(f"{kind} cannot be installed here (registry unreachable): {e}")
        raise


def opencode_acp(cache: AgentCache, url: str, name: str = "acp") -> dict[str, object]:
    """``opencode acp`` (installed) as an acp subject whose Anthropic base URL is ``url``/v1, set in
    its JSON config (opencode reads no ``ANTHROPIC_BASE_URL``)."""
    installed(cache, "opencode")
    config = {
        "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {"baseURL": f"{url}/v1"}}},
    }
    return {
        "name": name,
        "kind": "acp",
        "command": "opencode acp",
        "install": "opencode",
        "env": ["ANTHROPIC_API_KEY"],
        "set_env": {
            "OPENCODE_CONFIG_CONTENT": json.dumps(config),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        },
        "cache_dir": str(cache.root),
    }


def bridge_gateway() -> str:
    """The host's address on Docker's default bridge (what host.docker.internal maps to)."""
    import docker

    client = docker.APIClient(version="auto")
    try:
        config = client.inspect_network("bridge")["IPAM"]["Config"]
    finally:
        client.close()
    for entry in config:
        if entry.get("Gateway"):
            return str(entry["Gateway"])
    return str(ipaddress.ip_network(config[0]["Subnet"])[1])  # the engine gives the bridge the first address


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    return SECRET


def tree_contains(root: Path, needle: str) -> list[str]:
    """Files below ``root`` whose bytes contain ``needle``."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            try:
                if not path.is_symlink() and needle.encode() in path.read_bytes():
                    hits.append(str(path.relative_to(root)))
            except OSError:
                continue
    return hits


@dataclass
class DockerModel:
    """The scripted model server in a container on an internal network of its own (nothing on the host's interfaces).

    The Docker executor's egress proxy uses that network as its egress side and resolves
    ``name`` to the container (``egress_hosts``), so agents reach it only through the proxy.
    """

    network: str
    ip: str
    port: int
    log: Path
    name: str = "model.test"

    @property
    def url(self) -> str:
        return f"http://{self.name}:{self.port}"

    def executor(self, **extra: object) -> dict[str, object]:
        return {"kind": "docker", "egress_network": self.network, "egress_hosts": {self.name: self.ip}, **extra}

    def requests(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@contextmanager
def docker_model_server(api, script: Script, workdir: Path) -> Iterator[DockerModel]:  # type: ignore[no-untyped-def]
    """Run ``script`` in a ``python:3.11-slim`` container on a fresh internal network; removed afterwards."""
    from pytest_maka.testing import model_server as ms

    pkg = workdir / "srv" / "maka_model"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("model_server.py", "model_wire.py", "model_faults.py"):
        shutil.copy(Path(ms.__file__).with_name(name), pkg / name)
    out = workdir / "srv-out"
    out.mkdir()
    (out / "script.json").write_text(ms.script_to_json(script))
    tag = uuid.uuid4().hex[:8]
    labels = {"io.pytest-maka.test": "model-server"}
    net = api.create_network(f"maka-test-model-{tag}", driver="bridge", internal=True, labels=labels)["Id"]
    cid = None
    try:
        cid = api.create_container(
            "python:3.11-slim",
            [
                "python3",
                "-u",
                "-m",
                "maka_model.model_server",
                "--host",
                "0.0.0.0",
                "--port",
                "8080",
                "--script",
                "/out/script.json",
                "--requests-log",
                "/out/requests.jsonl",
            ],
            working_dir="/srv",
            labels=labels,
            host_config=api.create_host_config(
                network_mode=f"maka-test-model-{tag}",
                binds={str(workdir / "srv"): {"bind": "/srv", "mode": "ro"}, str(out): {"bind": "/out", "mode": "rw"}},
            ),
        )["Id"]
        api.start(cid)
        for chunk in api.logs(cid, stream=True, follow=True):  # ends when the container does
            if b"scripted model server on" in chunk:
                break
        else:
            raise RuntimeError(f"model server container did not start: {api.logs(cid)[-500:]!r}")
        info = api.inspect_container(cid)["NetworkSettings"]["Networks"][f"maka-test-model-{tag}"]
        yield DockerModel(f"maka-test-model-{tag}", info["IPAddress"], 8080, out / "requests.jsonl")
    finally:
        if cid is not None:
            api.remove_container(cid, force=True)
        api.remove_network(net)


def mcp_servers_toml(
    stdio: str, stdio_args: str, http: str, *, header_var: str = "MCP_TOKEN", sse: bool = False
) -> str:
    """task.toml lines declaring a skills dir, a stdio MCP server ``stdio`` (``stdio_args``: a TOML
    list) and a streamable-http server ``http`` whose bearer header comes from ``header_var``
    (and, with ``sse``, an SSE server ``events``)."""
    text = f"""\
skills_dir = "/app/skills"

[[environment.mcp_servers]]
name = "{stdio}"
transport = "stdio"
command = "python3"
args = {stdio_args}

[[environment.mcp_servers]]
name = "{http}"
transport = "streamable-http"
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer ${{{header_var}}}" }}
"""
    if sse:
        text += '\n[[environment.mcp_servers]]\nname = "events"\ntransport = "sse"\nurl = "http://127.0.0.1:9/sse"\n'
    return text

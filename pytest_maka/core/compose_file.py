"""Reading a task's compose file without Docker: its sidecars and the main service's own keys.

Harbor merges the task's ``docker-compose.yaml`` over its own base file (``main`` built from
``environment/Dockerfile``, or its ``docker_image``, kept alive) and gives both files its
variables (0.25: ``CONTEXT_DIR``, ``MAIN_IMAGE_NAME``, ``CPUS`` / ``MEMORY`` when declared;
earlier releases and the files ``harbor tasks migrate`` writes also use ``TEST_DIR`` and the
``HOST_*`` / ``ENV_*`` log paths): a task file's ``main`` may name none of those, or be absent
(``harbor_base``, ``harbor_variables``: all of them, with Harbor's defaults), so every key of
``main`` reaches Compose.
Here the main container is the executor's (limits, keepers, restore), so the main service's
keys are applied one by one: those in ``SUPPORTED``; those in ``IGNORED`` are documented no-ops
(the harness gives the same thing its own way); any other key makes the task skip with a
one-line reason (``unsupported_reason``). A bind of a host path outside the environment
directory is an invalid task (``TaskError`` naming the file and key).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import TaskError
from .task import LOGS_DIR, SOLUTION_DIR, TESTS_DIR

SUPPORTED = (
    *("environment", "working_dir", "volumes", "extra_hosts", "shm_size", "cap_add", "cap_drop"),
    *("networks", "dns"),
)
#: Keys of the main service that are accepted and not applied, and why.
IGNORED = {
    "build": "the executor builds the main image from the task's environment (once per digest)",
    "image": "the executor names the main image itself",
    "container_name": "every attempt names its own container",
    "command": "replaced by the harness's keep-alive, as Harbor's base compose file does",
    "depends_on": "the sidecars are up (and healthy where they say so) before the main container is made",
    "hostname": "the sandbox's hostname is the harness's",
    "labels": "the harness labels the main container itself",
    "restart": "the harness owns the main container's lifetime",
    "init": "the main container always runs with an init",
    "stdin_open": "commands run through the engine's exec API",
    "tty": "commands run through the engine's exec API",
    "pull_policy": "the main image is built or resolved by the executor",
    "platform": "the engine's platform",
    "expose": "nothing is published from a sandbox",
    "ports": "nothing is published from a sandbox",
    "mem_limit": "limits come from the task's [environment] (memory_mb)",
    "cpus": "limits come from the task's [environment] (cpus)",
    "deploy": "limits come from the task's [environment]",
    "ulimits": "the engine's limits apply (Harbor's base file raises nofile)",
}
#: Capabilities a main service may add: Docker's default set (what Compose would give it anyway).
SAFE_CAPABILITIES = frozenset(
    {
        *("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP"),
        *("NET_BIND_SERVICE", "NET_RAW", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP"),
    }
)
#: Container paths the harness provides itself (Terminal-Bench binds its log dirs there).
HARNESS_DIRS = (LOGS_DIR, TESTS_DIR, SOLUTION_DIR)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


#: Keys of a network the main service lists that are applied (the rest: a skip with its name).
NETWORK_KEYS = ("aliases", "ipv4_address")
#: Network drivers a task may declare: each becomes an internal bridge of the attempt's project.
NETWORK_DRIVERS = ("bridge",)


@dataclass(frozen=True)
class MainNetwork:
    """A network the main service lists: its key in the file, its extra aliases, its fixed address."""

    key: str
    aliases: tuple[str, ...] = ()
    ipv4_address: str | None = None


@dataclass(frozen=True)
class MainService:
    """What the main container takes from its compose service."""

    environment: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    #: (host path, container path, read only): host paths inside the environment directory.
    binds: tuple[tuple[Path, str, bool], ...] = ()
    #: (volume key in the file, container path, read only): the project's named volumes.
    volumes: tuple[tuple[str, str, bool], ...] = ()
    extra_hosts: dict[str, str] = field(default_factory=dict)
    shm_size: str | int | None = None
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    #: The networks it lists (none: the project's default network, as Compose does).
    networks: tuple[MainNetwork, ...] = ()
    dns: tuple[str, ...] = ()
    #: Keys given and not applied (IGNORED), for the record.
    ignored: tuple[str, ...] = ()
    unsupported: str | None = None


def compose_variables(project: str, main: str, logs: Path) -> dict[str, str]:
    """Variables the compose files of Terminal-Bench use (Harbor's use none): names made per
    project, log paths on the host under the attempt (``logs``), paths in the container."""
    return {
        "T_BENCH_TASK_DOCKER_NAME_PREFIX": project,
        "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": f"{project}-{main}",
        "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": f"{project}-{main}",
        "T_BENCH_TASK_LOGS_PATH": str(logs),
        "T_BENCH_TASK_AGENT_LOGS_PATH": str(logs / "agent"),
        "T_BENCH_TEST_DIR": "/tests",
        "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
        "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
    }


def harbor_variables(
    environment_dir: Path,
    logs: Path,
    *,
    image: str,
    cpus: float | None = None,
    memory_mb: int | None = None,
    prebuilt: str | None = None,
) -> dict[str, str]:
    """The variables Harbor sets for its compose files, every release's (its defaults: 1 CPU, 2048 MB)."""
    out = {
        "CONTEXT_DIR": str(environment_dir),
        "MAIN_IMAGE_NAME": image,
        "HOST_VERIFIER_LOGS_PATH": str(logs / "verifier"),
        "HOST_AGENT_LOGS_PATH": str(logs / "agent"),
        "HOST_ARTIFACTS_PATH": str(logs / "artifacts"),
        "ENV_VERIFIER_LOGS_PATH": f"{LOGS_DIR}/verifier",
        "ENV_AGENT_LOGS_PATH": f"{LOGS_DIR}/agent",
        "ENV_ARTIFACTS_PATH": f"{LOGS_DIR}/artifacts",
        "CPUS": f"{cpus or 1:g}",
        "MEMORY": f"{memory_mb or 2048}M",
        "TEST_DIR": TESTS_DIR,
    }
    if prebuilt:
        out["PREBUILT_IMAGE_NAME"] = prebuilt
    return out


def harbor_base(environment_dir: Path, prebuilt: str | None, placeholder: str) -> dict[str, Any]:
    """What Harbor's base file gives ``main`` for Compose to accept the project: its image
    (``docker_image``) or its build (``environment/``); ``placeholder`` when there is neither."""
    if prebuilt:
        return {"image": prebuilt}
    if (environment_dir / "Dockerfile").is_file():
        return {"build": {"context": str(environment_dir)}}
    return {"image": placeholder}


def needs_base(compose_file: Path, main: str = "main") -> bool:
    """Whether the file's ``main`` lacks what Compose needs (no ``image``, no ``build``, or no ``main``)."""
    spec = read(compose_file)["services"].get(main)
    return not isinstance(spec, dict) or not (spec.get("image") or spec.get("build"))


def harbor_main(compose_file: Path, variables: dict[str, str]) -> MainService:
    """The main service as Harbor reads it: the file's ``main`` over the base (none: the base's alone)."""
    if "main" not in read(compose_file)["services"]:
        return MainService()
    return main_service(compose_file, "main", variables)


def read(compose_file: Path) -> dict[str, Any]:
    """The file's ``services`` mapping (a TaskError names the file when it is not one)."""
    try:
        data = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TaskError(compose_file, None, f"not a readable compose file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise TaskError(compose_file, "services", "expected a mapping of services")
    return data


def sidecar_names(compose_file: Path | None, main: str) -> tuple[str, ...]:
    """The services besides ``main`` (none when the file cannot be read: the lease reports it)."""
    if compose_file is None:
        return ()
    try:
        return tuple(name for name in read(compose_file)["services"] if name != main)
    except TaskError:
        return ()


def substitute(text: str, variables: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``$VAR`` from ``variables`` (then the environment)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        value = variables.get(name, os.environ.get(name))
        return value if value else (m.group(2) or "")

    return _VAR.sub(one, text.replace("$$", "\0")).replace("\0", "$")


def main_service(compose_file: Path, main: str, variables: dict[str, str] | None = None) -> MainService:
    """The main service's keys, checked: a bad volume is a TaskError naming ``services.<main>.volumes``."""
    data = read(compose_file)
    spec = data["services"].get(main) or {}
    if not isinstance(spec, dict):
        raise TaskError(compose_file, f"services.{main}", "expected a mapping")
    subs = variables or {}
    where = f"services.{main}"
    unsupported = [k for k in spec if k not in SUPPORTED and k not in IGNORED]
    caps = tuple(str(c).upper().removeprefix("CAP_") for c in spec.get("cap_add") or ())
    unsafe = sorted(set(caps) - SAFE_CAPABILITIES)
    reason = None
    if unsupported:
        reason = f"{compose_file}: {where}.{unsupported[0]} is not supported (supported: {', '.join(SUPPORTED)})"
    elif unsafe:
        reason = f"{compose_file}: {where}.cap_add: {unsafe[0]} is not granted to a sandbox"
    networks, network_problem = _networks(spec.get("networks"), data.get("networks") or {}, subs)
    if reason is None and network_problem:
        reason = f"{compose_file}: {where}.networks: {network_problem}"
    binds, volumes = _volumes(compose_file, where, spec.get("volumes") or [], data.get("volumes") or {}, subs)
    working_dir = spec.get("working_dir")
    return MainService(
        environment=_environment(spec.get("environment"), subs),
        working_dir=substitute(str(working_dir), subs) if working_dir else None,
        binds=binds,
        volumes=volumes,
        extra_hosts=_pairs(spec.get("extra_hosts"), subs),
        shm_size=spec.get("shm_size"),
        cap_add=caps,
        cap_drop=tuple(str(c).upper().removeprefix("CAP_") for c in spec.get("cap_drop") or ()),
        networks=networks,
        dns=tuple(substitute(str(d), subs) for d in _listed(spec.get("dns"))),
        ignored=tuple(k for k in spec if k in IGNORED),
        unsupported=reason,
    )


def unsupported_reason(compose_file: Path | None, main: str) -> str | None:
    """Why the task cannot run as its compose file says (a skip at collection), or None."""
    return None if compose_file is None else main_service(compose_file, main).unsupported


def _environment(raw: Any, subs: dict[str, str]) -> dict[str, str]:
    """The list (``NAME=value``, bare ``NAME`` from the host is dropped) or mapping form."""
    if isinstance(raw, dict):
        return {str(k): substitute("" if v is None else str(v), subs) for k, v in raw.items() if v is not None}
    out: dict[str, str] = {}
    for item in raw or []:
        name, sep, value = str(item).partition("=")
        if sep:
            out[name] = substitute(value, subs)
    return out


def _listed(raw: Any) -> list[Any]:
    """A key Compose takes as one value or a list of them."""
    return [raw] if isinstance(raw, (str, int)) else list(raw or [])


def _networks(raw: Any, declared: dict[str, Any], subs: dict[str, str]) -> tuple[tuple[MainNetwork, ...], str | None]:
    """The networks ``main`` lists (list or mapping form), and why they cannot be given as
    Compose would (an external network, a driver other than a bridge, a key not applied), if so."""
    entries: dict[str, Any] = raw if isinstance(raw, dict) else {str(n): None for n in raw or []}
    out: list[MainNetwork] = []
    for key, spec in entries.items():
        top = declared.get(key) if isinstance(declared.get(key), dict) else {}
        if top.get("external"):
            return (), f"{key} is external: a task's networks are its own project's"
        if top.get("driver", "bridge") not in NETWORK_DRIVERS or top.get("driver_opts"):
            return (), f"{key}: driver {top.get('driver')!r} is not supported (an internal bridge is)"
        spec = spec if isinstance(spec, dict) else {}
        extra = [k for k in spec if k not in NETWORK_KEYS]
        if extra:
            return (), f"{key}.{extra[0]} is not supported (supported: {', '.join(NETWORK_KEYS)})"
        address = spec.get("ipv4_address")
        aliases = tuple(substitute(str(a), subs) for a in spec.get("aliases") or ())
        out.append(MainNetwork(str(key), aliases, substitute(str(address), subs) if address else None))
    return tuple(out), None


def _pairs(raw: Any, subs: dict[str, str]) -> dict[str, str]:
    """``extra_hosts`` as a mapping or ``host:ip`` / ``host=ip`` list entries."""
    if isinstance(raw, dict):
        return {str(k): substitute(str(v), subs) for k, v in raw.items()}
    out = {}
    for item in raw or []:
        text = substitute(str(item), subs)
        sep = "=" if "=" in text else ":"
        name, _, address = text.partition(sep)
        out[name] = address
    return out


def _volumes(
    compose_file: Path, where: str, entries: list[Any], declared: dict[str, Any], subs: dict[str, str]
) -> tuple[tuple[tuple[Path, str, bool], ...], tuple[tuple[str, str, bool], ...]]:
    root = compose_file.parent.resolve()
    binds: list[tuple[Path, str, bool]] = []
    volumes: list[tuple[str, str, bool]] = []
    for i, entry in enumerate(entries):
        key = f"{where}.volumes[{i}]"
        if isinstance(entry, dict):
            source, target = str(entry.get("source") or ""), str(entry.get("target") or "")
            read_only, kind = bool(entry.get("read_only")), entry.get("type", "volume")
        else:
            parts = substitute(str(entry), subs).split(":")
            source, target = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
            kind = "bind" if source[:1] in (".", "/", "~") else "volume"
        source, target = substitute(source, subs), substitute(target, subs)
        if not target.startswith("/"):
            raise TaskError(compose_file, key, f"expected an absolute container path, got {target!r}")
        if any(target == d or target.startswith(d + "/") for d in HARNESS_DIRS):
            continue  # the harness provides its log, tests and solution dirs
        if kind == "bind":
            host = (root / os.path.expanduser(source)).resolve()
            if host != root and root not in host.parents:
                raise TaskError(compose_file, key, f"binds {source!r}, outside the task's environment directory {root}")
            binds.append((host, target, read_only))
        elif kind == "volume":
            if not source:
                source = f"anonymous-{i}"
            elif source not in declared:
                raise TaskError(compose_file, key, f"names volume {source!r}, not declared under the top-level volumes")
            elif isinstance(declared[source], dict) and declared[source].get("external"):
                raise TaskError(compose_file, key, f"volume {source!r} is external: a task owns its volumes")
            volumes.append((source, target, read_only))
        else:
            raise TaskError(compose_file, key, f"type {kind!r} is not supported (bind or volume)")
    return tuple(binds), tuple(volumes)

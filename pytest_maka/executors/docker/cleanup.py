"""Remove what dead runs left on Docker engines.

    python -m pytest_maka.executors.docker.cleanup [--engine URL ...] [--all] [--images] [--dry-run]

Without ``--all`` only containers whose owning process (on this host) is gone are removed,
so it is safe while other runs are going. ``--all`` removes every container this plugin
made, ``--images`` also the images built from task environments.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import docker.errors

from . import labels as L
from .engines import Engine, one_line
from .options import DockerOptions
from .verdict_cgroup import sweep_groups


def reap_shims(container_ids: Iterable[str]) -> list[int]:
    """Kill containerd shims on this host still serving ``container_ids``, and their containers.

    When an engine is killed, the shims of its running containers outlive it; the engine
    that comes back has a new containerd that does not know them, so removing the container
    through the API leaves the shim and the container's processes running. Killing the
    shim's children (each the init of a container's pid namespace) ends every process
    of the container; then the shim goes. Returns the pids killed, once they have ended
    (a process under load can take a moment to die after SIGKILL).
    """
    ids = [cid.encode() for cid in container_ids if len(cid) >= 12]
    if not ids:
        return []
    table = processes()
    shims = {
        pid
        for pid, (_, cmd) in table.items()
        if b"containerd-shim" in cmd.split(b"\0", 1)[0] and any(b"\0" + i in cmd for i in ids)
    }
    victims = kill_trees(table, shims)
    wait_ended(victims)
    return victims


def wait_ended(pids: Iterable[int], timeout_sec: float = 10.0) -> list[int]:
    """Wait until each of ``pids`` has ended (gone, or a zombie); returns those still running."""
    left = list(pids)
    deadline = time.monotonic() + timeout_sec
    while left:
        left = [pid for pid in left if _running(pid)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return left


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def processes() -> dict[int, tuple[int, bytes]]:
    """Every process on this host: pid -> (parent pid, command line with NUL separators)."""
    table: dict[int, tuple[int, bytes]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        table[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    return table


def kill_trees(table: dict[int, tuple[int, bytes]], roots: set[int]) -> list[int]:
    """SIGKILL the children of ``roots`` (a container's init ends its whole pid namespace), then
    the roots. Returns the pids signalled."""
    victims = [pid for pid, (ppid, _) in table.items() if ppid in roots] + sorted(roots)
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return victims


def is_local(engine: Engine) -> bool:
    """Whether the engine runs on this host (its shims are processes we can see)."""
    return engine.url.startswith("unix://")


def sweep(engine: Engine, *, everything: bool = False, images: bool = False, dry_run: bool = False) -> list[str]:
    """Remove leftovers on one engine; returns what was (or would be) removed."""
    api = engine.api
    removed: list[str] = []
    with engine.guard("listing leftovers"):
        containers = api.containers(all=True, filters={"label": f"{L.MANAGED}=1"})
    for c in containers:
        labels = c.get("Labels") or {}
        if not (everything or L.owner_is_dead(labels)):
            continue
        name = f"container {c['Id'][:12]} ({labels.get(L.CELL, '?')}, run {labels.get(L.RUN, '?')[:8]})"
        if not dry_run:
            try:
                with engine.guard(f"removing {name}", refusals=False):
                    api.remove_container(c["Id"], force=True, v=True)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if not (exc.status_code == 409 and _gone_soon(engine, c["Id"])):  # another sweep removes it
                    name += f": not removed: {one_line(exc)}"
            if is_local(engine):
                reap_shims([c["Id"]])
        removed.append(name)
    if is_local(engine):  # verifications a killed harness left in the middle of a command
        removed += [f"verification cgroup {group}" for group in sweep_groups(dry_run=dry_run)]
    removed += _sweep_networks(engine, everything=everything, dry_run=dry_run)
    removed += _sweep_volumes(engine, everything=everything, dry_run=dry_run)
    if images:
        with engine.guard("listing images"):
            found = api.images(filters={"label": f"{L.MANAGED}=1"})
        for img in found:
            tags = ", ".join(img.get("RepoTags") or []) or img["Id"][:19]
            if not dry_run:
                try:
                    with engine.guard(f"removing image {tags}", refusals=False):
                        api.remove_image(img["Id"], force=True)
                except docker.errors.APIError as exc:
                    tags += f": not removed: {one_line(exc)}"
            removed.append(f"image {tags}")
    return removed


def _gone_soon(engine: Engine, container: str, wait_sec: float = 10.0) -> bool:
    """Whether ``container``, being removed by someone else (another run's sweep), is gone within ``wait_sec``."""
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        try:
            with engine.guard("waiting for a container's removal", refusals=False):
                engine.api.inspect_container(container)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:
            return False
        time.sleep(0.1)
    return False


def _sweep_networks(engine: Engine, *, everything: bool, dry_run: bool) -> list[str]:
    """Remove the egress and compose networks of dead runs (their containers are gone by now)."""
    with engine.guard("listing networks"):
        found = engine.api.networks(filters={"label": f"{L.MANAGED}=1"})
    return _remove_labelled(
        engine, "network", [(n["Name"], n["Id"], n.get("Labels") or {}) for n in found],
        everything=everything, dry_run=dry_run,
    )  # fmt: skip


def _sweep_volumes(engine: Engine, *, everything: bool, dry_run: bool) -> list[str]:
    """Remove the compose projects' volumes of dead runs (their containers are gone by now)."""
    with engine.guard("listing volumes"):
        found = engine.api.volumes(filters={"label": f"{L.MANAGED}=1"}).get("Volumes") or []
    return _remove_labelled(
        engine, "volume", [(v["Name"], v["Name"], v.get("Labels") or {}) for v in found],
        everything=everything, dry_run=dry_run,
    )  # fmt: skip


def _remove_labelled(
    engine: Engine,
    what: str,
    found: list[tuple[str, str, dict[str, str]]],
    *,
    everything: bool,
    dry_run: bool,
) -> list[str]:
    """Remove each ``what`` (network or volume: (name, id, labels)) whose owner is dead (or all
    with ``everything``)."""
    removed = []
    for name, ident, labels in found:
        if not (everything or L.owner_is_dead(labels)):
            continue
        line = f"{what} {name} ({labels.get(L.CELL, '?')}, run {labels.get(L.RUN, '?')[:8]})"
        if not dry_run:
            try:
                with engine.guard(f"removing {line}", refusals=False):
                    if what == "network":
                        engine.api.remove_network(ident)
                    else:
                        engine.api.remove_volume(ident, force=True)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                line += f": not removed: {one_line(exc)}"
        removed.append(line)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``maka docker-cleanup``."""
    parser = argparse.ArgumentParser(prog="maka docker-cleanup", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="URL",
        help="engine URL (repeatable; default: $DOCKER_HOST or the local socket)",
    )
    parser.add_argument("--all", action="store_true", help="also containers of live or remote runs")
    parser.add_argument("--images", action="store_true", help="also images built from task environments")
    parser.add_argument("--dry-run", action="store_true", help="list, do not remove")
    args = parser.parse_args(argv)
    options = DockerOptions(engines=args.engine)
    status = 0
    for opts in options.engine_list():
        engine = Engine(opts, slots=1, state_dir=options.resolved_state_dir(), retry_sec=0)
        reason = engine.ping()
        if reason is not None:
            print(f"{engine.url}: not answering: {reason}", file=sys.stderr)
            status = 1
            continue
        done = sweep(engine, everything=args.all, images=args.images, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        for item in done:
            print(f"{engine.url}: {verb} {item}")
        if not done:
            print(f"{engine.url}: nothing to remove")
        engine.close()
    return status


if __name__ == "__main__":
    raise SystemExit(main())

"""``maka agents install|list|prune``: manage the agent install cache.

maka agents list                       presets with their pinned versions, and what is installed
maka agents install claude-code codex  install at the pinned versions (KIND@VERSION for another)
maka agents install --all              every preset (what CI does, cached between runs)
maka agents prune [--keep-pinned]      remove installs (all, or all but the pinned versions)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from .cache import AgentCache, InstallError, InstallSpec

EXIT_USAGE = 4


class Installable(Protocol):
    """What the command needs of a preset (``subjects.presets.Preset``): its kind and pinned install."""

    @property
    def kind(self) -> str: ...
    @property
    def package(self) -> str: ...
    @property
    def version(self) -> str: ...
    def install_spec(self, version: str | None) -> InstallSpec: ...


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maka agents", description="Manage the agent install cache.")
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="cache directory (default: $MAKA_AGENT_CACHE, then "
        "/var/cache/pytest-maka/agents when writable, else ~/.cache/pytest-maka/agents)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="presets, their pinned versions, and the installs in the cache")
    install = commands.add_parser("install", help="install presets at their pinned (or given) versions")
    install.add_argument("kinds", nargs="*", metavar="KIND[@VERSION]")
    install.add_argument("--all", action="store_true", help="every preset at its pinned version")
    prune = commands.add_parser("prune", help="remove installs from the cache")
    prune.add_argument("--keep-pinned", action="store_true", help="keep the presets' pinned versions")
    return parser


def main(argv: Sequence[str] | None, presets: Sequence[Installable]) -> int:
    """Run the command in ``argv`` over ``presets`` (the table ``subjects.presets.presets``)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    cache = AgentCache(Path(args.cache) if args.cache else None)
    by_kind = {p.kind: p for p in presets}
    if args.command == "list":
        for preset in presets:
            spec = preset.install_spec(None)
            state = "installed" if cache.installed(spec) else "-"
            what = f"{preset.package}@{preset.version}"
            print(f"{preset.kind:16} {what:40} {state:9} key {spec.key} {cache.path(spec)}")
        others = [
            e
            for e in cache.entries()
            if Path(str(e["path"])).name not in {p.install_spec(None).dirname for p in presets}
        ]
        for entry in others:
            what = f"{entry['package']}@{entry['version']}"
            print(f"{entry['agent']!s:16} {what:40} installed {entry['path']}")
        _list_layers()
        return 0
    if args.command == "prune":
        keep = {p.install_spec(None).dirname for p in presets} if args.keep_pinned else None
        for path in cache.prune(keep):
            print(f"removed {path}")
        return 0
    wanted = list(by_kind) if args.all else args.kinds
    if not wanted:
        print("maka agents install: name at least one preset, or --all", file=sys.stderr)
        return EXIT_USAGE
    failed = 0
    for item in wanted:
        kind, _, version = item.partition("@")
        if kind not in by_kind:
            print(
                f"maka agents install: unknown preset {kind!r}; expected one of: {', '.join(by_kind)}", file=sys.stderr
            )
            return EXIT_USAGE
        spec = by_kind[kind].install_spec(version or None)
        started = time.monotonic()
        try:
            path = cache.ensure(spec)
        except InstallError as e:
            print(f"{kind}: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"{kind} {spec.version}: {path} ({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


def _list_layers() -> None:
    """The Docker images that hold an install on top of an environment (key: install + environment digest)."""
    try:
        import docker

        from ...executors.docker.layers import layered_images

        api = docker.APIClient(version="auto", timeout=10)
        images = layered_images(api)
    except Exception as e:  # no engine, no SDK: the host cache above is still the answer
        print(f"(no Docker engine answered, so environment layers are not listed: {type(e).__name__})")
        return
    for image in images:
        layers = image.get("layers") or {}
        installs = ", ".join(str(v) for v in layers.values()) if isinstance(layers, dict) else "?"
        tag = (image.get("tags") or ["<untagged>"])[0]  # type: ignore[index]
        print(f"layer  {installs} on env {str(image.get('env', '?'))[:19]} -> {tag}")

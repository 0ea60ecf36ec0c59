"""The import-graph half of bench/structure.py: modules, import edges, cycles and layers.

Standard library only. A module is a dotted name below `pytest_maka`; an edge is one import
(`deferred`: inside a function or under `if TYPE_CHECKING:`). ``code`` below is
`structure.Code` (anything with `files`, `edges`).
"""

from __future__ import annotations

import ast
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "pytest_maka"

# Lowest first. A module belongs to the entry that names the first part of its dotted name below
# `pytest_maka.`; `""` is the top-level package's own `__init__` (the version). A module no entry
# names is printed as not placed (a new package: add it here).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core", "")),
    ("infrastructure", ("egress", "store", "compose", "pid1")),
    ("seams", ("executors", "subjects", "benchmarks", "verifiers", "report")),
    ("run", ("run",)),
    ("engine", ("engine", "contracts", "hostcheck", "scale", "cluster", "live")),
    ("glue", ("plugin", "collect", "fixtures", "session", "reporter", "compat", "hookspecs", "builtins")),
    ("entry points", ("cli", "testing")),
)


@dataclass(frozen=True)
class Edge:
    """One import of module `dst` by module `src` (`deferred`: inside a function or TYPE_CHECKING)."""

    src: str
    dst: str
    line: int
    deferred: bool


def module_name(root: Path, path: Path) -> str:
    """`pytest_maka/run/steps.py` -> `pytest_maka.run.steps`; a package's `__init__.py` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(code: Any, module: str) -> bool:
    return code.files[module].name == "__init__.py"


def package_of(code: Any, module: str) -> str:
    return module if is_package(code, module) else module.rpartition(".")[0]


def unit_of(code: Any, module: str) -> str:
    """A module's package, except that a top-level module (`plugin`, `cli`, ...) is a unit of its own."""
    package = package_of(code, module)
    return module if package == PACKAGE else package


def top_of(module: str) -> str:
    """The first name below `pytest_maka.` (`run`, `executors`, `plugin`, ...)."""
    return short(module).split(".")[0]


def resolve(code: Any, module: str, node: ast.ImportFrom) -> list[str]:
    """The modules of this repository that `from ... import ...` names (relative imports resolved)."""
    if node.level:
        base = package_of(code, module).split(".")
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in code.files]
    if len(found) < len(node.names) and target in code.files:
        found.append(target)
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; only components of more than one node, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def graph_of(edges: list[Edge], key=lambda module: module) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        src, dst = key(edge.src), key(edge.dst)
        graph[dst]
        if src != dst:
            graph[src].add(dst)
    return graph


def layer_of(module: str) -> tuple[int, str] | None:
    """The layer of a module (index, name), or None when LAYERS does not place it."""
    first = module.removeprefix(PACKAGE).removeprefix(".").split(".")[0]
    for position, (name, members) in enumerate(LAYERS):
        if first in members:
            return position, name
    return None


def short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".") if module != PACKAGE else PACKAGE


def _eager(edges: list[Edge]) -> list[Edge]:
    return [edge for edge in edges if not edge.deferred]


def report_layers(code: Any, say) -> None:
    say("layers, lowest first (an arrow points up when a lower layer imports a higher one):")
    for position, (name, members) in enumerate(LAYERS):
        say(f"  {position} {name}: " + ", ".join(m or "__init__" for m in members))
    unplaced = sorted({short(m) for m in code.files if layer_of(m) is None})
    if unplaced:
        say("  not placed by LAYERS: " + ", ".join(unplaced))
    up = []
    for edge in code.edges:
        src, dst = layer_of(edge.src), layer_of(edge.dst)
        if src and dst and src[0] < dst[0]:
            up.append(edge)
    pairs = Counter((top_of(e.src), top_of(e.dst)) for e in up)
    deferred = sum(e.deferred for e in up)
    say(f"arrows that point up: {len(up)} imports ({deferred} deferred) in {len(pairs)} package pairs")
    for (src, dst), count in sorted(pairs.items(), key=lambda p: (-p[1], p[0])):
        say(f"  {count:4}  {src} -> {dst}")
    say()


def report_cycles(code: Any, say) -> None:
    """Import cycles between files and between packages, with all imports and with module-level ones only."""
    for title, edges in (("all imports", code.edges), ("module-level imports only", _eager(code.edges))):
        files = strongly_connected(graph_of(edges))
        packages = strongly_connected(graph_of(edges, lambda m: unit_of(code, m)))
        say(f"import cycles, {title}: {len(files)} between files, {len(packages)} between packages")
        for component in files:
            say(f"  files ({len(component)}): " + " ".join(short(m) for m in component))
        for component in packages:
            say(f"  packages ({len(component)}): " + " ".join(short(m) for m in component))
        say()

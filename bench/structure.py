"""Figures of the code's structure (issue 23): largest functions, import cycles, arrows that point up.

    python bench/structure.py                 # the checkout this script is in
    python bench/structure.py --repo DIR      # another checkout (DIR holds pytest_maka/)

Standard library only (`ast`); nothing is imported or run. Every import is counted, the ones
inside a function or under `if TYPE_CHECKING:` too (they are marked "deferred": they do not run
at import time, but the two files still depend on each other), and relative imports are resolved.

Definitions:
- a file import cycle is a strongly connected component of more than one file in the graph
  "file A imports module B" (`from pkg import name` counts as importing `pkg.name` when that is a
  module, else `pkg`); a package cycle is the same over packages (directories), an edge wherever
  a file of one package imports a file of another (a module at the top level, `plugin.py`,
  `cli.py`, ..., counts as a package of its own);
- an arrow that points up is an import from a file whose layer is lower to a file whose layer is
  higher, in the order of LAYERS below (DESIGN.md §2: glue → run → adapters/executors/store → core);
- a fact write by literal key is `x.agent_info["key"] = ...` (or one of FACT_DICTS, also through
  `.setdefault("key", ...)` / `.update(key=...)`) or one keyword of a `facts_update(...)` call; a record
  read by literal key is `record["key"]` or `record.get("key")` on a name in RECORD_NAMES; the
  files a fact key reaches are those that name it as a string, a keyword or an attribute
  (a proxy for the files a new fact of the same kind touches).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

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

FACT_DICTS = frozenset({"agent_info", "verifier_info", "isolation", "budget_info", "usage", "timings"})
RECORD_NAMES = frozenset({"record", "rec", "r", "row"})
# The fact keys b33469a (before issue 23) wrote by literal key: measured again after a change, with
# whatever keys are then written by literal key, so that the "files naming a fact key" figure
# compares like with like once the facts are typed fields (a key named by no file is left out).
# fmt: off
FACT_KEYS = frozenset((
    "aborted", "artifacts", "budget_exceeded", "cache_read_tokens", "claim_agrees_with_verdict", "collect_hooks",
    "copied_out", "copy_truncated", "cost", "cost_usd", "environment", "freeze_notes", "infra_error",
    "input_tokens", "limits_hit", "models", "network", "not_started", "output_tokens", "policy_denied", "setup",
    "started", "subject_fault", "subject_outcome", "tamper", "teardown_error", "telemetry", "usage_partial",
    "usage_problems", "workspace_changes",
))
# fmt: on
TOP = 10
BIG_FILE = 400


@dataclass(frozen=True)
class Edge:
    """One import of module `dst` by module `src` (`deferred`: inside a function or TYPE_CHECKING)."""

    src: str
    dst: str
    line: int
    deferred: bool


@dataclass
class Code:
    """What the script reads from one checkout."""

    files: dict[str, Path] = field(default_factory=dict)  # module -> file
    lines: dict[str, int] = field(default_factory=dict)
    functions: list[tuple[int, str, str, int]] = field(default_factory=list)  # lines, module, qualname, line
    edges: list[Edge] = field(default_factory=list)
    fact_writes: list[tuple[str, int, str]] = field(default_factory=list)  # module, line, key
    record_reads: list[tuple[str, int, str]] = field(default_factory=list)
    names: dict[str, set[str]] = field(default_factory=dict)  # module -> string constants, keywords, attributes


def module_name(root: Path, path: Path) -> str:
    """`pytest_maka/run/steps.py` -> `pytest_maka.run.steps`; a package's `__init__.py` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(code: Code, module: str) -> bool:
    return code.files[module].name == "__init__.py"


def package_of(code: Code, module: str) -> str:
    return module if is_package(code, module) else module.rpartition(".")[0]


def unit_of(code: Code, module: str) -> str:
    """A module's package, except that a top-level module (`plugin`, `cli`, ...) is a unit of its own."""
    package = package_of(code, module)
    return module if package == PACKAGE else package


def top_of(module: str) -> str:
    """The first name below `pytest_maka.` (`run`, `executors`, `plugin`, ...)."""
    return short(module).split(".")[0]


def resolve(code: Code, module: str, node: ast.ImportFrom) -> list[str]:
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


class Reader(ast.NodeVisitor):
    """Walks one file: functions, imports, fact writes and record reads."""

    def __init__(self, code: Code, module: str) -> None:
        self.code = code
        self.module = module
        self.scope: list[str] = []
        self.deferred = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qualname = ".".join([*self.scope, node.name])
        size = (node.end_lineno or node.lineno) - node.lineno + 1
        self.code.functions.append((size, self.module, qualname, node.lineno))
        self.scope.append(node.name)
        self.deferred += 1
        self.generic_visit(node)
        self.deferred -= 1
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.deferred += checking
        for child in node.body:
            self.visit(child)
        self.deferred -= checking
        for child in node.orelse:
            self.visit(child)

    def _edge(self, dst: str, line: int) -> None:
        if dst != self.module:
            self.code.edges.append(Edge(self.module, dst, line, self.deferred > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            while name and name not in self.code.files:
                name = name.rpartition(".")[0]
            if name:
                self._edge(name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for dst in resolve(self.code, self.module, node):
            self._edge(dst, node.lineno)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            if isinstance(node.ctx, ast.Store) and _names_fact_dict(node.value):
                self.code.fact_writes.append((self.module, node.lineno, key.value))
            elif isinstance(node.ctx, ast.Load) and _names_record(node.value):
                self.code.record_reads.append((self.module, node.lineno, key.value))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            if func.attr == "facts_update":
                for keyword in node.keywords:
                    self.code.fact_writes.append((self.module, node.lineno, keyword.arg or "**"))
            elif func.attr == "setdefault" and literal and _names_fact_dict(func.value):
                self.code.fact_writes.append((self.module, node.lineno, literal))
            elif func.attr == "update" and _names_fact_dict(func.value):
                for keyword in node.keywords:
                    self.code.fact_writes.append((self.module, node.lineno, keyword.arg or "**"))
            elif func.attr == "get" and literal and _names_record(func.value):
                self.code.record_reads.append((self.module, node.lineno, literal))
        self.generic_visit(node)


def _names_fact_dict(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in FACT_DICTS


def _names_record(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in RECORD_NAMES


def read(repo: Path) -> Code:
    """Parse every `.py` file of `repo/pytest_maka`."""
    code = Code()
    paths = sorted((repo / PACKAGE).rglob("*.py"))
    for path in paths:
        code.files[module_name(repo, path)] = path
    for module, path in code.files.items():
        text = path.read_text(encoding="utf-8")
        code.lines[module] = len(text.splitlines())
        tree = ast.parse(text, filename=str(path))
        Reader(code, module).visit(tree)
        code.names[module] = set(_names_in(tree))
    return code


def _names_in(tree: ast.AST):
    """Every string constant, keyword argument and attribute name of a file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg
        elif isinstance(node, ast.Attribute):
            yield node.attr


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


def report(code: Code, out=sys.stdout) -> None:
    """Print every figure as plain text (pasteable into bench/RESULTS.md)."""

    def say(line: str = "") -> None:
        print(line, file=out)

    say(f"files: {len(code.files)}, lines: {sum(code.lines.values())}")
    say()
    say(f"largest functions (top {TOP}, lines from `def` to the end):")
    for size, module, qualname, line in sorted(code.functions, key=lambda f: (-f[0], f[1], f[3]))[:TOP]:
        say(f"  {size:5}  {short(module)}:{line} {qualname}")
    say()
    big = sorted(((n, m) for m, n in code.lines.items() if n > BIG_FILE), reverse=True)
    say(f"files over {BIG_FILE} lines: {len(big)}")
    for lines, module in big:
        say(f"  {lines:5}  {code.files[module].relative_to(code.files[PACKAGE].parent.parent)}")
    say()
    for title, edges in (("all imports", code.edges), ("module-level imports only", _eager(code.edges))):
        files = strongly_connected(graph_of(edges))
        packages = strongly_connected(graph_of(edges, lambda m: unit_of(code, m)))
        say(f"import cycles, {title}: {len(files)} between files, {len(packages)} between packages")
        for component in files:
            say(f"  files ({len(component)}): " + " ".join(short(m) for m in component))
        for component in packages:
            say(f"  packages ({len(component)}): " + " ".join(short(m) for m in component))
        say()
    _report_layers(code, say)
    _report_facts(code, say)


def _eager(edges: list[Edge]) -> list[Edge]:
    return [edge for edge in edges if not edge.deferred]


def _report_layers(code: Code, say) -> None:
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


def _report_facts(code: Code, say) -> None:
    for title, places in (
        ("fact writes by literal key (" + ", ".join(sorted(FACT_DICTS)) + ", facts_update)", code.fact_writes),
        ("record reads by literal key (" + ", ".join(sorted(RECORD_NAMES)) + ")", code.record_reads),
    ):
        files = Counter(module for module, _, _ in places)
        keys = {key for _, _, key in places}
        say(f"{title}: {len(places)} places, {len(keys)} keys, {len(files)} files")
        for module, count in files.most_common():
            say(f"  {count:4}  {short(module)}")
        say()
    _report_fact_reach(code, say)


def _report_fact_reach(code: Code, say) -> None:
    """How many files name each fact key written by literal key: what adding a fact like it touches."""
    keys = FACT_KEYS | {key for _, _, key in code.fact_writes if key != "**"}
    counted = ((sum(key in names for names in code.names.values()), key) for key in keys)
    reach = sorted(((count, key) for count, key in counted if count), reverse=True)
    if not reach:
        return
    counts = sorted(count for count, _ in reach)
    median = (
        counts[len(counts) // 2] if len(counts) % 2 else (counts[len(counts) // 2 - 1] + counts[len(counts) // 2]) / 2
    )
    say(
        f"files naming a fact key (as a string, keyword or attribute), over {len(reach)} keys (FACT_KEYS and those "
        f"written by literal key): median {median:g}, max {counts[-1]} (a common word such as 'network' counts every "
        "file using it)"
    )
    say("  " + ", ".join(f"{key} {count}" for count, key in reach))
    say()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    if not (args.repo / PACKAGE / "__init__.py").is_file():
        print(f"{args.repo}: no {PACKAGE}/__init__.py here (--repo expects a checkout of pytest-maka)", file=sys.stderr)
        return 2
    report(read(args.repo))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

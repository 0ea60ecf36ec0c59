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
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from structure_imports import PACKAGE, Edge, module_name, report_cycles, report_layers, resolve, short

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
#: The typed facts classes whose new field is a new recorded fact (issue 23's "files a new fact touches").
NEW_FACT_CLASSES = ("AgentFacts", "CarriedArtifact", "StepsVerdict", "VerifierRun")
TOP = 10
BIG_FILE = 400


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
    calls: dict[str, set[str]] = field(default_factory=dict)  # module -> names called (`X(...)`, `m.X(...)`)
    classes: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # class -> (module, annotated fields)


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
        fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        self.code.classes.setdefault(node.name, (self.module, fields))
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
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        self.code.calls.setdefault(self.module, set()).add(called)
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
    report_cycles(code, say)
    report_layers(code, say)
    _report_facts(code, say)


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
    _report_new_fact(code, say)


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


def _report_new_fact(code: Code, say) -> None:
    """The files a new recorded field of each facts class touches (see NEW_FACT_CLASSES)."""
    found = [name for name in NEW_FACT_CLASSES if name in code.classes]
    if not found:
        return
    root = code.files[PACKAGE].parent.parent
    others = [*sorted((root / "tests").rglob("*.py")), *sorted((root / "docs").glob("*.md")), root / "README.md"]
    own_test = "test_bench_structure.py"  # names the classes to test this figure: not a file a new fact touches
    texts = {path: path.read_text(encoding="utf-8") for path in others if path.is_file() and path.name != own_test}
    say("files a new recorded fact touches (a field of a facts class; source: the file defining the class and the")
    say("files constructing it, which pass every field without a default; tests/docs: files naming the class):")
    for name in found:
        home, _fields = code.classes[name]
        source = {home} | {m for m, called in code.calls.items() if name in called}
        pattern = re.compile(rf"\b{name}\b")
        rest = sum(bool(pattern.search(text)) for text in texts.values())
        say(f"  {name}: {len(source)} + {rest}  ({', '.join(sorted(short(m) for m in source))})")
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

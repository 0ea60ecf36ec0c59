"""Static check: every docker-py call of the Docker executor and the egress runs inside ``Engine.guard``.

A call outside a guard lets an engine error escape bare (``ConnectionError: ('Connection
aborted.', ...)``), naming neither the step nor the engine. The check walks the AST: a call
on a docker API client (``api.x``, ``self.api.x``, ``engine.api.x`` ...) or a read of an exec
stream (``frames_iter``), and a use of a value such a call returned (a stream read later),
must sit lexically inside a ``with <engine>.guard(...)`` block, or in a function every
call site of which does (call sites are matched by name, within those modules: a helper
of theirs called only from elsewhere counts as an entry point). What is left over must be
in ALLOWED, with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest_maka

PACKAGE = Path(pytest_maka.__file__).parent
SCANNED = ("executors/docker", "egress")

#: Entry points that may hold an unguarded engine call, and why.
ALLOWED = {
    "executors/docker/execs.py:Capture._run": (
        "the exec output reader thread: its error is kept and surfaced (Capture.surface_error), and the "
        "guarded exec_inspect of the thread that waits names the lost engine"
    ),
    "executors/docker/spawn.py:DockerProcess._demux": (
        "the spawned process's reader thread: its error is noted on the process's stderr, and the "
        "guarded wait() names the lost engine"
    ),
    "executors/docker/layers.py:layered_images": (
        "`maka agents list` hands it a plain client of its own (no Engine, no attempt) and reports any "
        "failure to answer in one line"
    ),
}
DUNDERS = ("__init__", "__enter__", "__exit__", "__iter__", "__next__")
#: docker-py calls that return a lazy stream (read later, while it is iterated).
STREAMING = {"get_archive", "build", "get_image", "export", "events", "attach", "stats", "pull", "push"}


def _api_chain(value: ast.expr) -> bool:
    """``value`` is, or is reached through, a docker API client (``api``, ``x.api``)."""
    while True:
        if isinstance(value, ast.Attribute):
            if value.attr == "api":
                return True
            value = value.value
        elif isinstance(value, ast.Call):
            value = value.func
        elif isinstance(value, ast.Subscript):
            value = value.value
        else:
            return isinstance(value, ast.Name) and value.id == "api"


def _is_stream(node: ast.Call) -> bool:
    """A call whose result is read later: a streaming endpoint, or ``stream=True`` / ``socket=True``."""
    if not isinstance(node.func, ast.Attribute) or not _is_engine_call(node):
        return False
    lazy = any(
        k.arg in ("stream", "socket") and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords
    )
    return lazy or node.func.attr in STREAMING


def _is_engine_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "frames_iter"
    return isinstance(func, ast.Attribute) and _api_chain(func.value)


def _is_guard(node: ast.With) -> bool:
    return any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "guard"
        for item in node.items
    )


def _called_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


@dataclass
class Function:
    where: str  # "executors/docker/x.py:Class.method"
    names: tuple[str, ...]  # what a call site of it is called (the class name for dunders)
    raw: list[str] = field(default_factory=list)  # unguarded engine calls and stream reads
    calls: list[tuple[str, bool]] = field(default_factory=list)  # (called name, guarded)


class _Walker(ast.NodeVisitor):
    def __init__(self, rel: str, scanned: bool) -> None:
        self.rel = rel
        self.scanned = scanned
        self.scope: list[str] = []
        self.classes: list[str] = []
        self.functions: list[Function] = [Function(f"{rel}:<module>", ())]
        self.scope_stack: list[Function] = []
        self.callees: set[int] = set()  # ids of the nodes that are called (not handed on)
        self.guards = [0]
        self.streams: list[set[str]] = [set()]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        names = (self.classes[-1],) if node.name in DUNDERS and self.classes else (node.name,)
        fn = Function(f"{self.rel}:{'.'.join(self.scope)}", names)
        self.functions.append(fn)
        self.scope_stack.append(fn)
        self.guards.append(0)
        self.streams.append(set())
        self.generic_visit(node)
        self.streams.pop()
        self.guards.pop()
        self.scope_stack.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _current(self) -> Function:
        return self.scope_stack[-1] if self.scope_stack else self.functions[0]

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item)
        guarded = _is_guard(node)
        self.guards[-1] += guarded
        for stmt in node.body:
            self.visit(stmt)
        self.guards[-1] -= guarded

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if self.scanned and isinstance(node.value, ast.Call) and _is_stream(node.value):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                self.streams[-1].update(e.id for e in elements if isinstance(e, ast.Name))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """``api.remove_network`` handed on uncalled (a callback) is a call made later, somewhere."""
        handed_on = id(node) not in self.callees and not isinstance(getattr(node, "parent", None), ast.Attribute)
        if self.scanned and not self.guards[-1] and _api_chain(node.value) and handed_on:
            self._current().raw.append(f"line {node.lineno}: {ast.unparse(node)} handed on uncalled")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in self.streams[-1] and not self.guards[-1]:
            self._current().raw.append(f"line {node.lineno}: {node.id} (an engine call's result) read unguarded")

    def visit_Call(self, node: ast.Call) -> None:
        self.callees.add(id(node.func))
        guarded = bool(self.guards[-1])
        if self.scanned and _is_engine_call(node) and not guarded:
            self._current().raw.append(f"line {node.lineno}: {ast.unparse(node.func)}")
        name = _called_name(node)
        if name is not None:
            self._current().calls.append((name, guarded))
        self.generic_visit(node)


def _parsed(source: str, name: str = "<test>") -> ast.Module:
    tree = ast.parse(source, name)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]
    return tree


def _functions() -> Iterator[tuple[Function, bool]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        scanned = rel.startswith(SCANNED)
        walker = _Walker(rel, scanned)
        walker.visit(_parsed(path.read_text(), str(path)))
        for fn in walker.functions:
            yield fn, scanned


def unguarded() -> list[str]:
    """Entry points from which an engine call can run outside any guard."""
    functions = [fn for fn, scanned in _functions() if scanned]
    callers: dict[str, list[Function]] = {}  # called name -> functions calling it outside a guard
    called: set[str] = set()
    for fn in functions:
        for name, guarded in fn.calls:
            called.add(name)
            if not guarded:
                callers.setdefault(name, []).append(fn)
    raw = {fn.where for fn in functions if fn.raw}
    todo = [fn for fn in functions if fn.raw]
    while todo:  # a function calling a raw one outside a guard is raw itself
        fn = todo.pop()
        for name in fn.names if fn.where not in ALLOWED else ():
            for caller in callers.get(name, ()):
                if caller.where not in raw:
                    raw.add(caller.where)
                    todo.append(caller)
    problems = []
    for fn in functions:
        if fn.where in raw and fn.where not in ALLOWED and not any(n in called for n in fn.names):
            why = "; ".join(fn.raw) or "calls an unguarded helper"
            problems.append(f"{fn.where}: {why}")
    return problems


def test_every_engine_call_runs_inside_a_guard() -> None:
    assert unguarded() == []


def test_the_allow_list_names_functions_that_exist_and_need_it() -> None:
    functions = {fn.where: fn for fn, _ in _functions()}
    for where in ALLOWED:
        assert where in functions, f"{where} is gone: drop it from ALLOWED"
        assert functions[where].raw, f"{where} has no unguarded engine call any more: drop it from ALLOWED"


def test_the_check_finds_an_unguarded_call_and_a_stream_read_after_its_guard(tmp_path: Path) -> None:
    source = (
        "def lost(engine):\n"
        "    engine.api.inspect_container('c')\n"
        "def late(engine):\n"
        "    with engine.guard('reading'):\n"
        "        chunks, _ = engine.api.get_archive('c', '/x')\n"
        "    return b''.join(chunks)\n"
        "def fine(engine):\n"
        "    with engine.guard('reading'):\n"
        "        return _helper(engine.api)\n"
        "def _helper(api):\n"
        "    return api.top('c')\n"
    )
    walker = _Walker("executors/docker/example.py", True)
    walker.visit(_parsed(source))
    raw = {fn.where.split(":")[1]: fn.raw for fn in walker.functions if fn.raw}
    assert set(raw) == {"lost", "late", "_helper"}
    assert "chunks" in raw["late"][0]
    helper_calls = [g for fn in walker.functions for n, g in fn.calls if n == "_helper"]
    assert helper_calls == [True]  # its only call site is guarded: not an entry point

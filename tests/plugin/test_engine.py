"""The pytest-free engine: built and run without pytest's configuration, as a Dask worker does;
the pytest glue around it without an import circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.cluster import boot
from pytest_maka.engine import Engine, EngineOptions, Registries, StrictRefusal
from pytest_maka.plugin.session import MAKA_KEY

from ..conftest import needs_bwrap, write_spec, write_task

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_maka"
#: The pytest glue: none of these may import another that (through others) imports it back.
GLUE = ("session", "collect", "fixtures", "plugin", "reporter", "scale", "live", "cluster", "engine")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: frozenset[str] = frozenset()) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function (TYPE_CHECKING ones not);
    ``from package import submodule`` names the submodule only (one of ``modules``)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            named = {f"{target}.{alias.name}" for alias in node.names}
            out |= named if named <= modules else {target, *named}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return out


def test_no_import_cycle_among_the_pytest_glue_modules() -> None:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    glue = {m for m in modules if m.split(".")[1:2] and m.split(".")[1] in GLUE}
    edges = {m: {t for t in _imports(modules[m], m, frozenset(modules)) if t in glue and t != m} for m in glue}
    assert len(glue) > 20 and sum(map(len, edges.values())) > 40, "the scan sees the glue and its imports"

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(edges[here])
        return False

    cycles = sorted((a, b) for a in glue for b in edges[a] if reaches(b, a))
    assert cycles == [], f"import cycles: {cycles}"


def test_the_engine_imports_no_pytest() -> None:
    code = (
        "import sys, pytest_maka.engine\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'xdist'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_worker_boot_path_names_no_private_pytest() -> None:
    for name in ("boot.py", "remote.py"):
        source = (PACKAGE / "cluster" / name).read_text()
        assert "_pytest" not in source and "_prepareconfig" not in source and "_do_configure" not in source, name


def _project(root: Path) -> tuple[Path, Path]:
    """A project with an ini file, conftest hooks at its root and in tests/, one above it that must not
    load, and a cohort of one task; returns (the anchor directory, the spec)."""
    (root / "outer").mkdir()
    (root / "outer" / "conftest.py").write_text("def pytest_maka_record(record, cell):\n    return {'outer': 1}\n")
    project = root / "outer" / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    hook = "def pytest_maka_record(record, cell):\n    return {{{key!r}: cell.subject.name}}\n"
    (project / "conftest.py").write_text(hook.format(key="root_hook"))
    (project / "tests" / "conftest.py").write_text(hook.format(key="tests_hook"))
    (project / "sub").mkdir()
    write_task(project / "tasks", "make-file")
    return project / "sub", write_spec(project / "cohort.yaml")


def test_conftest_files_are_the_ones_pytest_loads_first(tmp_path: Path) -> None:
    anchor, _ = _project(tmp_path)
    project = anchor.parent
    assert boot.conftest_files(project) == [project / "conftest.py", project / "tests" / "conftest.py"]
    assert boot.conftest_files(anchor) == [project / "conftest.py"], "parents up to the ini file's directory"
    bare = tmp_path / "outer" / "bare"
    bare.mkdir()
    (bare / "conftest.py").write_text("")
    assert boot.conftest_files(bare) == [bare / "conftest.py"], "no ini file: the anchor's own only"


@needs_bwrap
@pytest.mark.sandbox
def test_an_engine_built_without_pytest_runs_cells_with_the_projects_hooks(tmp_path: Path) -> None:
    anchor, spec = _project(tmp_path)
    engine = boot.build(spec, anchor.parent, tmp_path / "out")
    try:
        assert isinstance(engine, Engine) and engine.out_dir == (tmp_path / "out").resolve()
        records = {cell.subject.name: engine.run_cell(cell) for cell in engine.cohort.cells}
        assert {name: r.status for name, r in records.items()} == {
            "oracle": "agent_success",
            "nop": "agent_failure",
        }
        attempts = [a.to_json() for a in engine.ledger.read()]
        assert sorted(a["root_hook"] for a in attempts) == ["nop", "oracle"], "the project's conftest hook ran"
        assert all(a["tests_hook"] == a["root_hook"] for a in attempts), "tests/conftest.py, as pytest loads it"
        assert not any("outer" in a for a in attempts), "no conftest above the ini file's directory"
    finally:
        engine.close()


def test_strict_refusal_lists_every_problem(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "odd", extra_toml='[extra]\nauthor = "x"\n')
    (task / "task.toml").write_text((task / "task.toml").read_text() + 'unknown_top = "y"\n')
    spec = write_spec(tmp_path / "cohort.yaml")
    registries = Registries.from_hook(boot.plugins(tmp_path).hook)
    options = EngineOptions(out_dir=tmp_path / "out", started=0.0, strict=True)
    with pytest.raises(StrictRefusal) as refused:
        Engine.build(spec, registries, options)
    assert refused.value.problems and all(str(task / "task.toml") in p for p in refused.value.problems)
    lenient = Engine.build(spec, registries, EngineOptions(out_dir=None, started=0.0, reports_root=tmp_path / "r"))
    try:
        assert lenient.out_dir == (tmp_path / "r" / "t").resolve(), "reports_root / the cohort's name"
    finally:
        lenient.close()


@needs_bwrap
@pytest.mark.parametrize(
    ("args", "name"),
    [((), "serial"), (("--maka-concurrency", "3"), "pool"), (("-n", "2", "--maka-concurrency", "2"), "xdist")],
)
def test_the_strategy_is_chosen_at_configure_time(pytester: pytest.Pytester, args: tuple[str, ...], name: str) -> None:
    write_task(pytester.path / "tasks", "make-file")
    spec = write_spec(pytester.path / "cohort.yaml")
    config = pytester.parseconfigure(f"--maka-spec={spec}", *args)
    maka = config.stash[MAKA_KEY]
    assert maka.strategy is not None and maka.strategy.name == name
    if name == "xdist":
        assert config.pluginmanager.get_plugin("maka-xdist-scheduler") is not None, "workers kept 2 x N ahead"

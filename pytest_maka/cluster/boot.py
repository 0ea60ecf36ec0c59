"""How a Dask worker builds its engine: the plugins through pluggy alone, no pytest configuration.

The plugins are the ones a pytest process would use for the ``pytest_maka_*`` hooks: pytest-maka's
built-ins, the ``pytest_maka.adapters`` entry points (unless ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``
is set), and the ``conftest.py`` files pytest would load first from the directory the worker
is anchored at (the controller's invocation directory when this machine has it): the anchor's
own, its ``test*`` subdirectories', and those of its parents up to the directory of the ini
file (``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg``) when there is one.
Only their ``pytest_maka_*`` hooks (and ``pytest_addhooks``) run here: pytest's own hooks
(``pytest_configure`` and the like) do not, since no pytest session runs on a worker; the
``pytest_maka_configure`` hook is called once the cohort is loaded, with ``config=None``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import pluggy

from .. import builtins, hookspecs
from ..engine import Engine, EngineOptions, Registries
from ..engine.registry import ENTRY_POINT_GROUP

#: Files whose directory pytest takes as the rootdir (and the last one whose conftest.py it loads).
INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_hookspec = pluggy.HookspecMarker("pytest")


class _AddHooks:
    @_hookspec(historic=True)
    def pytest_addhooks(self, pluginmanager: Any) -> None:
        """A plugin registers further plugins (pytest-maka's built-ins register the adapters)."""


class WorkerPlugins(pluggy.PluginManager):
    """pytest's plugin manager reduced to what the engine asks: the ``pytest_maka_*`` hooks."""

    def __init__(self) -> None:
        super().__init__("pytest")
        self.add_hookspecs(_AddHooks)
        self.add_hookspecs(hookspecs)
        self.hook.pytest_addhooks.call_historic(kwargs={"pluginmanager": self})

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        """As pytest: a ``pytest_*`` function is a hook implementation, marked or not."""
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None or not (name.startswith("pytest_maka_") or name == "pytest_addhooks"):
            return opts
        return cast(Any, {}) if inspect.isroutine(getattr(plugin, name, None)) else None


def conftest_files(anchor: Path) -> list[Path]:
    """The conftest.py files pytest loads before collecting from ``anchor``, outermost first."""
    anchor = anchor.resolve()
    chain = [anchor]
    for parent in anchor.parents:
        if any((chain[-1] / name).is_file() for name in INI_FILES):
            break
        chain.append(parent)
    else:  # no ini file: pytest's rootdir (and the conftest cut) is the anchor itself
        chain = [anchor]
    dirs = [*reversed(chain), *sorted(p for p in anchor.glob("test*") if p.is_dir())]
    return [d / "conftest.py" for d in dirs if (d / "conftest.py").is_file()]


def _import_conftest(path: Path) -> Any:
    """Import ``path`` as pytest's default import mode would: a package's conftest by its dotted
    name (its package root's parent put first on sys.path), else by file, its directory on sys.path."""
    if (path.parent / "__init__.py").is_file():
        root = path.parent
        while (root.parent / "__init__.py").is_file():
            root = root.parent
        if str(root.parent) not in sys.path:
            sys.path.insert(0, str(root.parent))
        dotted = ".".join([*path.parent.relative_to(root.parent).parts, "conftest"])
        return importlib.import_module(dotted)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = f"maka_worker_conftest_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def plugins(anchor: Path) -> WorkerPlugins:
    """The worker's plugins for a cohort run from ``anchor``."""
    manager = WorkerPlugins()
    manager.register(builtins, "maka-builtins")
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for path in conftest_files(anchor):
        module = _import_conftest(path)
        if manager.is_registered(module):
            continue
        manager.register(module, str(path))
    return manager


def build(spec_path: Path, anchor: Path, out_dir: Path, observer: Any = None) -> Engine:
    """The worker's engine for ``spec_path`` (host checked, executor prepared), writing below
    ``out_dir``; ``observer`` wraps the hooks' progress observer (the controller's relay)."""
    hook = plugins(anchor).hook
    registries = Registries.from_hook(hook)
    if observer is not None:
        registries = dataclasses.replace(registries, observer=observer(registries.observer))
    engine = Engine.build(spec_path, registries, EngineOptions(out_dir=out_dir, started=time.time()))
    engine.check_host()
    hook.pytest_maka_configure.call_historic(kwargs={"config": None, "cohort": engine.cohort})
    engine.runner  # noqa: B018  # the executor is prepared now, not in the first attempt
    return engine

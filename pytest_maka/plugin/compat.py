"""The private pytest plumbing we depend on, kept in one place (DESIGN.md §10).

- Node ids: pytest >= 9.2 parses ids structurally; a custom item named ``task[params]``
  needs a parametrized-style id or ``--lf`` silently reruns everything (pytest#15045).
- Fixtures for non-function items have no public API (pytest#2471); we take the route
  pytest's own DoctestItem takes, which keeps autouse fixtures.
"""

from __future__ import annotations

from typing import Any

import pytest
from _pytest.fixtures import TopRequest


def cell_nodeid(parent: pytest.Collector, name: str, params: str) -> Any:
    """The explicit node id for ``name[params]`` under ``parent``, on pytest 8.x to 9.2."""
    pid = getattr(parent, "id", None)
    if pid is not None and hasattr(pid, "with_params"):  # pytest >= 9.2
        return pid.child(name).with_params(params)
    return f"{parent.nodeid}::{name}[{params}]"


def fixture_info(item: pytest.Item) -> Any:
    """Fixture closure for ``item`` (computed once per parent file and shared by its cells)."""
    return item.session._fixturemanager.getfixtureinfo(node=item, func=None, cls=None)


def setup_fixtures(item: pytest.Item, info: Any) -> None:
    """Attach fixture plumbing to a custom item (call from ``__init__``)."""
    item._fixtureinfo = info  # type: ignore[attr-defined]
    item.fixturenames = info.names_closure  # type: ignore[attr-defined]
    item.funcargs = {}  # type: ignore[attr-defined]
    item._request = TopRequest(item, _ispytest=True)  # type: ignore[arg-type, attr-defined]


def fill_fixtures(item: pytest.Item) -> None:
    """Resolve the item's fixtures into ``item.funcargs`` (call from ``setup``)."""
    item._request._fillfixtures()  # type: ignore[attr-defined]


def settle_rootdir(config: pytest.Config) -> None:
    """Compute the rootdir again now that our options are known, and use it.

    pytest picks the rootdir before plugins from entry points are loaded, so the value of
    ``--maka-out DIR`` given as a separate argument counts as a path, but only once DIR
    exists: a resumed run (or a replacement xdist worker started after DIR was made)
    got another rootdir, other node ids and another cache, which broke ``--lf``. Call from
    ``pytest_load_initial_conftests`` (after the re-parse that knows our options).
    """
    import inspect

    from _pytest.config.findpaths import determine_setup

    ns = config.known_args_namespace
    kwargs: dict[str, Any] = {
        "inifile": ns.inifilename,
        "args": ns.file_or_dir,
        "rootdir_cmd_arg": ns.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    if "override_ini" in inspect.signature(determine_setup).parameters:  # pytest >= 9
        kwargs["override_ini"] = ns.override_ini
    rootpath = determine_setup(**kwargs)[0]
    if rootpath == config.rootpath:
        return
    if config.inipath is None and ns.confcutdir == str(config.rootpath):
        ns.confcutdir = str(rootpath)  # it was derived from the old rootdir
    config._rootpath = rootpath  # type: ignore[attr-defined]
    config._parser.extra_info["rootdir"] = str(rootpath)


def fixture_module(item: pytest.Item, name: str) -> str | None:
    """The module defining the fixture ``name`` that ``item`` gets (a conftest may override it)."""
    defs = item._fixtureinfo.name2fixturedefs.get(name)  # type: ignore[attr-defined]
    return getattr(defs[-1].func, "__module__", None) if defs else None

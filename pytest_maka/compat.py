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


def fixture_module(item: pytest.Item, name: str) -> str | None:
    """The module defining the fixture ``name`` that ``item`` gets (a conftest may override it)."""
    defs = item._fixtureinfo.name2fixturedefs.get(name)  # type: ignore[attr-defined]
    return getattr(defs[-1].func, "__module__", None) if defs else None

"""The Docker executor: ``executor: {kind: docker}``. See executor.py for the lease lifecycle.

Attributes are imported on first use, so that loading the options (for spec validation) does
not import the Docker SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "DockerExecutor": ".executor",
    "DockerOptions": ".options",
    "EngineOptions": ".options",
    "cleanup_main": ".cleanup",
    "sweep": ".cleanup",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(_EXPORTS[name], __name__)
    return getattr(module, "main" if name == "cleanup_main" else name)

"""The pytest-free engine: spec + registries -> cohort, executor, cell runner.

``Engine.build`` loads and validates a cohort spec with what the plugins provide
(``Registries``), makes its subjects, verifiers and executor, and runs one cell
(``Engine.run_cell``). The pytest session (``session.MakaSession``) wraps it; a Dask worker
(``cluster/remote.py``) builds it directly. Nothing in this package imports pytest.
"""

from __future__ import annotations

from .engine import ContractBroken, Engine, EngineOptions, HostUnfit, StrictRefusal
from .registry import HookObserver, Registries

__all__ = ["ContractBroken", "Engine", "EngineOptions", "HookObserver", "HostUnfit", "Registries", "StrictRefusal"]

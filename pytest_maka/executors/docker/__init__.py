"""The Docker executor: ``executor: {kind: docker}``. See executor.py for the lease lifecycle."""

from .cleanup import main as cleanup_main
from .cleanup import sweep
from .executor import DockerExecutor
from .options import DockerOptions, EngineOptions

__all__ = ["DockerExecutor", "DockerOptions", "EngineOptions", "cleanup_main", "sweep"]

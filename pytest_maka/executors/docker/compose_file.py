"""The compose reader moved to ``pytest_maka.core.compose_file`` (adapters and executors share it)."""

from ...core.compose_file import MainService, compose_variables, main_service, read, sidecar_names

__all__ = ["MainService", "compose_variables", "main_service", "read", "sidecar_names"]

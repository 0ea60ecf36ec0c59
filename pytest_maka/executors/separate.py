"""Optional executor capability: a separate, fresh environment for the verifier.

An executor whose ``features`` include ``"separate-verifier"`` implements this Protocol.
The lifecycle (``run/separate.py``) stops the subject's environment, carries the task's
declared artifacts out of it with ``carry_out`` and leases the verifier's environment
with ``verifier_lease``; nothing else of the subject's environment reaches the verifier.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..core.task import VerifierEnvironment
from .base import LeaseRequest, Sandbox
from .copyout import MAX_LISTED, CopyReport


@dataclass
class ArtifactReport(CopyReport):
    """A CopyReport for an artifact: a symbolic link is skipped (listed), never carried as a file."""

    #: Host paths of the placeholders the extraction wrote for links (removed after the copy).
    placeholders: list[str] = field(default_factory=list)

    def link(self, rel: str, target: str) -> bytes:
        self._note(self.links, f"{rel} -> {target}")
        self.placeholders.append(rel)
        return b""

    def skipped_links(self) -> list[str]:
        return self.links[:MAX_LISTED]


@runtime_checkable
class VerifierEnvironments(Protocol):
    """What an executor offers for ``environment_mode = "separate"`` (docs/security.md)."""

    def stop_environment(self, sandbox: Sandbox) -> None:
        """Stop every process of ``sandbox`` for good; its files stay readable by ``carry_out``."""
        ...

    def carry_out(self, sandbox: Sandbox, source: str, dest: Path, report: ArtifactReport) -> str | None:
        """Copy ``source`` (absolute in the stopped sandbox) to host ``dest``, following no link:
        neither one on the way to ``source`` nor one inside it. Returns why nothing was copied
        (``"absent"``, ``"a symbolic link"``, ...), or None when it was."""
        ...

    def verifier_lease(
        self, sandbox: Sandbox, request: LeaseRequest, environment: VerifierEnvironment
    ) -> AbstractContextManager[Sandbox]:
        """A fresh sandbox built from ``environment`` (images cached per digest), removed on exit."""
        ...

    def describe_verifier(self, sandbox: Sandbox) -> dict[str, Any]:
        """For the record: which environment verified (image digest, container)."""
        ...

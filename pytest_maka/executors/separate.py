"""What a separate verifier environment carries: the artifact copy report.

The capability itself (``VerifierEnvironments``) is declared with the executor contract in
``executors/base.py`` and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import VerifierEnvironments as VerifierEnvironments  # re-exported
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

"""What copying a tree out of a sandbox did, and the rules every executor's copy keeps.

Rules (both executors, checked by tests/executors and tests/docker):
- no symlink lands in the output as a live link: each becomes a plain file holding the
  link text, and is listed in ``links``;
- nothing is read through a link, and no hard-linked file, fifo, socket or device is read
  (listed in ``skipped``);
- at most ``max_bytes`` of file content and ``max_entries`` entries are copied; what is
  past the cap is dropped and ``truncated`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

#: Defaults for one copy: the agent's logs, or the workdir snapshot of a container.
DEFAULT_MAX_COPY_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_COPY_ENTRIES = 100_000
#: Entries of ``links`` / ``skipped`` kept for the record.
MAX_LISTED = 50


@dataclass
class CopyReport:
    """Filled in by ``Sandbox.get``; the caller sets the caps."""

    max_bytes: int = DEFAULT_MAX_COPY_BYTES
    max_entries: int = DEFAULT_MAX_COPY_ENTRIES
    bytes: int = 0
    entries: int = 0
    links: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    truncated: bool = False

    def room(self) -> int:
        """Bytes that may still be copied."""
        return max(self.max_bytes - self.bytes, 0)

    def take_entry(self) -> bool:
        """Count one more entry; False (and truncated) once the entry cap is reached."""
        if self.entries >= self.max_entries:
            self.truncated = True
            return False
        self.entries += 1
        return True

    def add_bytes(self, n: int, *, complete: bool) -> None:
        """Record ``n`` bytes copied of a file (``complete``: all of it)."""
        self.bytes += n
        self.truncated = self.truncated or not complete

    def link(self, rel: str, target: str) -> bytes:
        """Note a symlink; returns the content of the plain file that stands for it."""
        self._note(self.links, f"{rel} -> {target}")
        return target.encode("utf-8", "surrogateescape")

    def skip(self, rel: str, why: str) -> None:
        self._note(self.skipped, f"{rel} ({why})")

    def _note(self, notes: list[str], text: str) -> None:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")  # any name
        if len(notes) < MAX_LISTED:
            notes.append(text)
        elif len(notes) == MAX_LISTED:
            notes.append("...")

    def summary(self) -> dict[str, Any]:
        """For the record: only what is worth a reader's attention."""
        out: dict[str, Any] = {"bytes": self.bytes, "entries": self.entries}
        if self.truncated:
            out["truncated"] = True
            out["max_bytes"] = self.max_bytes
            out["max_entries"] = self.max_entries
        if self.links:
            out["links_as_files"] = self.links
        if self.skipped:
            out["skipped"] = self.skipped
        return out


def copy_upto(src: IO[bytes], dst: IO[bytes], limit: int) -> tuple[int, bool]:
    """Copy at most ``limit`` bytes; (bytes copied, whether that was all of ``src``)."""
    copied = 0
    while copied < limit:
        data = src.read(min(1024 * 1024, limit - copied))
        if not data:
            return copied, True
        dst.write(data)
        copied += len(data)
    return copied, not src.read(1)

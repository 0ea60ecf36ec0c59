"""What is left running on the host: processes found by their environment."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with_env(marker: str) -> list[str]:
    """Live processes whose environment holds ``marker`` (the sandbox's commands and the forwarder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() not in Path(f"/proc/{pid}/environ").read_bytes():
                continue
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat not in ("Z", "X"):
            found.append(f"{pid}: {cmdline}")
    return found

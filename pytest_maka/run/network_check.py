"""Confirm from the harness side that a verifier's network failure was real (issue 27).

A verifier's output saying a host did not resolve is text the subject's code could have
printed. The harness confirms it with what the subject cannot touch: the host is one the
task's own verifier files name (read from the task directory, not from the environment),
and the phase could not reach it: the plan gave it no network (or an allowlist without the
host), or the harness itself cannot resolve or connect to it now. Confirmed, the attempt is
no verdict (``infra_failure``, named); otherwise the line stays a diagnostic.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from ..core.hostpattern import allowed
from ..core.network_evidence import failed_host, named_hosts
from ..core.task import Task
from ..egress.plan import PhasePlan

#: Seconds the harness waits for one name resolution, and for one connection.
RESOLVE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
#: What of the task's verifier files is read for host names.
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 64
#: At most this many named hosts are checked for one line that names none (glibc's message).
MAX_CHECKED_HOSTS = 3


def verifier_text(task: Task) -> str:
    """The verifier's own command and files (the task's tests directory, a legacy task's
    ``run-tests.sh``), as the task ships them."""
    parts = [task.verifier_command]
    files: list[Path] = []
    script = task.grading_options.get("script_path")
    if isinstance(script, str):
        files.append(Path(script))
    if task.tests_dir is not None and task.tests_dir.is_dir():
        files += sorted(p for p in task.tests_dir.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files[:MAX_FILES]:
        if path.is_file() and not path.is_symlink():
            try:
                with path.open("rb") as f:
                    parts.append(f.read(MAX_FILE_BYTES).decode("utf-8", "replace"))
            except OSError:
                continue
    return "\n".join(parts)


def confirm(evidence: str, task: Task, plan: PhasePlan) -> str | None:
    """Why the harness holds the verifier's network failure for real, or None when it cannot tell.

    ``evidence`` is the line ``core.network_evidence.network_failure`` found; ``plan`` is the
    verifier phase's network as granted.
    """
    named = named_hosts(verifier_text(task))
    host = failed_host(evidence)
    if host is not None and host not in named:
        return None  # a host the verifier's own files do not name: the subject's code may have printed it
    hosts = (host,) if host is not None else named[:MAX_CHECKED_HOSTS]
    if not hosts:
        return None
    if not plan.network:
        return f"the phase had no network and the verifier's files name {', '.join(hosts)}"
    for name in hosts:
        if plan.mode == "allowlist" and not allowed(plan.allow, name, 443):
            return f"{name}, named by the verifier's files, is outside the phase's allowlist"
        why = unreachable(name)
        if why is not None:
            return f"{name}, named by the verifier's files, {why}"
    return None


def unreachable(host: str, port: int = 443) -> str | None:
    """Why ``host`` cannot be reached from the harness (None: it resolves and accepts a connection)."""
    addresses = _resolve(host, port)
    if isinstance(addresses, str):
        return addresses
    for family, address in addresses:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(CONNECT_TIMEOUT_S)
                s.connect(address)
                return None
        except OSError:
            continue
    return f"resolves but accepts no connection on port {port} from the harness either"


def _resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple]] | str:  # type: ignore[type-arg]
    """The host's addresses, or why it does not resolve (within RESOLVE_TIMEOUT_S)."""
    answer: list[object] = []

    def lookup() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as e:
            answer.append(e)

    worker = threading.Thread(target=lookup, name=f"maka-resolve-{host}", daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT_S)
    if not answer:
        return f"does not resolve from the harness either (no answer in {RESOLVE_TIMEOUT_S:g} s)"
    found = answer[0]
    if isinstance(found, OSError):
        return f"does not resolve from the harness either ({found.strerror or found})"
    return [(family, address) for family, _, _, _, address in found]  # type: ignore[union-attr]

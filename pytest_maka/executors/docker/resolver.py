"""An attempt container's resolver files across its networks: its own, or the egress proxy's.

The engine rewrites a container's resolv.conf once, when it first joins a user-defined
network (to name its embedded resolver, which on an internal network answers nothing). So
the container's own file is kept before any join (``keep_own``), the proxy's is written
right after a command of an allowlist phase joined the internal network (``proxy``), and
the own one goes back before a command joins a network of its own (``restore``). During an
allowlist phase /etc/hosts names the task's sidecars (the proxy's resolver answers only for
allowed names). The files are read and written from the guard host through the container's
root (``inroot``, no engine call); where it cannot, by an ``exec`` in the container.
"""

from __future__ import annotations

from contextlib import suppress

from . import inroot
from .engines import Engine
from .netguard import NetGuard, exec_as_root

HOSTS_MARK = inroot.HOSTS_MARK
#: The exec's way: resolv.conf ($1), and the sidecars' lines in /etc/hosts taken out
#: ($2 = "strip") and, when given ($3), added.
FILES_SCRIPT = (
    'printf %s "$1" > /etc/resolv.conf; [ "$2" = strip ] || exit 0; '
    f'h=$(grep -v "{HOSTS_MARK}" /etc/hosts); printf "%s\\n" "$h" > /etc/hosts; '
    '[ -z "$3" ] || printf %s "$3" >> /etc/hosts'
)


class ResolverFiles:
    """One attempt's containers' resolver files; ``direct``: the sidecars (name -> address)."""

    def __init__(self, engine: Engine, direct: dict[str, str]) -> None:
        self.engine = engine
        self.direct = direct
        #: The attempt container's own resolv.conf (None: not read yet).
        self.own: str | None = None
        #: (container, restart count) whose files are the proxy's now.
        self._proxy_for: tuple[str, int] | None = None

    def keep_own(self, container: str, guard: NetGuard | None) -> None:
        """Read the container's own resolv.conf (before its first join)."""
        if self.own is not None:
            return
        with suppress(RuntimeError):
            self.own = guard.read_resolver() if guard is not None else None
        if self.own is None:
            with self.engine.guard("reading the sandbox's resolver configuration"):
                code, out = exec_as_root(self.engine, container, ["cat", "/etc/resolv.conf"])
            self.own = out if code == 0 else ""

    def proxy(self, container: str, generation: int, proxy_ip: str, guard: NetGuard | None) -> None:
        """The proxy's files in ``container`` (written once; again after a restart or ``restore``)."""
        if self._proxy_for == (container, generation):
            return
        self._write(container, f"nameserver {proxy_ip}\n", guard, add=True)
        self._proxy_for = (container, generation)

    def restore(self, container: str, guard: NetGuard | None) -> None:
        """The container's own files back (only after an allowlist phase wrote the proxy's)."""
        if self._proxy_for is not None and self._proxy_for[0] == container:
            self._proxy_for = None
            self._write(container, self.own, guard, add=False)

    def _write(self, container: str, resolv: str | None, guard: NetGuard | None, *, add: bool) -> None:
        """resolv.conf, and the sidecars' lines in /etc/hosts for the phase, or those lines taken out."""
        if resolv is None:
            return
        lines = "".join(f"{ip}\t{name} {HOSTS_MARK}\n" for name, ip in sorted(self.direct.items()))
        try:  # from the guard host, through the container's root: no exec for the engine to run
            if guard is not None and guard.write_files(resolv, (lines if add else "") if self.direct else None):
                return
        except RuntimeError:
            pass  # the logger is gone (its route says so next): the exec still writes them
        argv = ["sh", "-c", FILES_SCRIPT, "maka", resolv, "strip" if self.direct else "", lines if add else ""]
        with self.engine.guard("pointing the sandbox's resolver at the egress proxy"):
            exec_as_root(self.engine, container, argv)

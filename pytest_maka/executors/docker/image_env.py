"""What a container takes from its image: ENV, ENTRYPOINT, users (a base of DockerSandbox).

The image's ``ENV`` stays in force for every command (the engine applies it); the kernel's
variables are laid over it by ``run/envs.py``. A phase may run as a user the image created
(``[agent] user`` / ``[verifier] user``); the user is looked up in the image's
``/etc/passwd`` and ``/etc/group`` through the engine, never with a program of the container.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...core.errors import InfraError
from .spawn import read_via_archive

MAX_PASSWD_BYTES = 4 * 1024 * 1024


class UnknownUser(InfraError):
    """The user a phase runs as is not in the image's /etc/passwd."""


def env_dict(entries: list[str] | None) -> dict[str, str]:
    """Docker's ``Config.Env`` (``NAME=value`` strings) as a mapping."""
    out: dict[str, str] = {}
    for entry in entries or []:
        name, sep, value = entry.partition("=")
        if sep and name:
            out[name] = value
    return out


def parse_ids(text: str, name: str) -> tuple[int, int, str] | None:
    """(uid, gid, home) of ``name`` (or a numeric uid) in passwd ``text``; None when absent."""
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 7 or not fields[2].isdigit() or not fields[3].isdigit():
            continue
        if fields[0] == name or (name.isdigit() and fields[2] == name):
            return int(fields[2]), int(fields[3]), fields[5]
    return None


class ImageFacts:
    """The image's ENV and entrypoint, and the user commands run as (None: the image's own)."""

    api: Any
    engine: Any  # the Engine (its guard)
    id: str
    _image_config: dict[str, Any]
    _run: Callable[[list[str]], tuple[int | None, bytes]]
    _flush: Callable[[], None]
    _user: str | None = None
    _home: str | None = None

    def image_env(self) -> dict[str, str]:
        """The variables the image's ``ENV`` sets (PATH, ...), and HOME: the image's, else the
        home of the user commands run as (what the engine would set)."""
        env = env_dict(self._image_config.get("Env"))
        if "HOME" not in env:
            env["HOME"] = self._home or self._default_home()
        return env

    def _default_home(self) -> str:
        user = str(self._image_config.get("User") or "root").split(":")[0]
        try:
            return self.resolve_user(user, "environment")[2] or "/"
        except UnknownUser:
            return "/root" if user in ("root", "0") else "/"

    def entrypoint(self) -> list[str]:
        return list(self._image_config.get("Entrypoint") or [])

    def resolve_user(self, user: str | int, phase: str) -> tuple[int, int, str]:
        """(uid, gid, home) of ``user`` in the container; InfraError naming it when it is absent."""
        name = str(user)
        try:
            with self.engine.guard("reading the image's /etc/passwd", refusals=False):
                data = read_via_archive(self.api, self.id, "/etc/passwd", MAX_PASSWD_BYTES)
            text = data.decode("utf-8", "replace")
        except FileNotFoundError:
            text = ""
        found = parse_ids(text, name)
        if found is None:
            raise UnknownUser(
                f"[{phase}] user {name!r} does not exist in the environment "
                "(no entry in its /etc/passwd: the image must create it)"
            )
        return found

    @contextmanager
    def as_user(self, user: str | int | None, phase: str) -> Iterator[None]:
        """Commands inside the block run as ``user`` (None or root: the image's default user)."""
        if user is None or str(user) in ("root", "0"):
            yield
            return
        uid, gid, home = self.resolve_user(user, phase)
        previous = self._user, self._home
        self._user, self._home = f"{uid}:{gid}", home or "/"
        try:
            yield
        finally:
            self._user, self._home = previous

    def give(self, paths: list[str], user: str | int | None, phase: str) -> None:
        """Make ``paths`` (the phase's log directories) the user's, before its phase runs."""
        if user is None or str(user) in ("root", "0"):
            return
        uid, gid, _home = self.resolve_user(user, phase)
        self._flush()  # the puts that create them
        code, out = self._run(["chown", "-R", f"{uid}:{gid}", "--", *paths])
        if code != 0:
            raise InfraError(f"[{phase}] user {user!r}: could not give it {', '.join(paths)}: {out[-300:]!r}")

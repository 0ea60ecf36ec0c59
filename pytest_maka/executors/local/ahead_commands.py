"""A later command's sandbox set up ahead (the base of LocalSandbox): ``exec_ahead`` asks the
ahead worker (``ahead.py``) to start bwrap for it, stopped before the command, while the process
is idle; ``exec`` takes it when the same command comes (``_take_ahead``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from . import bwrap
from .ahead import AheadSlot, Prepared, start_prepared
from .files import VERDICT_PATHS, LeaseFiles
from .options import LocalOptions


class _Argv(Protocol):
    def __call__(
        self,
        command: str,
        *,
        env_fd: int,
        network: bool,
        proxied: Any,
        cwd: str | None,
        info_fd: int,
        extra: Any = (),
        binds: dict[str, Path] | None = None,
        block_fd: int | None = None,
    ) -> list[str]: ...


class AheadCommands:
    """``exec_ahead`` and what ``exec`` needs to take a command set up ahead."""

    options: LocalOptions
    files: LeaseFiles
    _ahead: AheadSlot
    _closed: bool
    _workdir: str
    _ro_mounts: dict[str, Path]
    _empty: Path
    _argv: _Argv

    def _require_open(self) -> None:
        raise NotImplementedError

    def exec_ahead(
        self,
        command: str,
        *,
        env: Mapping[str, str],
        cwd: str | None = None,
        network: bool = False,
        puts: Sequence[str] = (),
        verdict: bool = False,
    ) -> None:
        """Set up the sandbox of a later ``exec(command, env=env, cwd=cwd)`` while the process is
        idle; ``puts``: paths that will have been put by then (e.g. ``/tests``); ``verdict``: it
        will run inside the verdict channel (``open_verdict``). Without network only."""
        self._require_open()
        if network or self.options.sandbox != "bwrap":
            return
        if verdict:  # /tests is the channel's; like a top below, open_verdict fills them in place
            puts = [p for p in puts if p not in VERDICT_PATHS]
            self.files.make_verdict_dirs()
        tops = self.files.new_tops(puts)
        for top in tops:  # now, on this thread: a put meanwhile fills it in place (the bind holds it)
            (self.files.mounts / top).mkdir(exist_ok=True)
        env = dict(env)
        key = self._exec_key(command, env, cwd)
        self._ahead.request(key, lambda: self._prepare(command, env, cwd, tops, verdict))

    def _exec_key(self, command: str, env: Mapping[str, str], cwd: str | None) -> tuple[Any, ...]:
        return command, tuple(sorted(env.items())), cwd or self._workdir

    def _prepare(
        self, command: str, env: Mapping[str, str], cwd: str | None, tops: list[str], verdict: bool
    ) -> Prepared | None:
        """On the ahead worker: bwrap started for ``command``, stopped before it (``--block-fd``)."""
        if self._closed:
            return None
        binds = self.files.binds(tops, verdict=verdict)
        fds: list[int] = []
        try:
            fds.append(env_fd := bwrap.env_file(env))
            block_r, block_w = os.pipe()
            fds += (block_r, block_w)
            info_r, info_w = os.pipe()
            fds += (info_r, info_w)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        argv = self._argv(command, env_fd=env_fd, network=False, proxied=None, cwd=cwd, info_fd=info_w,
                          binds=binds, block_fd=block_r)  # fmt: skip
        signature = self._argv(command, env_fd=-1, network=False, proxied=None, cwd=cwd, info_fd=-1, binds=binds)
        sources = [str(p) for p in (*binds.values(), *self._ro_mounts.values(), self._empty)]
        if verdict:  # the mount point of its private /logs/verifier: the subject removing it detaches the mount
            sources.append(str(self.files.verdict_mount_point))
        return start_prepared(argv, signature, block_read=block_r, block_write=block_w, info_read=info_r,
                              info_write=info_w, env_fd=env_fd, sources=sources)  # fmt: skip

    def _take_ahead(self, command: str, env: Mapping[str, str], cwd: str | None) -> Prepared | None:
        if self._ahead.state is None:  # nothing asked ahead (most commands)
            return None

        def signature() -> list[str]:
            return self._argv(command, env_fd=-1, network=False, proxied=None, cwd=cwd, info_fd=-1)

        return self._ahead.take(self._exec_key(command, env, cwd), signature)

"""asyncio streams over a sandbox ``Process``: what the ACP connection reads and writes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ...executors.base import Process

LINE_LIMIT = 16 * 1024 * 1024  # ACP messages carry whole files: far above asyncio's 64 KiB default


class _Protocol(asyncio.BaseProtocol):
    """Gives StreamWriter the drain hook it expects (writes are blocking pipe writes)."""

    async def _drain_helper(self) -> None:
        return None


class _StdinTransport(asyncio.WriteTransport):
    def __init__(self, proc: Process) -> None:
        super().__init__()
        self._proc = proc
        self._closing = False

    def write(self, data: Any) -> None:
        if self._closing:
            return
        try:
            self._proc.stdin.write(bytes(data))
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self._closing = True  # the agent went away; its exit is reported by wait()

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.close()

    def abort(self) -> None:
        self.close()


def connect(proc: Process, loop: asyncio.AbstractEventLoop) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
    """(writer to the agent's stdin, reader of its stdout), the stdout fed by a thread."""
    reader = asyncio.StreamReader(limit=LINE_LIMIT, loop=loop)

    def pump() -> None:
        try:
            while True:
                data = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
                if not data:
                    break
                loop.call_soon_threadsafe(reader.feed_data, data)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="maka-acp-stdout", daemon=True).start()
    writer = asyncio.StreamWriter(_StdinTransport(proc), _Protocol(), None, loop)
    return writer, reader


def drain_to_file(stream: Any, path: Any, cap: int) -> threading.Thread:
    """Copy ``stream`` (the agent's stderr) into ``path`` up to ``cap`` bytes; the rest is read and dropped."""

    def run() -> None:
        written = 0
        with open(path, "wb") as out:
            while True:
                data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                if not data:
                    break
                if written < cap:
                    out.write(data[: cap - written])
                    out.flush()
                    written += len(data)

    thread = threading.Thread(target=run, name="maka-acp-stderr", daemon=True)
    thread.start()
    return thread

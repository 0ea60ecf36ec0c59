"""Docker engines: one API client per URL, health checks, and rotation shared by workers.

An engine that stops answering is marked down in a small file under the state directory,
so every worker of the run stops leasing on it; it is probed again after
``engine_retry_sec``.
"""

from __future__ import annotations

import hashlib
import http.client
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions

from ...core.errors import InfraError
from .options import DockerOptions, EngineOptions
from .ssh_transport import api_client

#: Exceptions that mean "the engine did not answer" (as opposed to "the engine said no"),
#: including a stream (an archive, a build's output) cut while it was being read.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.Timeout,
    urllib3.exceptions.ProtocolError,
    http.client.IncompleteRead,
    ConnectionError,
    TimeoutError,
)
API_TIMEOUT_SEC = 60.0


def one_line(exc: BaseException) -> str:
    """A short single-line description of an engine error."""
    api_error = isinstance(exc, docker.errors.APIError)
    text = str(exc.explanation or exc) if api_error else (str(exc) or type(exc).__name__)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _where(steps: list[str]) -> str:
    """The step a guard names: the outermost one, with the inner ones it was in."""
    return steps[0] + (f" ({'; '.join(steps[1:])})" if len(steps) > 1 else "")


class EngineDown(InfraError):
    """The engine stopped answering; it has been taken out of rotation."""


class Engine:
    """One Docker engine: a lazily created API client and a shared up/down marker."""

    def __init__(self, opts: EngineOptions, *, slots: int, state_dir: Path, retry_sec: float) -> None:
        self.url = opts.url
        self.slots = opts.slots or slots
        self.key = hashlib.sha256(self.url.encode()).hexdigest()[:12]
        self._marker = state_dir / "engines" / f"{self.key}.down"
        self._retry_sec = retry_sec
        self._client: docker.APIClient | None = None
        self._lock = threading.RLock()
        self._steps = threading.local()  # this thread's nested guard steps, outermost first

    def __repr__(self) -> str:
        return f"Engine({self.url})"

    @property
    def api(self) -> docker.APIClient:
        with self._lock:
            if self._client is None:
                with self.guard("connect"):
                    self._client = api_client(self.url, timeout=API_TIMEOUT_SEC, max_pool_size=32)
            return self._client

    def ping(self, timeout: float = 5.0) -> str | None:
        """None when the engine answers, else a one-line reason."""
        try:
            client = api_client(self.url, timeout=timeout, max_pool_size=1)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:  # any failure to answer is a reason, not a crash
            return one_line(exc)
        return None

    # --- rotation -------------------------------------------------------------------
    def mark_down(self, reason: str) -> None:
        self._marker.parent.mkdir(parents=True, exist_ok=True)
        self._marker.write_text(reason + "\n")
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def mark_up(self) -> None:
        self._marker.unlink(missing_ok=True)

    def down_reason(self) -> str | None:
        """Why the engine is out of rotation, or None when it may be used."""
        try:
            age = time.time() - self._marker.stat().st_mtime
        except FileNotFoundError:
            return None
        if age < self._retry_sec:
            return self._marker.read_text().strip() or "not answering"
        reason = self.ping()
        if reason is None:
            self._marker.unlink(missing_ok=True)
            return None
        self.mark_down(reason)
        return reason

    @contextmanager
    def guard(self, what: str, *, refusals: bool = True) -> Iterator[None]:
        """Turn engine errors into InfraError naming ``what`` and the engine; an engine that no
        longer answers a ping is taken out of rotation (a single dropped connection is not enough).

        With ``refusals=False`` only a lost engine is turned into InfraError: the engine's own
        answers (``docker.errors.APIError``: 404, 409, ...) reach the caller, which handles them.
        Every docker-py call, and every read of a stream one returned, runs inside a guard
        (tests/executors/test_docker_guarded_calls.py checks it).
        """
        steps: list[str] = self._steps.__dict__.setdefault("stack", [])
        steps.append(what)
        try:
            yield
        except CONNECTION_ERRORS as exc:
            what = _where(steps)
            reason = one_line(exc)
            self.close()  # the pooled connections are suspect either way
            if self.ping() is None:  # a dropped connection (e.g. a stale ssh pipe), not a dead engine
                raise InfraError(
                    f"docker engine {self.url}: connection lost during {what} ({reason}); the engine still answers"
                ) from exc
            self.mark_down(reason)
            raise EngineDown(f"docker engine {self.url} stopped answering during {what}: {reason}") from exc
        except docker.errors.DockerException as exc:
            if not refusals and isinstance(exc, docker.errors.APIError):
                raise
            what = _where(steps)
            if "Error while fetching server API version" in str(exc):
                self.mark_down(one_line(exc))
                raise EngineDown(f"docker engine {self.url} is not answering: {one_line(exc)}") from exc
            raise InfraError(f"docker engine {self.url}: {what} failed: {one_line(exc)}") from exc
        finally:
            steps.pop()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def make_engines(options: DockerOptions) -> list[Engine]:
    state = options.resolved_state_dir()
    slots = options.default_slots()
    return [Engine(e, slots=slots, state_dir=state, retry_sec=options.engine_retry_sec) for e in options.engine_list()]

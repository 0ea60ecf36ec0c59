"""A bounded pool of threads running cells, each inside a cancel scope (core/cancel.py).

Threads are started on demand up to ``size`` and kept for the rest of the run (a bwrap
sandbox started with --die-with-parent dies with the thread that started it, so a thread
never ends while it runs a cell). ``cancel_all`` interrupts every running cell and drops
the queued ones; ``drain`` waits for the running ones to end.

Two conditions share the pool's lock: idle threads wait on ``_work`` and a submission
wakes one of them; the end of a job wakes only those waiting on ``_changed`` (the item
waiting for its cell, ``drain``). With one condition for both, every job's end woke every
idle thread (with 200 threads, some 20,000 wake-ups at the end of a run, each taking the
interpreter lock).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.cancel import Scope
from ..core.record_model import AttemptRecord


@dataclass(eq=False)
class Job:
    """One cell submitted to the pool."""

    key: str
    fn: Callable[[], AttemptRecord]
    scope: Scope = field(default_factory=Scope)
    done: threading.Event = field(default_factory=threading.Event)
    result: AttemptRecord | None = None
    error: BaseException | None = None
    started_at: float | None = None

    def outcome(self) -> AttemptRecord:
        """The cell's record, or the exception that ended it (KeyboardInterrupt when cancelled)."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class CellPool:
    """Runs submitted jobs on at most ``size`` threads, in submission order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # idle threads: a job was queued, or closing
        self._changed = threading.Condition(self._lock)  # waiters: a job ended
        self._queue: deque[Job] = deque()
        self._running: set[Job] = set()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    @property
    def free(self) -> int:
        with self._lock:
            return self.size - len(self._running) - len(self._queue)

    @property
    def running(self) -> list[Job]:
        with self._lock:
            return list(self._running)

    def submit(self, key: str, fn: Callable[[], AttemptRecord]) -> Job:
        job = Job(key, fn)
        with self._lock:
            if self._closed:
                raise RuntimeError("the cell pool is closed")
            self._queue.append(job)
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(target=self._serve, name=f"maka-cell-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._work.notify()
        return job

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._idle += 1
                    self._work.wait()
                    self._idle -= 1
                if not self._queue:
                    return
                job = self._queue.popleft()
                job.started_at = time.time()
                self._running.add(job)
            try:
                try:
                    with job.scope:
                        job.result = job.fn()
                except BaseException as exc:  # KeyboardInterrupt from a cancel, or a harness bug
                    job.error = exc
            except BaseException as exc:  # a cancel that landed as the scope closed
                if job.result is None and job.error is None:
                    job.error = exc
            finally:
                with self._lock:
                    self._running.discard(job)
                    job.done.set()
                    self._changed.notify_all()

    def wait_any(self, timeout: float) -> None:
        """Block until some job ends or ``timeout`` seconds pass."""
        with self._lock:
            self._changed.wait(timeout)

    def cancel_all(self) -> list[Job]:
        """Drop the queued jobs and interrupt the running ones; returns the interrupted."""
        with self._lock:
            dropped = list(self._queue)
            self._queue.clear()
            running = list(self._running)
        for job in dropped:
            job.error = KeyboardInterrupt()
            job.done.set()
        for job in running:
            job.scope.cancel()
        return running

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no job is queued or running; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._queue or self._running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(0.5 if left is None else min(left, 0.5))
        return True

    def close(self) -> None:
        """Let idle threads end (running jobs finish first)."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._changed.notify_all()

"""The cell pool's threads: every job runs once, in order, and the end of a job wakes no idle thread."""

from __future__ import annotations

import threading
import time

from pytest_maka.scale.pool import CellPool


class CountingCondition:
    """A condition that counts how often a waiter came back from ``wait``."""

    def __init__(self, inner: threading.Condition) -> None:
        self.inner = inner
        self.returns = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def wait(self, timeout: float | None = None) -> bool:
        woke = self.inner.wait(timeout)
        self.returns += 1
        return woke


def test_jobs_run_once_each_in_submission_order() -> None:
    pool = CellPool(3)
    order: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> dict[str, int]:
        with lock:
            order.append(i)
        time.sleep(0.01)
        return {"i": i}

    jobs = [pool.submit(str(i), lambda i=i: job(i)) for i in range(12)]
    assert pool.drain(10)
    assert [j.outcome()["i"] for j in jobs] == list(range(12))
    assert sorted(order) == list(range(12))
    assert order[:3] == sorted(order[:3]) and order.index(11) >= 9  # started in submission order
    pool.close()


def test_the_end_of_a_job_wakes_no_idle_thread() -> None:
    pool = CellPool(40)
    first = [pool.submit(str(i), lambda: {}) for i in range(40)]
    assert pool.drain(10)
    deadline = time.monotonic() + 10
    while pool._idle < len(pool._threads) and time.monotonic() < deadline:  # every thread back waiting
        time.sleep(0.01)
    assert all(j.done.is_set() for j in first)
    counting = CountingCondition(pool._work)
    pool._work = counting  # type: ignore[assignment]
    for i in range(30):  # one job at a time: 39 threads idle while each ends
        job = pool.submit(f"next-{i}", lambda: {"ok": 1})
        assert job.done.wait(10)
        pool.wait_any(0)
    # one wake-up per submission (at most), not one per idle thread per job end (39 x 30)
    assert counting.returns <= 30
    pool.close()


def test_wait_any_returns_when_a_job_ends_and_close_ends_idle_threads() -> None:
    pool = CellPool(2)
    gate = threading.Event()
    pool.submit("a", lambda: (gate.wait(10), {})[1])
    started = time.monotonic()
    threading.Timer(0.2, gate.set).start()
    pool.wait_any(5)
    assert time.monotonic() - started < 4
    pool.close()
    for thread in pool._threads:
        thread.join(5)
        assert not thread.is_alive()

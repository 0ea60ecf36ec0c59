"""``wait.result`` polls a future with a timeout: the poll's own timeout must never be taken for
the task's outcome. A CI run recorded an ``infra_failure`` "TimeoutError: timed out after 5 s."
for an attempt that had finished while the poll timed out, and ran the cell again."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from pytest_maka.cluster import wait


class FinishesAsThePollTimesOut(Future):
    """The race, made certain: the first timed wait times out just as the task finishes."""

    def __init__(self, outcome: Any = None, error: BaseException | None = None) -> None:
        super().__init__()
        self._outcome, self._error, self._polls = outcome, error, 0

    def result(self, timeout: float | None = None) -> Any:
        self._polls += 1
        if self._polls == 1:
            if self._error is not None:
                self.set_exception(self._error)
            else:
                self.set_result(self._outcome)
            raise TimeoutError(f"timed out after {timeout} s.")
        return super().result(timeout)


def test_a_task_that_finished_while_the_poll_timed_out_returns_its_result() -> None:
    future = FinishesAsThePollTimesOut({"record": "r"})
    assert wait.result(wait.Watch(client=None, poll_sec=5), future, no_worker_sec=300) == {"record": "r"}


def test_a_task_that_raised_timeout_error_itself_still_raises_its_own() -> None:
    future = FinishesAsThePollTimesOut(error=TimeoutError("the task's own timeout"))
    with pytest.raises(TimeoutError, match="the task's own timeout"):
        wait.result(wait.Watch(client=None, poll_sec=5), future, no_worker_sec=300)

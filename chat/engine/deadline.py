"""A timeout for many short waits in a row, with one timer for them all.

`asyncio.timeout_at` around each read of a stream schedules a timer and
cancels it again for every chunk, and the event loop's heap fills with
cancelled timers. Here the deadline is a number the reader moves forward;
the one timer, when it fires early, looks at the number and sleeps again.
At 40 chunks a second and a 30-second stall timeout that is one timer per
30 seconds instead of 40 a second.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType


class Deadline:
    """`with deadline:` around a wait raises TimeoutError if the wait is
    still going at `deadline.when` (a loop time). Set `when` before each
    wait; `close()` when done with it."""

    __slots__ = ("_armed_for", "_cancelling", "_expired", "_inside", "_task", "_timer", "when")

    def __init__(self) -> None:
        self.when = math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = math.inf
        self._task: asyncio.Task[object] | None = None
        self._inside = False
        self._expired = False
        self._cancelling = 0

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        assert task is not None, "a Deadline is for waits inside a task"
        self._task = task
        self._cancelling = task.cancelling()
        self._inside = True
        if self.when < self._armed_for:
            # Earlier than the timer that runs (or none runs): set it again.
            if self._timer is not None:
                self._timer.cancel()
            self._arm()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._inside = False
        if self._expired and self._task is not None:
            self._expired = False
            # As asyncio.timeout does: our cancellation, and no one else's
            # (a Stop), becomes the timeout.
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_for = math.inf

    def _arm(self) -> None:
        if self.when == math.inf:
            self._timer, self._armed_for = None, math.inf
            return
        self._timer = asyncio.get_running_loop().call_at(self.when, self._check)
        self._armed_for = self.when

    def _check(self) -> None:
        self._timer, self._armed_for = None, math.inf
        if not self._inside:
            return  # between waits: the next one arms it again
        if asyncio.get_running_loop().time() >= self.when:
            self._expired = True
            if self._task is not None:
                self._task.cancel()
        else:
            self._arm()  # the reader moved the deadline on meanwhile

"""Turns between a run's forwards and the redraws of its page, so neither lands inside the other.

While a run is going its page redraws itself about once a second, in Python, on the same cores as
the model; a forward timed during a redraw reads slower than the model is (the slow decode steps a
reader saw once a second). So they take turns: a redraw that wants the machine announces itself,
waits for the forward in progress to end, and no new forward starts until every announced redraw
is done. A plain lock would not do: the model thread releases and re-takes it between forwards
before a waiting redraw ever gets it. Neither side waits longer than `max_wait_s`; after that it
goes ahead, so a stuck side can slow the other but never hang it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class Turns:
    def __init__(self, max_wait_s: float = 5.0) -> None:
        self.max_wait_s = max_wait_s
        self._cv = threading.Condition()
        self._pages = 0  # redraws announced (drawing or waiting to draw); nested passes count twice
        self._forward = False
        self.pauses: list[float] = []  # seconds the model waited for redraws, one entry per wait

    @contextlib.contextmanager
    def page(self) -> Iterator[None]:
        """A redraw of the page: waits for the forward in progress, holds off the next one."""
        with self._cv:
            self._pages += 1
        try:
            with self._cv:
                self._cv.wait_for(lambda: not self._forward, timeout=self.max_wait_s)
            yield
        finally:
            with self._cv:
                self._pages -= 1
                self._cv.notify_all()

    @contextlib.contextmanager
    def forward(self) -> Iterator[float]:
        """One forward of the model: starts once no redraw is announced. Yields the seconds it waited
        (0.0 when it did not), so the run can mark that step on its latency chart."""
        waited = 0.0
        with self._cv:
            if self._pages:
                asked = time.perf_counter()
                self._cv.wait_for(lambda: self._pages == 0, timeout=self.max_wait_s)
                waited = time.perf_counter() - asked
                self.pauses.append(waited)
            self._forward = True
        try:
            yield waited
        finally:
            with self._cv:
                self._forward = False
                self._cv.notify_all()

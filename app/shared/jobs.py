"""Background jobs, queued so CPU-heavy work from different readers never interleaves.

Why threads: the work must not run in Streamlit's script thread, or a click (which with
fastReruns starts a new script run at once) would abandon or stall it, and the page could not
draw while it runs. Each job waits in its own thread; the page only reads its fields and asks it
to stop.

Why a queue: the CPU is one resource; two interleaved runs would each measure the other's work,
and a CPU-heavy simulation beside a live run would slow its tokens. A job waits its turn in a FIFO
and reports its position.

Two kinds: a `Job` does its `work()` on its own thread (a simulation, a load generator: CPU work
that needs no model); a `ModelJob` does it on the one long-lived model thread (see _ModelThread).
Both wait in the same queue.

Why the poll watchdog: a reader may close the tab mid-run. The page touches its job on every
poll; a job nobody polled for `ABANDON_AFTER_S` stops itself, so no thread outlives its reader.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable

from app.shared.process_memory import trim
from core.runner import SettingsError

ABANDON_AFTER_S = 30.0
_ids = itertools.count(1)


def next_id() -> int:
    """A new id, unique in this server process, for a job or anything the page treats as a run."""
    return next(_ids)


class _ModelThread:
    """One long-lived thread that runs every job's `work()`, one at a time (the RunQueue already
    lets only one job work at once).

    Why not in each job's own thread: glibc gives threads separate malloc arenas, and memory a run
    frees stays in its arena for whichever thread uses that arena next. With a fresh thread per
    run, runs landed on different arenas, each kept its own heap top (which malloc_trim cannot
    give back), and the server's memory grew run after run; on one model thread it stays flat
    (tests/test_load.py watches it over fifty Stop/Generate cycles).

    Not a ThreadPoolExecutor: its workers are joined at interpreter exit, so a run in progress
    would hold up the server's shutdown; this thread is a daemon."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the model thread and wait for it; its exception is raised here."""
        done = threading.Event()
        failure: list[BaseException] = []

        def task() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 (handed to the caller, which decides)
                failure.append(exc)
            finally:
                done.set()

        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="pdlab-model", daemon=True)
                self._thread.start()
        self._tasks.put(task)
        done.wait()
        if failure:
            raise failure[0]

    def _serve(self) -> None:
        while True:
            self._tasks.get()()


_model_thread = _ModelThread()


class RunQueue:
    """A lock with a queue: `acquire` waits for this ticket's turn; `position` says how many are ahead.

    First come, first served within a priority; a lower priority number goes first. Live model
    runs are priority 0 and simulations 1 (Job.priority), so a reader's live run waits for at most
    the one simulation already running (each capped: app.views.serving.jobs), never for a line
    of queued ones."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: list[int] = []  # in order of arrival
        self._priority: dict[int, int] = {}
        self._active: int | None = None

    def _order(self) -> list[int]:
        return sorted(self._waiting, key=lambda t: (self._priority[t], self._waiting.index(t)))

    def position(self, ticket: int) -> int:
        """0 when running, n when n jobs are ahead (running one included), -1 when not queued."""
        with self._cond:
            if self._active == ticket:
                return 0
            if ticket in self._waiting:
                return self._order().index(ticket) + (1 if self._active is not None else 0)
            return -1

    def acquire(self, ticket: int, give_up: Callable[[], bool], priority: int = 0) -> bool:
        with self._cond:
            self._waiting.append(ticket)
            self._priority[ticket] = priority
            try:
                while self._active is not None or self._order()[0] != ticket:
                    if give_up():
                        return False
                    self._cond.wait(0.2)
                self._active = ticket
                return True
            finally:
                self._waiting.remove(ticket)
                del self._priority[ticket]
                self._cond.notify_all()

    def release(self, ticket: int) -> None:
        with self._cond:
            if self._active == ticket:
                self._active = None
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._active is not None or bool(self._waiting)


class Job:
    """One unit of queued CPU work, done on its own thread. Subclasses implement `work()`.

    status: queued -> running -> done | stopped | abandoned | error. Fields are written by the
    worker thread and only read by the page, so no lock is needed beyond the GIL.
    """

    kind = "job"
    priority = 0  # RunQueue order: 0 for live model runs, higher waits behind them

    def __init__(self, queue: RunQueue) -> None:
        self.id = next_id()
        self.queue = queue
        self.status = "queued"
        self.error: str | None = None
        self.progress = ""
        self.created = time.monotonic()
        self.started: float | None = None
        self.finished: float | None = None
        self.last_poll = time.monotonic()
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"pdlab-{self.kind}-{self.id}", daemon=True)

    # --- page side ---
    def start(self) -> Job:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._cancel.set()

    def touch(self) -> None:
        self.last_poll = time.monotonic()

    @property
    def active(self) -> bool:
        return self.status in ("queued", "running")

    @property
    def queue_position(self) -> int:
        return self.queue.position(self.id)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- worker side ---
    def should_stop(self) -> bool:
        if time.monotonic() - self.last_poll > ABANDON_AFTER_S:
            self._abandoned = True
            return True
        return self._cancel.is_set()

    def work(self) -> None:
        raise NotImplementedError

    def _do_work(self) -> None:
        self.work()

    def _main(self) -> None:
        self._abandoned = False
        if not self.queue.acquire(self.id, self.should_stop, self.priority):
            self.status = "abandoned" if self._abandoned else "stopped"
            self.finished = time.monotonic()
            return
        try:
            self.status = "running"
            self.started = time.monotonic()
            self._do_work()
            if self._abandoned:
                self.status = "abandoned"
            elif self._cancel.is_set():
                self.status = "stopped"
            else:
                self.status = "done"
        except Exception as exc:  # shown on the page as a message, never a traceback
            self.error = _explain(exc)
            self.status = "error"
        finally:
            self.finished = time.monotonic()
            trim()  # what the run freed goes back to the system (app.shared.process_memory)
            self.queue.release(self.id)
        self.on_finish()

    def on_finish(self) -> None:
        """Called once on the job's own thread after its work, with `status` final. Nothing by default."""


class ModelJob(Job):
    """A job whose `work()` touches the model: it runs on the one model thread, after its turn in
    the queue, so the model's memory stays in one malloc arena run after run."""

    def _do_work(self) -> None:
        _model_thread.call(self.work)


def _explain(exc: Exception) -> str:
    """A failure in words for the page: a settings problem as its own message, anything else with its type."""
    if isinstance(exc, SettingsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"

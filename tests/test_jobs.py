"""Jobs wait their turn in their own threads; model work runs on one long-lived thread, other work not.

One thread means one malloc arena for the model's memory, reused run after run (app.shared.jobs
explains the RSS growth a thread per run caused); these tests pin that down without a model.
"""

from __future__ import annotations

import threading
import time

from app.shared.jobs import Job, ModelJob, RunQueue


class _Probe(ModelJob):
    kind = "probe"

    def __init__(self, queue: RunQueue, fail: bool = False) -> None:
        super().__init__(queue)
        self.fail = fail
        self.worker: int | None = None

    def work(self) -> None:
        self.worker = threading.get_ident()
        if self.fail:
            raise ValueError("no such layer")


def _finish(job: Job) -> Job:
    job.start().join(10)
    assert not job.alive
    return job


def test_every_job_works_on_the_same_long_lived_thread():
    q = RunQueue()
    first, second = _finish(_Probe(q)), _finish(_Probe(q))
    assert first.status == second.status == "done"
    assert first.worker == second.worker
    assert first.worker != first._thread.ident and second.worker != second._thread.ident
    assert any(t.ident == first.worker and t.name == "pdlab-model" for t in threading.enumerate())


def test_an_error_in_work_is_reported_and_the_model_thread_goes_on():
    q = RunQueue()
    failed = _finish(_Probe(q, fail=True))
    assert failed.status == "error" and failed.error == "ValueError: no such layer"
    after = _finish(_Probe(q))
    assert after.status == "done" and after.worker == failed.worker and not q.busy


def test_a_job_stopped_while_queued_never_reaches_the_model_thread():
    q = RunQueue()
    assert q.acquire(0, lambda: False)  # someone else's run holds the model
    waiting = _Probe(q).start()
    waiting.stop()
    waiting.join(10)
    q.release(0)
    assert waiting.status == "stopped" and waiting.worker is None


class _CpuProbe(Job):
    """Queued CPU work that needs no model (a simulation, a load generator)."""

    kind = "cpu-probe"

    def __init__(self, queue: RunQueue, log: list[str]) -> None:
        super().__init__(queue)
        self.log = log
        self.worker_name: str | None = None

    def work(self) -> None:
        self.worker_name = threading.current_thread().name
        self.log.append(self.kind)


def test_a_plain_job_works_on_its_own_thread_but_waits_in_the_same_queue():
    q = RunQueue()
    log: list[str] = []
    assert q.acquire(0, lambda: False)  # a reader's live run holds the CPU
    job = _CpuProbe(q, log).start()
    deadline = time.monotonic() + 10
    while job.queue_position != 1 and time.monotonic() < deadline:  # wait until it has joined the queue
        time.sleep(0.01)
    assert job.status == "queued" and job.queue_position == 1 and log == []
    q.release(0)
    job.join(10)
    assert job.status == "done" and log == ["cpu-probe"]
    assert job.worker_name == job._thread.name and job.worker_name != "pdlab-model"


def _queued(job: Job, position: int) -> None:
    """Until `job` has joined the queue at `position` (its thread takes a moment to get there)."""
    deadline = time.monotonic() + 10
    while job.queue_position != position and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.queue_position == position, (job.kind, job.queue_position)


def test_a_live_run_goes_ahead_of_queued_simulations():
    """Issue 29: a reader's live run waits for the one simulation already running, never behind a
    line of queued ones (simulations are priority 1, model runs 0)."""
    q = RunQueue()
    log: list[str] = []

    class _Sim(_CpuProbe):
        kind = "sim"
        priority = 1

    assert q.acquire(0, lambda: False)  # one simulation already running
    queued_sims = [_Sim(q, log).start() for _ in range(2)]
    _queued(queued_sims[0], 1)
    _queued(queued_sims[1], 2)
    live = _Probe(q).start()
    _queued(live, 1)  # straight to the front, behind only the running one
    assert [s.queue_position for s in queued_sims] == [2, 3]
    q.release(0)
    live.join(10)
    for sim in queued_sims:
        sim.join(10)
    assert live.status == "done" and all(s.status == "done" for s in queued_sims)
    assert live.started < min(s.started for s in queued_sims)

"""Jobs wait their turn in their own threads, but all model work runs on one long-lived thread.

One thread means one malloc arena for the model's memory, reused run after run (app.jobs explains
the RSS growth a thread per run caused); these tests pin that down without a model.
"""

from __future__ import annotations

import threading

from app.services.jobs import Job, RunQueue


class _Probe(Job):
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

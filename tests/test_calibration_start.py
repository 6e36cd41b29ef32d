"""Starting the once-per-server calibration never waits on the measuring: every script run calls
it, and behind the measuring's lock each page froze for the whole calibration, long enough for a
Generate pressed meanwhile to go unpolled and be abandoned (seen on a fresh 2-core server)."""

from __future__ import annotations

import threading

from app.shared import model


def test_starting_the_calibration_does_not_wait_for_a_measurement_in_progress(monkeypatch):
    started = []

    class Job:  # stands in for the queued job: only whether it was started matters here
        def __init__(self, queue, loaded) -> None:
            pass

        def start(self):
            started.append(self)
            return self

    monkeypatch.setattr(model, "CalibrationJob", Job)
    monkeypatch.setattr(model, "get_queue", lambda: None)
    monkeypatch.setattr(model, "_calibration_job", None)
    returned = threading.Event()
    with model._ceilings_lock:  # a job is measuring the ceilings
        caller = threading.Thread(target=lambda: (model.start_calibration(None), returned.set()), daemon=True)
        caller.start()
        assert returned.wait(10), "start_calibration waited for the measurement in progress"
    model.start_calibration(None)  # a second script run starts nothing more
    assert len(started) == 1

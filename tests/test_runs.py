"""A run started by a click waits for that click's page pass before it times anything."""

from __future__ import annotations

import time

from app.services import model as model_service
from app.services import runs
from app.services.context import Ceilings
from app.services.jobs import RunQueue
from core.runner import GenerationSettings


def _run(tiny_model, **kwargs) -> runs.GenerationRun:
    return runs.GenerationRun(RunQueue(), tiny_model, "x", [1, 5, 6],
                              GenerationSettings(max_new_tokens=4, stop_on_eos=False), **kwargs)


def test_run_waits_for_the_page_then_times_its_forwards(tiny_model, monkeypatch):
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    monkeypatch.setattr(runs, "PAGE_SETTLE_MAX_S", 60.0)
    run = _run(tiny_model, wait_for_page=True).start()
    deadline = time.monotonic() + 30
    while run.progress != "waiting for the page to finish drawing…" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.progress == "waiting for the page to finish drawing…"
    run.join(0.3)
    assert run.alive and run.events == [] and run.ctx is None  # nothing measured while the page draws
    run.page_drawn()
    run.join(30)
    assert run.status == "done" and len(run.events) == 4


def test_run_starts_anyway_when_the_page_never_reports(tiny_model, monkeypatch):
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    monkeypatch.setattr(runs, "PAGE_SETTLE_MAX_S", 0.05)
    run = _run(tiny_model, wait_for_page=True).start()
    run.join(30)
    assert run.status == "done" and len(run.events) == 4


def test_stop_while_waiting_ends_the_run_at_once(tiny_model, monkeypatch):
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    monkeypatch.setattr(runs, "PAGE_SETTLE_MAX_S", 60.0)
    run = _run(tiny_model, wait_for_page=True).start()
    run.stop()
    run.join(30)
    assert not run.alive and run.status == "stopped" and len(run.events) < 4

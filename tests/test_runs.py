"""A run started by a click waits for that click's page pass before it times anything."""

from __future__ import annotations

import time

from app.shared import model as model_service
from app.shared import runs
from app.shared.context import Ceilings
from app.shared.jobs import RunQueue
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


def test_a_page_pass_and_a_forward_take_turns(tiny_model, monkeypatch):
    """While the page of a run draws (page_turn held) no forward starts, even though the model asks
    again the moment its last forward ends; the wait is recorded as a pause and is not in any
    step's time."""
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    run = runs.GenerationRun(RunQueue(), tiny_model, "x", [1, 5, 6],
                             GenerationSettings(max_new_tokens=500, stop_on_eos=False))
    run.start()
    deadline = time.monotonic() + 30
    while len(run.events) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.active
    for _ in range(3):  # three redraws, each holding the machine for a while
        with runs.page_turn(run):
            held = len(run.events)
            time.sleep(0.3)
            assert len(run.events) == held  # no step lands while the page draws
        while len(run.events) < held + 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the model goes on as soon as the page is done
        assert len(run.events) >= held + 2
    run.stop()
    run.join(30)
    assert len([p for p in run.pauses if p >= 0.25]) == 3, run.pauses
    assert max(e.latency_ms for e in run.events) < 250  # the waits are not inside any timed step
    # each long wait is on the event of the forward that waited: what the latency chart rings
    long = [e.waited_ms for e in run.events if e.waited_ms and e.waited_ms >= 250]
    assert long == [round(1000 * p, 1) for p in run.pauses if p >= 0.25]


def test_turns_never_hang_a_side_that_waits_too_long():
    from app.shared.turns import Turns

    turns = Turns(max_wait_s=0.2)
    with turns.forward():  # a forward that never ends in time: the page goes ahead after the limit
        t = time.perf_counter()
        with turns.page():
            assert time.perf_counter() - t >= 0.15
    with turns.page(), turns.page():  # nested passes (a fragment inside a full pass) count twice
        t = time.perf_counter()
        with turns.forward() as waited:
            assert time.perf_counter() - t >= 0.15
            assert waited == turns.pauses[-1] >= 0.15  # the forward knows how long it waited
    assert len(turns.pauses) == 1
    with turns.forward() as waited:  # no page announced: no wait, no pause
        assert waited == 0.0
    assert len(turns.pauses) == 1


def test_page_turn_holds_the_model_only_for_an_active_live_run():
    """A pass over an active run's page makes its next forward wait; over a finished run, a replay
    (no model behind it) or no run at all, nothing waits."""
    from types import SimpleNamespace

    from app.shared.turns import Turns

    def forward_wait(run: object, turns: Turns) -> float:
        with runs.page_turn(run), turns.forward() as waited:
            return waited

    turns = Turns(max_wait_s=0.2)
    assert forward_wait(SimpleNamespace(turns=turns, active=True), turns) >= 0.15  # the page held it
    assert forward_wait(SimpleNamespace(turns=turns, active=False), turns) == 0.0  # finished: nothing held
    assert forward_wait(SimpleNamespace(active=True, replay=True), turns) == 0.0  # a replay has no turns
    assert forward_wait(None, turns) == 0.0


def test_live_and_recorded_runs_answer_the_same_run_protocol(tiny_model):
    """The page reads `replay` and `bundled_name` from any run, never by getattr or from its label."""
    import typing

    from app.shared import replay

    members = set(typing.get_type_hints(runs.Run)) | {"touch", "stop", "trace"}
    live = _run(tiny_model)
    bundled = replay.bundled(replay.DEFAULT_BUNDLED)
    mine = replay.replay_run(bundled.trace(), "your file 'mine.json'")
    for run in (live, bundled, mine):
        missing = {m for m in members if not hasattr(run, m)}
        assert not missing, (type(run).__name__, missing)
    assert (live.replay, bundled.replay, mine.replay) == (False, True, True)
    assert (live.bundled_name, bundled.bundled_name, mine.bundled_name) == (None, replay.DEFAULT_BUNDLED, None)

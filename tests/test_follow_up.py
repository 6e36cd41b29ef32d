"""The live page's follow-up: what a follow-up to a run keeps, what the cache section says about it,
and a GenerationRun that continues the last run's cache (tiny model, no browser)."""

from __future__ import annotations

from types import SimpleNamespace

from app.shared import model as model_service
from app.shared.context import Ceilings, build_context
from app.shared.jobs import RunQueue
from app.shared.runs import GenerationRun
from app.views.live import figures, follow_up, lesson, settings
from core import conversation as conv
from core.runner import GenerationSettings, conversation_ids

GEN = GenerationSettings(max_new_tokens=6, stop_on_eos=False)


def _finished(run: GenerationRun, timeout: float = 60) -> GenerationRun:
    run.join(timeout)
    assert not run.active and run.status == "done", (run.status, run.error)
    return run


def _first(tiny_model, monkeypatch) -> GenerationRun:
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    ids = conversation_ids(tiny_model, [{"role": "user", "content": "Hi there"}], True)
    return _finished(GenerationRun(RunQueue(), tiny_model, "Hi there", ids, GEN).start())


def test_a_follow_up_continues_the_last_runs_cache_and_times_the_turn_from_scratch(tiny_model, monkeypatch):
    first = _first(tiny_model, monkeypatch)
    assert first.kept is not None and first.kept.ids == (first.prompt_ids + [e.token_id for e in first.events])[:-1]
    ids, turn, reuse = follow_up.prepare(tiny_model, first, "And then?", GEN)
    assert turn["index"] == 1 and turn["messages"][-1] == {"role": "user", "content": "And then?"}
    assert turn["messages"][1] == {"role": "assistant", "content": first.generated_text}
    assert reuse is not None and reuse[1] == turn["reused_tokens"] == conv.common_prefix(first.kept.ids, ids)
    second = _finished(GenerationRun(RunQueue(), tiny_model, "And then?", ids, GEN, turn=turn, reuse=reuse).start())
    assert second.ctx.kept == turn["reused_tokens"] and second.events[0].positions == [turn["reused_tokens"], len(ids)]
    assert second.turn["cold_ttft_ms"] > 0 and second.trace().turn["cold_ttft_ms"] == second.turn["cold_ttft_ms"]
    values = follow_up.result_values(second)
    assert follow_up.sentence(values) == (f"This follow-up paid for {turn['new_tokens']} new tokens, not {len(ids)}: "
                                          f"its first token came after {values['ttft']} ms, against "
                                          f"{values['scratch']} ms from scratch.")
    details = lesson.text("follow_up", values)
    assert "—" not in details and f"only the other {turn['new_tokens']}" in details  # every slot filled
    fig = follow_up.figure(values)
    assert list(fig.data[0].x) == [float(values["ttft"]), float(values["scratch"])]
    # a kept turn slower than the one from scratch (other work in its prefill) is drawn whole, its label
    # inside the axis, under a title short enough for the chart's width
    slow = follow_up.figure({**values, "ttft": "298", "scratch": "233"})
    assert slow.layout.xaxis.range[1] >= 298 * 1.2
    assert len(slow.layout.title.text) <= 80 and slow.layout.title.text == follow_up.title(298.0, 233.0)
    # the grid: the kept positions drawn from the prefill's own norms, marked apart from the new ones
    patch = figures.kv_patch(second.events, 0, second.ctx)
    assert patch["cols"]["0"]["x"] == list(range(len(ids)))
    who = {c[1] for c in patch["cols"]["0"]["customdata"][0][: turn["reused_tokens"]]}
    assert who == {figures.KEPT_WHO}
    notes = [n["text"] for n in patch["layout"]["annotations"]]
    assert f"■ kept from the last turn: {turn['reused_tokens']} positions" in notes
    assert any(f"prefill: {turn['new_tokens']} new positions" in n for n in notes)


def test_a_follow_up_runs_cold_and_says_why(tiny_model, monkeypatch):
    first = _first(tiny_model, monkeypatch)
    batched = GenerationSettings(max_new_tokens=6, stop_on_eos=False, batch=2)
    _, turn, reuse = follow_up.prepare(tiny_model, first, "And then?", batched)
    assert reuse is None and turn["reused_tokens"] == 0 and turn["cold_reason"] == conv.COLD_BATCH
    recorded = SimpleNamespace(replay=True, prompt="Hi there", turn=None, events=[SimpleNamespace(token_text="Hello")])
    _, turn, reuse = follow_up.prepare(tiny_model, recorded, "And then?", GEN)
    assert reuse is None and turn["cold_reason"] == follow_up.COLD_RECORDING
    cold = SimpleNamespace(turn={**turn, "cold_reason": conv.COLD_BATCH}, events=[SimpleNamespace(latency_ms=12.34)])
    assert follow_up.sentence(follow_up.result_values(cold)).startswith(
        f"This follow-up ran cold, {conv.COLD_BATCH}: it prefilled all")
    assert follow_up.figure(follow_up.result_values(cold)) is None


def test_bad_follow_ups_are_messages(tiny_model, monkeypatch):
    first = _first(tiny_model, monkeypatch)
    assert follow_up.prepare(tiny_model, first, "  ", GEN) == "Type a follow-up question first."
    monkeypatch.setattr(settings, "MAX_PROMPT_TOKENS", 10)
    message = follow_up.prepare(tiny_model, first, "And then?", GEN)
    assert isinstance(message, str) and "press Generate to start a new one" in message
    monkeypatch.setattr(settings, "MAX_PROMPT_TOKENS", 10_000)
    long = GenerationSettings(max_new_tokens=500, stop_on_eos=False)
    message = follow_up.prepare(tiny_model, first, "And then?", long)
    assert isinstance(message, str) and "window" in message


def test_a_lone_question_has_no_follow_up_result(tiny_model, monkeypatch):
    first = _first(tiny_model, monkeypatch)
    assert follow_up.result_values(first) is None
    ctx = build_context(tiny_model, first.prompt_ids, 6, 1, "dynamic")
    assert ctx.kept == 0 and "kept" not in str(figures.kv_patch(first.events, 0, ctx)["layout"]["annotations"])


def test_a_saved_follow_up_replays_with_its_kept_positions(tiny_model, monkeypatch):
    """The trace of a follow-up (version 2) replays as it ran: the grid's kept positions, the
    sentence and both times come back from the file."""
    from app.shared.replay import ReplayRun, context_from_trace
    from core.trace import Trace

    first = _first(tiny_model, monkeypatch)
    ids, turn, reuse = follow_up.prepare(tiny_model, first, "And then?", GEN)
    second = _finished(GenerationRun(RunQueue(), tiny_model, "And then?", ids, GEN, turn=turn, reuse=reuse).start())
    trace = Trace.from_json(second.trace().to_json())
    replay = ReplayRun(trace, context_from_trace(trace), "a file")
    assert replay.ctx.kept == turn["reused_tokens"] and replay.kept is None
    assert follow_up.result_values(replay) == follow_up.result_values(second)
    notes = [n["text"] for n in figures.kv_patch(replay.events, 0, replay.ctx)["layout"]["annotations"]]
    assert f"■ kept from the last turn: {turn['reused_tokens']} positions" in notes
    # a follow-up to a recording runs cold: the recording holds no cache on this server
    _, again, reuse = follow_up.prepare(tiny_model, replay, "More?", GEN)
    assert reuse is None and again["cold_reason"] == follow_up.COLD_RECORDING and again["index"] == 2


def test_an_answer_the_model_ended_goes_back_without_its_end_token(tiny_model, monkeypatch):
    """The chat template closes every answer itself: an answer that ended on the model's end-of-turn
    token is sent back without it (kept, the model would read two)."""
    from core.trace import STOP_EOS

    first = _first(tiny_model, monkeypatch)
    ended = SimpleNamespace(turn=None, prompt="Hi there", stop_reason=STOP_EOS, replay=False,
                            events=[*first.events[:-1], SimpleNamespace(token_text="<|im_end|>")])
    assert follow_up.messages_after(ended)[-1]["content"] == "".join(e.token_text for e in first.events[:-1])
    ids, _, _ = follow_up.prepare(tiny_model, ended, "And then?", GEN)
    end = tiny_model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(not (a == end and b == end) for a, b in zip(ids, ids[1:], strict=False))  # never two in a row
    assert follow_up.messages_after(first)[-1]["content"] == first.generated_text  # cut by the token cap: whole


def test_the_cap_counts_a_static_caches_whole_allocation(tiny_model, monkeypatch):
    """A static cache holds its whole allocation (prompt plus every new token it might have made), not
    only the positions in use: the cap counts what it holds."""
    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    ids = conversation_ids(tiny_model, [{"role": "user", "content": "Hi there"}], True)
    static = GenerationSettings(max_new_tokens=40, stop_on_eos=False, cache="static")
    run = _finished(GenerationRun(RunQueue(), tiny_model, "Hi there", ids, static).start())
    kept = run.kept
    assert kept.allocated > kept.nbytes  # the allocation has one position more than the cache holds
    small = conv.capped(kept, cap_bytes=kept.allocated - 1)
    assert small is not kept and small.allocated <= kept.allocated - 1 and small.ids == kept.ids[: len(small.ids)]


def test_dropping_a_runs_cache_frees_it_even_while_it_runs(tiny_model, monkeypatch):
    import gc
    import weakref

    first = _first(tiny_model, monkeypatch)
    ref = weakref.ref(first.kept.cache)
    first.drop_cache()
    gc.collect()
    assert ref() is None  # nothing else held it
    _, turn, reuse = follow_up.prepare(tiny_model, first, "And then?", GEN)
    assert reuse is None and turn["cold_reason"] == conv.COLD_NONE
    # a run dropped before it ends keeps nothing when it does
    ids = conversation_ids(tiny_model, [{"role": "user", "content": "Hi"}], True)
    running = GenerationRun(RunQueue(), tiny_model, "Hi", ids, GEN)
    running.drop_cache()
    assert _finished(running.start()).kept is None


def test_long_follow_ups_and_long_conversations_are_messages(tiny_model, monkeypatch):
    from core.trace import MAX_TURN_MESSAGES

    first = _first(tiny_model, monkeypatch)
    message = follow_up.prepare(tiny_model, first, "x" * (follow_up.FOLLOW_UP_MAX_CHARS + 1), GEN)
    assert isinstance(message, str) and "at most 2,000 characters" in message
    chatty = SimpleNamespace(turn={"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
                                   * (MAX_TURN_MESSAGES // 2)}, prompt="q", stop_reason=None, replay=False,
                             events=first.events)
    message = follow_up.prepare(tiny_model, chatty, "And then?", GEN)
    assert isinstance(message, str) and "the most a saved trace keeps" in message


def test_a_follow_up_holds_the_shared_model_until_its_turn_from_scratch_is_timed(tiny_model, monkeypatch):
    """The shared model still serves one run at a time: a follow-up's generation and the same turn timed
    from scratch both run while it holds the queue, so a run queued behind it starts only after both
    (nobody's forwards land in the follow-up's timings, nor its in theirs)."""
    import threading
    import time

    from app.shared import runs

    first = _first(tiny_model, monkeypatch)
    ids, turn, reuse = follow_up.prepare(tiny_model, first, "And then?", GEN)
    log: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    real_run, real_cold = runs.run, runs.cold_prefill_ms

    follow_up_running = threading.Event()

    def logged_run(loaded, prompt_ids, settings_, **kw):
        name = "follow-up" if kw.get("reuse") else "other"
        with lock:
            log.append((name, "start", time.perf_counter()))
        if name == "follow-up":
            follow_up_running.set()
        yield from real_run(loaded, prompt_ids, settings_, **kw)
        with lock:
            log.append((name, "end", time.perf_counter()))

    def logged_cold(*args, **kw):
        ms = real_cold(*args, **kw)
        with lock:
            log.append(("follow-up", "scratch timed", time.perf_counter()))
        return ms

    monkeypatch.setattr(runs, "run", logged_run)
    monkeypatch.setattr(runs, "cold_prefill_ms", logged_cold)
    queue = RunQueue()
    second = GenerationRun(queue, tiny_model, "And then?", ids, GEN, turn=turn, reuse=reuse).start()
    assert follow_up_running.wait(60)  # the follow-up holds the model: the other reader queues behind it
    other_ids = conversation_ids(tiny_model, [{"role": "user", "content": "Another reader"}], True)
    other = GenerationRun(queue, tiny_model, "Another reader", other_ids, GEN).start()
    _finished(second)
    _finished(other)
    order = [(name, what) for name, what, _ in sorted(log, key=lambda x: x[2])]
    assert order == [("follow-up", "start"), ("follow-up", "end"), ("follow-up", "scratch timed"),
                     ("other", "start"), ("other", "end")], order

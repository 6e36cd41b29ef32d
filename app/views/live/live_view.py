"""The live part of the page: a fragment that polls the session's run and feeds the live view.

While a run is active the fragment reruns itself every POLL_S (`run_every`, set only while a run
is active: a chained `st.rerun(scope="fragment")` is refused inside a full script run, which is
where a run starts). Each pass touches the run so its watchdog knows a reader is still there.
The browser, not this poll, sets the drawing pace (app/views/live/js/player.js), so the poll
rate only bounds the display's lag. When the run ends the fragment asks for one full rerun, which
draws the after-run sections and re-creates the fragment without a timer.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared.runs import page_turn
from app.views.live import after_run, charts, lesson, sections, state
from app.views.live import component as live
from core.trace import STOP_EOS, STOP_MAX_NEW_TOKENS, STOP_STOPPED

# why a run ended, in the reader's words (the trace keeps the code names)
STOP_WORDS = {STOP_MAX_NEW_TOKENS: "token cap reached", STOP_EOS: "the model ended its answer",
              STOP_STOPPED: "stopped"}

TEXT_REFRESH_S = 2.0
POLL_S = 1.0  # each pass costs the server and the browser a Streamlit render: once a second is enough


def status_of(run: Any) -> dict[str, str]:
    """One line saying what the run is doing, for the live view's status bar."""
    if run is None:
        return {"state": "idle", "text": "Press Generate to watch the model."}
    n = len(run.events)
    if run.replay:  # a recorded trace (app.shared.replay): no model behind it
        return {"state": "replay", "text": f"Recorded run ({run.source}), {n} tokens, replayed at its recorded pace"}
    if run.status == "queued":
        pos = run.queue_position
        ahead = f"{pos} ahead of you" if pos > 0 else "starting"
        return {"state": "queued", "text": f"Waiting for another reader's run (or the one-time calibration of "
                                           f"this machine) to finish: {ahead} in the queue…"}
    if run.status == "running":
        if run.ctx is None or n == 0:
            return {"state": "running", "text": run.progress or "starting…"}
        return {"state": "running", "text": f"Model running: {n} tokens so far"}
    labels = {"done": f"Finished: {n} tokens ({STOP_WORDS.get(run.stop_reason, run.stop_reason or 'done')})",
              "stopped": f"Stopped by you after {n} tokens", "abandoned": "Stopped: nobody was watching",
              "error": f"The run failed: {run.error}"}
    return {"state": run.status, "text": labels.get(run.status, run.status)}


def _lesson_texts(run: Any, events: list, ctx: Any) -> dict[str, str]:
    """The lesson prose beside the charts, with this run's numbers. While the run is active the
    numbers are refreshed every TEXT_REFRESH_S only: the tiles above carry the live figures, and an
    unchanged text costs the browser no Markdown re-render on the passes in between."""
    import time

    cached = state.get(state.LESSON_TEXTS)
    now = time.monotonic()
    if (run.active and cached is not None and cached["run"] == run.id and now - cached["t"] < TEXT_REFRESH_S):
        return cached["texts"]
    values = lesson.run_values(run.id, events, ctx)  # the waits come with the events (Event.waited_ms)
    texts = {c.lesson: lesson.text(c.lesson, values) for c in charts.LIVE_CHARTS}
    texts.update({f"answer:{s.key}": sections.answer(s.key, values) for s in sections.SECTIONS})
    state.put(state.LESSON_TEXTS, {"run": run.id, "t": now, "texts": texts})
    return texts


def live_view(model_config: Any) -> None:
    run = state.current_run()
    every = POLL_S if run is not None and run.active else None
    state.set_polling(run)
    st.fragment(_live_body, run_every=every)(model_config)


def _live_body(model_config: Any) -> None:
    # Keyed so live.css can switch off Streamlit's fade of "stale" elements in here: every pass
    # re-sends this whole section, and on a busy machine the fade made a running page look greyed out.
    with st.container(key="pd_live"), page_turn(state.current_run()):
        _live_content(model_config)


def _live_content(model_config: Any) -> None:
    run = state.current_run()
    full_pass = full = state.fragment_sees_full_pass()
    resent = state.take_resend()  # a view asked for every step again (see askResendIfBehind in app/views/live/js/)
    full = full or resent
    if run is None:
        st.info("Press **Generate**: the prompt is prefilled in one pass, then you watch every decode step, "
                "the cache growing, and the measured time and traffic beside their predictions.")
        return
    run.touch()
    if state.polling_lost(run):
        st.rerun()  # a full pass sets the fragment polling for this run (see state.polling_lost)
    over = not run.active  # read before the snapshot: when True, the snapshot holds every event
    events = list(run.events)  # a snapshot: the worker keeps appending
    ctx = run.ctx
    status = status_of(run)
    if run.status == "error":
        st.error(f"The run failed: {run.error}")
    start = live.send_window(state.feed(), run.id, len(events), full) if ctx is not None else 0
    controls = live.controls_data(run.id if ctx else None, status, events, ctx, start)
    controls["replay"] = run.replay
    controls["poll_s"] = POLL_S  # the browser paces its display one pass behind the model
    tokens_col, pinned_col = st.columns([1, 1], gap="large")  # always both: element paths stay put
    with tokens_col:
        live.mount(controls, total=len(events) if ctx is not None else None, resent=resent,
                   on_resend=state.request_resend)
    if ctx is not None:
        with pinned_col:
            texts = _lesson_texts(run, events, ctx)
            _chart_with_details(charts.chart(charts.PINNED), run, events, ctx, start, resent, texts)
        with st.container(key="pd_answer_box"):  # one element whatever it holds: the charts below keep their place
            if not run.active and events:
                after_run.render_answer(run)
        for section in sections.SECTIONS:
            mine = [c for c in charts.LIVE_CHARTS if c.section == section.key and c.name != charts.PINNED]
            if mine:
                _live_section(section.key, mine, run, events, ctx, start, resent, texts)
    if state.needs_final_rerun(run) and not (full_pass and over):
        # A fragment pass, or a run that ended after its snapshot, asks for a full pass to draw the
        # end; a full pass that saw the run over draws the after-run sections itself.
        st.rerun()


def _live_section(key: str, mine: list, run: Any, events: list, ctx: Any, start: int, resent: bool,
                  texts: dict[str, str]) -> None:
    """One question the live charts answer: its heading, then each chart with, beside the first, the
    answer in this run's numbers, and beside each, how we know (the former lesson text)."""
    sections.heading(key)
    for i, chart in enumerate(mine):
        left, right = st.columns([3, 2], gap="large")
        with left:
            _chart(chart, run, events, ctx, start, resent)
        with right:
            if i == 0:
                sections.show_answer(key, texts.get(f"answer:{key}", ""),
                                     "The answer, with this run's numbers, appears as the run goes.")
            with sections.how_we_know(chart.topic):
                st.markdown(texts[chart.lesson])


def _chart(chart: Any, run: Any, events: list, ctx: Any, start: int, resent: bool) -> None:
    """A live chart and, one click down, the numbers behind it."""
    live.mount(live.chart_data(chart.name, run.id, events, ctx, start), total=len(events), resent=resent,
               on_resend=state.request_resend)
    with st.expander(chart.table_title):
        if run.active:
            st.caption("The table fills in when the run ends (the chart above is live).")
        else:
            st.dataframe(chart.table(events, ctx), hide_index=True)


def _chart_with_details(chart: Any, run: Any, events: list, ctx: Any, start: int, resent: bool,
                        texts: dict[str, str]) -> None:
    """The pinned chart (charts.PINNED): the chart, its table, and how we know, stacked in one column."""
    _chart(chart, run, events, ctx, start, resent)
    with sections.how_we_know(chart.topic):
        st.markdown(texts[chart.lesson])

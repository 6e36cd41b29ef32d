"""Everything below the live charts, in lesson order, written once for every state of the page.

The three questions answered after a run (the KV cache: the cache on and off, with the crossover
chart and the per-layer heads one click down; batching; serving, played by the simulator), then the
appendix (formulas, "about this run", the glossary). The answer block itself (render_answer) is
drawn at the top of the live fragment. The same `render` serves the live model, a recording shown
while the model is missing, and presenter mode (which shows only what the current tour step needs).
These are ordinary Streamlit elements drawn on full script runs only, so they cost nothing while
the live view animates.
"""

from __future__ import annotations

import html
from typing import Any

import streamlit as st

from app.shared.context import RunContext, build_context
from app.shared.experiment_results import this_machine
from app.shared.model import cached_ceilings
from app.shared.replay import model_config, recorded_on
from app.shared.text import stop_sentence
from app.views.live import (
    export,
    figures,
    follow_up,
    lesson,
    panels,
    presenter,
    sections,
    serving_sketch,
    shown,
    state,
)


def render(loaded: Any) -> None:
    """The page below the live view. `loaded` is the model, or None while a recording stands in for it."""
    run = state.current_run()
    finished = run is not None and not run.active and bool(run.events)
    if presenter.active():  # minimal chrome: only what the current tour step needs
        step = presenter.current_step(loaded is not None)
        if loaded is not None and step is not None and step["section"] == "compare":
            panels.compare_panel(loaded)
        elif loaded is not None and step is not None and step["section"] == "batching":
            panels.batching_panel(loaded)
        elif step is not None and step["section"] == "follow_up" and run is not None:
            follow_up.render_result(run)
        return
    ctx = run.ctx if run is not None and run.ctx is not None else None
    if ctx is None and loaded is not None:
        ctx = model_context(loaded)
    if ctx is None:
        return
    events = run.events if run is not None and run.ctx is not None else []
    values = lesson.run_values(run.id if run is not None and run.ctx is not None else None, list(events), ctx)
    render_cache(run if finished else None, events, ctx, values, loaded)
    sections.heading("batching")
    panels.batching_panel(loaded)
    render_serving(events, ctx, values, _sketch_step(loaded, run))
    render_appendix(loaded, values)


def _sketch_step(loaded: Any, run: Any) -> Any:
    """The simulator's step time for the model on screen: the loaded one, else the recording's."""
    if loaded is not None:
        return serving_sketch.step_time_for(loaded.config, getattr(loaded.info, "dtype", "fp32"))
    if run is not None and run.replay:
        return serving_sketch.step_time_for(model_config(run.trace_data), run.trace_data.model.get("dtype") or "fp32")
    return None


def render_cache(run: Any, events: list, ctx: RunContext, values: dict[str, str], loaded: Any) -> None:
    """How the KV cache affects latency: where its reads would overtake the weights', and the cache
    switched on and off; the grouped-query heads of one layer one click down."""
    sections.heading("cache")
    if run is not None:
        follow_up.render_result(run)
    panels.compare_panel(loaded, values)  # without the model: the recording, its button disabled
    with sections.how_we_know("the cache's price"):
        c1, c2 = st.columns([3, 2], gap="large")
        c1.plotly_chart(figures.crossover_figure(ctx), key="crossover")
        c2.markdown(lesson.text("q3_cache_latency", values))
    if run is not None and run.ctx is not None and run.ctx.cache != "none":
        with sections.how_we_know("heads per layer"):
            render_layer_detail(run)


def render_appendix(loaded: Any, values: dict[str, str]) -> None:
    """What a reader may want after the lesson: the formulas, this run's set-up and the words used."""
    st.header("Appendix", anchor="appendix", divider="gray")
    with st.expander("The formulas: prefill and decode in symbols"):
        st.markdown(lesson.text("formulas", values))
    if loaded is not None:
        panels.about_panel(loaded)
    with st.expander("Words used on this page"):
        st.markdown(lesson.text("glossary", values))


def render_serving(events: list, ctx: RunContext, values: dict[str, str], fitted: Any) -> None:
    """The serving question, played by the serving simulator on this run's speeds: three readers
    and a long prompt."""
    values = {**values, **serving_sketch.slot_values(events, ctx, fitted)}
    sections.heading("serving")
    c1, c2 = st.columns([3, 2], gap="large")
    with c1:
        if values.get("stall_whole_s"):
            st.plotly_chart(serving_sketch.figure(events, ctx, fitted), key="serving_sketch")
        else:
            st.caption("After a run, this chart puts its measured speeds on three readers and a long prompt.")
    with c2:
        sections.render_answer("serving", values)
        with sections.how_we_know("the sketch"):
            st.markdown(lesson.text("serving", values))


def model_context(loaded: Any) -> RunContext:
    """A figure context with no prompt: enough for the formulas and the crossover chart before a run."""
    return build_context(loaded, [], 1, 1, "dynamic", cached_ceilings())


def render_answer(run: Any) -> None:
    text = run.generated_text
    st.session_state[state.LAST_TEXT] = text
    st.markdown("#### The answer")
    st.markdown(f'<div class="pd-output" data-testid="pd-output" style="white-space:pre-wrap;'
                f'border-left:6px solid #0072B2;padding:0.4rem 0.8rem">{html.escape(text) or "∅"}</div>',
                unsafe_allow_html=True)
    ending = stop_sentence(run.stop_reason, len(run.events), getattr(run.settings, "max_new_tokens", None))
    if ending:
        st.markdown(f"*{ending}*")
    # the token counts are in the strips above; the weights' form in the About table (appendix)
    where = (f"Recorded on {recorded_on(run.trace_data)}" if run.replay
             else f"Run on this server, {this_machine()}")
    st.caption(f"{where} · cache: {run.settings.cache}")
    follow_up.render_box(run)
    export.render(run, key_prefix="answer")


def render_layer_detail(run: Any) -> None:
    ctx = run.ctx
    if ctx is None or ctx.cache == "none" or not run.events or not run.events[0].kv_norms:
        return
    c1, c2 = st.columns([3, 2], gap="medium")
    with c2:
        layer = st.slider("Layer", 0, ctx.n_layers - 1, key=state.LAYER)
        which = st.radio("Vectors", ["key", "value"], key=state.KV_WHICH, horizontal=True)
        g = ctx.group_size
        st.markdown(
            f"This model has **{ctx.n_heads} query heads** but stores only **{ctx.n_kv_heads} KV heads** per layer: "
            f"each KV head is shared by {g} query heads (grouped-query attention). The cache therefore holds "
            f"{ctx.n_kv_heads} × {ctx.head_dim} numbers per layer for keys and as many for values, "
            f"{shown.fmt_bytes(ctx.kv_bytes_per_cell)} per position and layer, {ctx.n_heads // ctx.n_kv_heads}× "
            f"less than if every query head had its own, as the model's config gives it.")
    with c1:
        st.plotly_chart(figures.layer_detail_figure(run.events, ctx, layer, which), key="layer_detail")
    with c2:  # under the explanation: what the colours mean, and which head stands out and why
        st.markdown(lesson.layer_heads_sentence(run.events, ctx.n_kv_heads, layer, which, ctx.batch))

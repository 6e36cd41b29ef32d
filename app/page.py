"""The page, top to bottom in lesson order. Thin: it lays out sections that live in their own modules.

The title and the short definition are drawn before anything heavy is imported, so the first
paint does not wait for torch; the model loads once per server behind a spinner.
"""

from __future__ import annotations

import streamlit as st

from app import state

PAGE_CSS = """
<style>
  .block-container { padding-top: 2.2rem; max-width: 1500px; }
  .stMarkdown p, .stMarkdown li { font-size: 1.02rem; line-height: 1.55; }
</style>
"""


def render() -> None:
    state.begin_full_pass()
    st.markdown(PAGE_CSS, unsafe_allow_html=True)
    st.title("Prefill & Decode Lab")
    st.caption("A real language model (SmolLM2-135M-Instruct, 30 layers) runs on this server while you watch. "
               "Every number is either **measured** on this run or **computed** by the cost model, and says so.")
    from app import lesson  # after the title: pulls in plotly

    st.markdown(lesson.text("intro"))
    with st.spinner("Loading the model (the first start of a server prepares it once)…"):
        try:
            from app.model_service import get_model

            loaded = get_model()
        except Exception as exc:  # shown to the reader, never as a traceback
            st.error(f"The model could not be loaded: {exc}")
            return
    from app.model_service import start_calibration

    start_calibration(loaded)
    _inputs(loaded)
    from app.live_section import live_view

    st.divider()
    live_view(loaded.config)
    _after_run(loaded)


def _inputs(loaded) -> None:
    from app import controls

    controls.render_inputs(loaded)


def _after_run(loaded) -> None:
    from app import after_run, lesson, panels

    run = state.current_run()
    finished = run is not None and not run.active and bool(run.events)
    if finished:
        st.divider()
        after_run.render_answer(run)
        after_run.render_layer_detail(run)
    st.divider()
    ctx = run.ctx if run is not None and run.ctx is not None else _model_context(loaded)
    st.markdown(lesson.text("formulas", lesson.values_for(run.events if run else [], ctx)))
    after_run.render_crossover(run.events if run else [], ctx)
    panels.compare_panel(loaded)
    st.divider()
    panels.batching_panel(loaded)
    st.divider()
    st.markdown(lesson.text("serving"))
    panels.about_panel(loaded)


def _model_context(loaded):
    """A figure context with no prompt: enough for the formulas and the crossover chart before a run."""
    from app.context import build_context
    from app.model_service import cached_ceilings

    return build_context(loaded, [], 1, 1, "dynamic", cached_ceilings())

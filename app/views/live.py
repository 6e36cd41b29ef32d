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
    from app.sections import share_links  # issue 6: a link's values go into the widgets before any is drawn

    share_links.apply_link_once()
    st.markdown(PAGE_CSS, unsafe_allow_html=True)
    st.title("Prefill & Decode Lab")
    st.caption("A real language model (SmolLM2-135M-Instruct, 30 layers) runs on this server while you watch. "
               "Every number is either **measured** on this run or **computed** by the cost model, and says so.")
    from app.components import lesson
    from app.sections import presenter  # after the title: pulls in plotly

    presenter.render_header()
    share_links.show_notices()
    if not presenter.active():
        st.markdown(lesson.text("intro"))
    from app.sections import model_gate
    from app.sections import recordings as replay_section

    # The model loads in the background; while it prepares, or if it cannot load, a recording replays.
    status, loaded = model_gate.model_state()
    if status != "ready":
        replay_section.render_without_model(status, loaded)
        share_links.sync_url()
        return
    from app.services.model import start_calibration

    start_calibration(loaded)
    _inputs(loaded)
    replay_section.render_tools(loaded)
    presenter.render_tour(True)
    replay_section.replay_banner(state.current_run())
    from app.sections.live_view import live_view

    st.divider()
    live_view(loaded.config)
    _after_run(loaded)
    share_links.sync_url()


def _inputs(loaded) -> None:
    from app.sections import inputs as controls

    controls.render_inputs(loaded)


def _after_run(loaded) -> None:
    from app.components import lesson
    from app.sections import after_run, panels, presenter

    if presenter.active():  # minimal chrome: only what the current tour step needs
        presenter.render_section(loaded)
        return
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
    from app.services.context import build_context
    from app.services.model import cached_ceilings

    return build_context(loaded, [], 1, 1, "dynamic", cached_ceilings())

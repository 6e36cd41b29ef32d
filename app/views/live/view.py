"""The live page: a real model generates in front of the reader, top to bottom in lesson order.

Thin: the inputs, then the live fragment (the answer block and the three questions the live charts
answer, app.views.live.live_view), then the rest (after_run); the questions are
app.views.live.sections. Nothing imported here loads torch: the model
loads in the background (app.shared.model), while a recording stands in for it, so the title
paints at once.
"""

from __future__ import annotations

import streamlit as st

from app.shared.model import start_calibration
from app.shared.runs import page_turn
from app.views.live import (
    after_run,
    lesson,
    link,
    live_view,
    model_gate,
    presenter,
    recordings,
    settings,
    state,
)

TITLE = "Prefill & Decode Lab"
PAGE_CSS = """
<style>
  .block-container { padding-top: 2.2rem; max-width: 1500px; }
  .stMarkdown p, .stMarkdown li { font-size: 1.02rem; line-height: 1.55; }
</style>
"""


def render() -> None:
    # A pass mid-run (a reader moving a widget) takes turns with the model like the live redraws.
    with page_turn(state.current_run()):
        _render()


def _render() -> None:
    state.begin_full_pass()
    link.apply_link_once()  # a link's values go into the widgets before any widget is drawn
    st.markdown(PAGE_CSS, unsafe_allow_html=True)
    title, tools = st.columns([5, 2], vertical_alignment="center")
    title.title(TITLE)
    with tools:
        presenter.render_header()
    st.markdown(lesson.text("where"))
    link.show_notices()
    # The model loads in the background; while it prepares, or if it cannot load, a recording replays.
    status, loaded = model_gate.model_state()
    if status == "ready":
        start_calibration(loaded)
        with settings.render_inputs(loaded):  # the recordings sit under the prompt, beside the settings
            recordings.render_tools(loaded)
    else:
        recordings.ensure_something_on_screen()
        recordings.model_banner(status, loaded or "")
        model_gate.render_wait_or_retry(status)
        recordings.render_tools(None)
        loaded = None
    presenter.render_tour(loaded is not None)
    recordings.replay_banner(state.current_run())
    live_view.live_view(loaded.config if loaded is not None else None)
    after_run.render(loaded)
    link.sync_url()
    run = state.current_run()
    if run is not None and hasattr(run, "page_drawn"):
        run.page_drawn()  # a run started by this pass's click begins timing only now (see runs.py)

"""The engine lab: the serving lesson's stall on a real serving engine, measured tick by tick, with
the simulator's prediction for the same requests drawn under it.

Thin: the engine list and its health in app.views.engines.picker, the live run in
app.views.engines.live (queued jobs in app.views.engines.jobs), the bundled recording in
app.views.engines.recording, the charts in app.views.engines.figures; an engine that publishes its
KV events gets the prefix-cache experiment instead (app.views.engines.prefix). Where no engine
answers (Streamlit Community Cloud, or `make engine` not started) the page plays the recording,
so it teaches the same lesson everywhere.
"""

from __future__ import annotations

import streamlit as st

from app.views.engines import live, picker, prefix, recording, state
from app.views.engines.prefix_text import NO_EVENTS_ENGINE
from app.views.engines.text import DEFINITIONS, HOW_TO_START, INTRO
from core.engines.endpoints import read_config

TITLE = "Engine lab: a real serving engine, measured"


def render() -> None:
    st.title(TITLE)
    st.caption("Every number on this page says what it is: **measured** on a real engine (by this page's client, "
               "or by the engine's own metrics), **simulated** by the serving simulator fitted to that engine, or "
               "**computed** from the two.")
    st.markdown(INTRO)
    st.markdown(DEFINITIONS)
    st.header("Engines on this server")
    endpoints, problems = read_config()
    engine, _ = picker.render(endpoints, problems)
    if engine is not None and engine.kv_events:
        st.header("Prefix caching, live")
        prefix.render(engine)
        return
    has_run = state.job(state.LB_RUN_JOB) is not None
    if engine is not None or has_run:
        st.header("The experiment, live")
        if engine is None:
            st.warning("No engine answers right now, so no new run can start; your last run stays below.")
        live.render(engine)
        if any(e.kv_events for e in endpoints):
            st.info(NO_EVENTS_ENGINE)
        with st.expander("The bundled recording (made earlier, to compare with)", expanded=False):
            recording.render()
        if engine is None:
            st.markdown(HOW_TO_START)
        return
    st.header("The experiment, recorded")
    st.info("No engine answers on this server, so the page plays a recording of the experiment instead. "
            "Everything below was measured on a real engine when the recording was made.")
    recording.render()
    st.divider()
    st.markdown(HOW_TO_START)

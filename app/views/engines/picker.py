"""The engine picker: the operator's list of engines with whether each answers now, and a choice
among those that do. A reader can never type an address: the page talks only to the engines in
that list (core.engines.endpoints), so it cannot be used to reach anything else.
"""

from __future__ import annotations

import streamlit as st

from app.shared.text import plain
from app.views.engines import health as engine_health
from app.views.engines import state
from core.engines.base import Health
from core.engines.endpoints import Endpoint


def why_down(health: Health, endpoint: Endpoint) -> str:
    """The health check's reason in a reader's words (its address is already on the line)."""
    detail = health.detail or "no reason given"
    if "ConnectError" in detail:
        return "nothing listens there (not started yet?)"
    if "Timeout" in detail:
        return "no answer within 3 s (starting, or overloaded?)"
    return detail.replace(endpoint.base_url, "the engine")


def _recheck() -> None:
    engine_health.forget()


def render(endpoints: list[Endpoint], problems: list[str]) -> tuple[Endpoint | None, dict[str, Health]]:
    """The list and the choice: (the picked healthy engine or None, every engine's health by name)."""
    if problems:
        with st.expander("For the operator: some engine settings could not be used", expanded=True):
            for p in problems:
                st.warning(plain(p))
    if not endpoints:
        st.info("No engine is configured on this server.")
        return None, {}
    health = engine_health.health_of(endpoints)
    lines = []
    for e in endpoints:
        h = health[e.name]
        mark = "🟢 answering" if h.ok else f"⚪ not answering: {plain(why_down(h, e))}"
        lines.append(f"- **{plain(e.label)}** · {plain(e.where)} · {mark}")
    st.markdown("\n".join(lines))
    healthy = [e for e in endpoints if health[e.name].ok]
    st.button("Check the engines again", key=state.LB_RECHECK, on_click=_recheck,
              help="Each engine is asked whether it answers at most every few seconds.")
    if not healthy:
        return None, health
    names = [e.name for e in healthy]
    if state.get(state.LB_ENGINE) not in names:
        state.put(state.LB_ENGINE, names[0])
    labels = {e.name: e.label for e in healthy}
    picked = st.radio("Run on", names, key=state.LB_ENGINE, format_func=lambda n: labels.get(n, n), horizontal=True)
    return next(e for e in healthy if e.name == picked), health

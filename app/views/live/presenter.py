"""Presenter mode: large type, minimal chrome, a guided tour, and the keyboard.

Turned on by the toggle at the top or by `?presenter=1` in a link. It hides Streamlit's menus and
sidebar and the page's secondary panels, enlarges the text, and shows one tour step at a time
(assets/lesson/tour.json, in lesson order) with Previous / Next buttons. Keys: Space, ← and → are
the live player's (app/views/live/js/: play or pause, step back, step forward); PageDown / PageUp (what
presentation clickers send) and N / P move through the tour, through a tiny components-v2
component that clicks the tour buttons, because Streamlit has no keyboard API.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import streamlit as st

from app.views.live import follow_up, lesson, link, state

TOUR_FILE = Path(__file__).resolve().parents[3] / "assets" / "lesson" / "tour.json"
MODEL_SECTIONS = ("live", "replay", "compare", "batching")  # sections this page draws with the model
REPLAY_SECTIONS = ("live", "replay")  # without the model: the recorded run only

CSS = """
<style>
  [data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stToolbar"],
  [data-testid="stDecoration"], [data-testid="stHeader"], [data-testid="stMainMenu"], footer,
  [data-testid="stStatusWidget"] { display: none !important; }
  .block-container { padding-top: 0.8rem !important; max-width: 100% !important; }
  .stMarkdown p, .stMarkdown li { font-size: 1.45rem !important; line-height: 1.5 !important; }
  h1 { font-size: 2.1rem !important; padding-top: 0 !important; }
  .st-key-pd_tour { border: 3px solid #0072B2; border-radius: 0.8rem; padding: 0.6rem 1.1rem; }
  .st-key-pd_tour h3 { font-size: 2rem !important; }
  .pd-bar button { font-size: 1.3rem !important; padding: 0.4rem 1rem !important; }
  .pd-status, .pd-keys, .pd-box-label, .pd-scrub-box { font-size: 1.15rem !important; }
  .pd-scrub { width: 22rem !important; }
  .pd-tok { font-size: 1.3rem !important; }
  .pd-tile-value { font-size: 2.1rem !important; }
  .pd-tile-label, .pd-tile-note { font-size: 1.05rem !important; }
  .pd-prompt-toks, .pd-gen-toks { max-height: 18rem !important; }
  .stButton button p, .stToggle label p { font-size: 1.2rem !important; }
</style>
"""

_KEYS_JS = """
export default function (component) {
  const lab = (window.pdLab = window.pdLab || {});  // the live view's state object (live/state.js)
  if (lab.tourKeys) return;
  lab.tourKeys = true;
  document.addEventListener("keydown", (ev) => {
    const t = ev.target, tag = (t && t.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (t && t.isContentEditable)) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    let which = null;
    if (ev.key === "PageDown" || ev.key === "n" || ev.key === "N") which = "next";
    else if (ev.key === "PageUp" || ev.key === "p" || ev.key === "P") which = "prev";
    if (!which) return;
    const button = document.querySelector(".st-key-pd_tour_" + which + " button");
    if (!button || button.disabled) return;
    ev.preventDefault();
    button.click();
  });
}
"""
_keys_component = st.components.v2.component("pdlab_tour_keys", js=_KEYS_JS, html="<span></span>")


@cache
def tour_steps() -> tuple[dict[str, Any], ...]:
    """Every tour step from assets/lesson/tour.json (id, title, section, text, look_at)."""
    data = json.loads(TOUR_FILE.read_text(encoding="utf-8"))
    return tuple(s for s in data["steps"] if isinstance(s, dict) and {"id", "title", "section", "text"} <= set(s))


def steps_for(sections: tuple[str, ...]) -> list[dict[str, Any]]:
    """The tour as this page can show it now: steps whose section exists, in order."""
    return [s for s in tour_steps() if s["section"] in sections]


def active() -> bool:
    return bool(st.session_state.get(state.PRESENTER, False))


def _sections(model_ready: bool) -> tuple[str, ...]:
    base = MODEL_SECTIONS if model_ready else REPLAY_SECTIONS
    # the follow-up's step only while the run on screen is a follow-up that kept the cache
    values = follow_up.result_values(state.current_run())
    return (*base, "follow_up") if values and "scratch" in values else base


def _index(steps: list[dict[str, Any]]) -> int:
    if state.TOUR_STEP not in st.session_state:  # a link's page opens the tour at that section
        page = st.session_state.get(state.PAGE, "live")
        st.session_state[state.TOUR_STEP] = next((i for i, s in enumerate(steps) if s["section"] == page), 0)
    return max(0, min(int(st.session_state[state.TOUR_STEP]), len(steps) - 1))


def _move(delta: int, n: int) -> None:
    st.session_state[state.TOUR_STEP] = max(0, min(int(st.session_state.get(state.TOUR_STEP, 0)) + delta, n - 1))


def current_step(model_ready: bool) -> dict[str, Any] | None:
    steps = steps_for(_sections(model_ready))
    return steps[_index(steps)] if steps else None


def render_header() -> None:
    """The presenter toggle and the share box (the page puts them beside its title); in presenter
    mode, the CSS too."""
    a, b = st.columns(2, vertical_alignment="center")
    a.toggle("Presenter mode", key=state.PRESENTER, help="Large type, minimal chrome, guided tour. "
             "Keys: Space play/pause · ← → step · PageDown/PageUp or N/P: tour")
    with b:
        link.render_share_box()
    if active():
        st.markdown(CSS, unsafe_allow_html=True)
        _keys_component(key="pd-tour-keys", data={}, height="content")


def render_tour(model_ready: bool) -> None:
    """The current tour step with Previous / Next; its section becomes the link's page."""
    if not active():
        return
    steps = steps_for(_sections(model_ready))
    if not steps:
        return
    i = _index(steps)
    step = steps[i]
    # share_links turns "live" into "replay" for a recording; a follow-up is not in a link: its step opens live
    st.session_state[state.PAGE] = "live" if step["section"] == "follow_up" else step["section"]
    run = state.current_run()
    values = lesson.run_values(run.id, list(run.events), run.ctx) if run is not None and run.ctx is not None else {}
    values = {**values, **{f"fu_{k}": v for k, v in (follow_up.result_values(run) or {}).items()}}
    text = lesson.fill(step["text"], values)
    with st.container(key="pd_tour"):
        st.markdown(f"### {step['title']}")
        st.markdown(text)
        c1, c2, c3 = st.columns([1, 1, 3], vertical_alignment="center")
        c1.button("◀ Previous", key="pd_tour_prev", disabled=i == 0, on_click=_move, args=(-1, len(steps)),
                  width="stretch")
        c2.button("Next ▶", key="pd_tour_next", disabled=i == len(steps) - 1, on_click=_move,
                  args=(1, len(steps)), type="primary", width="stretch")
        c3.caption(f"Tour step {i + 1} of {len(steps)} · look at: {step.get('look_at', 'the charts')} · "
                   "keys: Space play/pause · ← → step · PageDown/PageUp or N/P tour")


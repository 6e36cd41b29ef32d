"""Shareable links: the address bar always holds the view (page, prompt, settings, presenter mode).

At a session's first run the URL's query parameters are parsed (core.share, which treats them as
untrusted) and written into the widgets' session state before any widget exists; a parameter that
cannot be used falls back to its default with a notice. After every full run the widgets' values
go back into the URL (only those that differ from the defaults), so copying the address bar
reproduces the view. A bundled recording on screen is named with an extra `trace` key.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import streamlit as st

from app.shared import replay
from app.shared.text import plain
from app.views.live import recordings, state
from core.share import DEFAULTS, link_notices, parse_query_params, to_query_params

if TYPE_CHECKING:
    from app.shared.runs import Run

TRACE_KEY = "trace"  # not part of core.share: names a bundled recording, ignored by other readers
RECOVERED_KEY = "recovered"  # added by live.js when it reloads a page that went blank
RECOVERED_NOTICE = ("This page stopped drawing and was reloaded; your prompt and settings were kept. "
                    "A run that was under way is not shown again: press Generate to start a new one.")
_TRACE_NAME = re.compile(r"[a-z0-9-]{1,40}")

# ViewParams field -> the widget key holding it
WIDGET_KEYS = {"prompt": state.PROMPT, "max_new_tokens": state.MAX_NEW, "temperature": state.TEMPERATURE,
               "top_k": state.TOP_K, "top_p": state.TOP_P, "seed": state.SEED, "cache": state.CACHE,
               "presenter": state.PRESENTER, "page": state.PAGE}


def _raw_params() -> dict[str, list[str]]:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def apply_link_once() -> None:
    """First run of a session: the link's values into the widgets (before they are drawn)."""
    if st.session_state.get(state.LINK_APPLIED):
        return
    st.session_state[state.LINK_APPLIED] = True
    raw = _raw_params()
    view, notices = parse_query_params(raw)
    for field, key in WIDGET_KEYS.items():
        st.session_state[key] = getattr(view, field)
    trace = _bundled_from(raw, notices)
    if RECOVERED_KEY in raw:
        notices.insert(0, RECOVERED_NOTICE)
    if view.page == "replay" or trace:
        recordings.play_bundled(trace)
    st.session_state[state.LINK_NOTICES] = notices


def _bundled_from(raw: dict[str, list[str]], notices: list[str]) -> str | None:
    values = raw.get(TRACE_KEY) or []
    if not values:
        return None
    name = values[-1].strip().lower()
    if _TRACE_NAME.fullmatch(name) and name in replay.bundled_names():
        return name
    notices.append(f"Link parameter '{TRACE_KEY}': not one of the bundled recordings "
                   f"({', '.join(replay.bundled_names())}); showing the default one instead.")
    return None


def show_notices() -> None:
    """The link's problems, each as plain text (core.share never quotes unsafe values)."""
    for notice in st.session_state.get(state.LINK_NOTICES) or []:
        st.info(plain(notice), icon=":material/link:")


def current_view() -> Any:
    """The ViewParams the widgets hold now (unset widgets at their defaults)."""
    values = {}
    for field, key in WIDGET_KEYS.items():
        if key in st.session_state:
            values[field] = st.session_state[key]
    view = DEFAULTS
    for field, value in values.items():
        with contextlib.suppress(TypeError, ValueError):
            view = replace(view, **{field: type(getattr(DEFAULTS, field))(value)})
    return view


def link_params() -> dict[str, str]:
    view = current_view()
    run = state.current_run()
    bundled = _bundled_name(run)
    if bundled and view.page in ("live", "replay"):
        view = replace(view, page="replay")
    elif view.page == "replay" and not bundled:
        view = replace(view, page="live")
    params = to_query_params(view)
    if bundled and bundled != "sky-blue":
        params[TRACE_KEY] = bundled
    return params


def _bundled_name(run: Run | None) -> str | None:
    return run.bundled_name if run is not None else None


def sync_url() -> None:
    """Write the view into the address bar (only when it changed, so history stays quiet)."""
    params = link_params()
    current = {key: st.query_params.get(key) for key in st.query_params}
    if current != params:
        st.query_params.from_dict(params)


def share_url() -> str:
    base = ""
    try:
        base = (st.context.url or "").split("?", 1)[0]
    except Exception:
        base = ""
    query = urlencode(link_params())
    return base + ("?" + query if query else "")


def render_share_box() -> None:
    """A 'Share this view' popover: the link, with a copy button, and what it cannot carry."""
    with st.popover("Share this view", icon=":material/link:", help="A link that reopens this page with this prompt and settings"):
        st.code(share_url(), language=None, wrap_lines=True)
        st.caption("The copy icon copies it; the address bar holds the same link.")
        for notice in link_notices(current_view()):
            st.caption(notice)
        run = state.current_run()
        if run is not None and run.replay and not run.bundled_name:
            st.caption("A trace you uploaded is not in the link: save it (JSON) and share the file.")

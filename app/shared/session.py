"""Reading and writing a session's state: the helpers every page's `state` module re-exports.

Streamlit reruns the script on every click (and, with fastReruns, interrupts the previous run),
so anything that must survive a rerun lives in `st.session_state`, under the keys each page names in
its own `state` module, and only through these helpers. Jobs run in their own threads
(app.shared.jobs); the session keeps a reference so any later script run or fragment pass can read them.
"""

from __future__ import annotations

from typing import Any

import streamlit as st


def get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def put(key: str, value: Any) -> None:
    st.session_state[key] = value


def job(key: str):
    return st.session_state.get(key)


def set_job(key: str, job) -> None:
    old = st.session_state.get(key)
    if old is not None and old is not job and old.active:
        old.stop()
    st.session_state[key] = job

"""The one model shared by every browser session, behind `st.cache_resource`.

Runs take a lock: the model and torch's single thread are one resource, and two interleaved
runs would each measure the other's work. Waiting readers see that they are queued.
"""

from __future__ import annotations

import threading

import streamlit as st

RUN_LOCK = threading.Lock()


@st.cache_resource(show_spinner=False)
def get_model():
    """Load the default model once per server process (preparing it on first use)."""
    from core.model import load_default

    return load_default()

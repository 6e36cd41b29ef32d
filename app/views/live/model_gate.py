"""Wait for the model briefly, or show that it is still coming, so the page never depends on it.

The model loads once per server in a background thread (app.shared.model.model_loader, shared by
every session). When a prepared copy is on disk, loading takes seconds and the page waits for it behind
a spinner as before. When the model must first be prepared (or fetched from the hub), the page
does not wait: it replays a bundled recording at once with a banner, and a small fragment reruns
the page when the model is ready. If the model cannot load at all, the replay stays, with a banner
saying why. `model_state()` is what the page asks.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from app.shared.model import model_loader, retry_model_load
from core import prepare, settings
from core.settings import force_replay_wait

QUICK_WAIT_S = 180.0  # a prepared copy on disk: wait for it (a cold torch import can take a while)
SLOW_WAIT_S = 1.0  # preparing or fetching first: show the recording almost at once
POLL_S = 1.0


def expect_quick() -> bool:
    """True when the model is on disk ready to load (seconds), False when it must be prepared first."""
    if force_replay_wait():  # tests: pretend the model is slow to prepare
        return False
    try:
        if settings.local_model_dir() is not None:
            return True
        if settings.model_source() == "hub":
            return False
        return prepare.verify_prepared(prepare.prepared_dir()) is None
    except Exception:
        return False


def model_state() -> tuple[str, Any]:
    """("ready", loaded) | ("loading", None) | ("failed", message). Waits briefly when loading is quick."""
    loader = model_loader()
    if not loader.done.is_set():
        wait = QUICK_WAIT_S if expect_quick() else SLOW_WAIT_S
        with st.spinner("Loading the model (the first start of a server prepares it once)…"):
            loader.done.wait(wait)
    return loader.state()


def render_wait_or_retry(status: str) -> None:
    """Under the banner: the preparation's progress while loading, a retry button after a failure."""
    if status == "loading":
        watch_until_ready()
    else:
        st.button("Try loading the model again", key="pd_model_retry", on_click=retry_model_load)


def watch_until_ready() -> None:
    """A fragment that polls the loader and reruns the whole page once the model is ready (or failed)."""
    st.fragment(_watch_body, run_every=POLL_S)()


def _watch_body() -> None:
    loader = model_loader()
    elapsed = time.monotonic() - loader.started
    if loader.done.is_set():
        st.rerun()
    st.caption(f"Preparing the model: {elapsed:.0f} s so far. The page switches to the live model by itself "
               "when it is ready; the recording keeps playing meanwhile.")

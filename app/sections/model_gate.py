"""Load the model in the background, so the page never depends on it to show something real.

The model loads once per server in a thread (app.model_service.get_model, cached for every
session). When a prepared copy is on disk, loading takes seconds and the page waits for it behind
a spinner as before. When the model must first be prepared (or fetched from the hub), the page
does not wait: it replays a bundled recording at once with a banner, and a small fragment reruns
the page when the model is ready. If the model cannot load at all, the replay stays, with a banner
saying why. `model_state()` is what the page asks.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import streamlit as st

QUICK_WAIT_S = 180.0  # a prepared copy on disk: wait for it (a cold torch import can take a while)
SLOW_WAIT_S = 1.0  # preparing or fetching first: show the recording almost at once
POLL_S = 1.0


class ModelLoader:
    """One background load of the default model; `loaded` or `error` once `done` is set."""

    def __init__(self) -> None:
        self.loaded: Any = None
        self.error: str | None = None
        self.done = threading.Event()
        self.started = time.monotonic()
        threading.Thread(target=self._main, name="pdlab-model-load", daemon=True).start()

    def _main(self) -> None:
        try:
            from app.services.model import get_model

            self.loaded = get_model()
        except Exception as exc:  # shown on the page as a banner, never a traceback
            self.error = f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)
        finally:
            self.done.set()


@st.cache_resource(show_spinner=False)
def _loader() -> ModelLoader:
    return ModelLoader()


def retry() -> None:
    """Forget a failed load so the next page run tries again (a 'try again' button)."""
    _loader.clear()


def expect_quick() -> bool:
    """True when the model is on disk ready to load (seconds), False when it must be prepared first."""
    if os.environ.get("PDLAB_FORCE_REPLAY_WAIT"):  # tests: pretend the model is slow to prepare
        return False
    try:
        from core import prepare, settings

        if settings.local_model_dir() is not None:
            return True
        if settings.model_source() == "hub":
            return False
        return prepare.verify_prepared(prepare.prepared_dir()) is None
    except Exception:
        return False


def model_state() -> tuple[str, Any]:
    """("ready", loaded) | ("loading", None) | ("failed", message). Waits briefly when loading is quick."""
    loader = _loader()
    if not loader.done.is_set():
        wait = QUICK_WAIT_S if expect_quick() else SLOW_WAIT_S
        with st.spinner("Loading the model (the first start of a server prepares it once)…"):
            loader.done.wait(wait)
    if not loader.done.is_set():
        return "loading", None
    if loader.error is not None or loader.loaded is None:
        return "failed", loader.error or "the model loader returned nothing"
    return "ready", loader.loaded


def watch_until_ready() -> None:
    """A fragment that polls the loader and reruns the whole page once the model is ready (or failed)."""
    st.fragment(_watch_body, run_every=POLL_S)()


def _watch_body() -> None:
    loader = _loader()
    elapsed = time.monotonic() - loader.started
    if loader.done.is_set():
        st.rerun()
    st.caption(f"Preparing the model: {elapsed:.0f} s so far. The page switches to the live model by itself "
               "when it is ready; the recording keeps playing meanwhile.")

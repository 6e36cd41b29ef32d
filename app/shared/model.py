"""Process-wide resources shared by every browser session: the model, the run queue, the ceilings.

`st.cache_resource` makes each one a singleton per server process. The model is loaded once; the
queue serialises all model work (see app.shared.jobs); the calibrated ceilings are measured once per
machine by core (and cached on disk by it).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Any

import streamlit as st
from streamlit import config

from app.shared.context import Ceilings
from app.shared.jobs import ModelJob, RunQueue
from core.calibrate import resolve_hardware
from core.model import load_default
from core.predictor import default_annotator
from core.runner import warm_up

_ceilings_lock = threading.Lock()  # held by the job that measures, for as long as it measures
_calibration_start_lock = threading.Lock()  # only ever held for a moment: script threads take it
_ceilings: Ceilings | None = None


@st.cache_resource(show_spinner=False)
def get_model():
    """Load the default model once per server process (preparing it on first use, in a child process:
    the conversion's transient heap, about 800 MB, never becomes the server's)."""
    loaded = load_default(prepare_in_child=True)
    warm_up(loaded)  # before any reader's run: the first forward's one-time costs stay out of their TTFT
    _keep_gc_off_the_model()
    return loaded


def _keep_gc_off_the_model() -> None:
    """Stop Python's garbage collector from stalling generation.

    Streamlit runs a full `gc.collect()` after every script run, fragment reruns included; with
    torch and transformers loaded that walks hundreds of thousands of objects while holding the GIL
    that the model thread needs between kernels, so frequent fragment passes made decode steps
    many times slower. So the long-lived objects loaded so far are frozen out of collection, and
    the per-run collection is switched off (the live view makes no cycles worth it).
    """
    gc.collect()
    gc.freeze()
    # an option this Streamlit may not have: freezing alone keeps collections short
    with contextlib.suppress(Exception):
        config.set_option("runner.postScriptGC", False)


@st.cache_resource(show_spinner=False)
def get_queue() -> RunQueue:
    return RunQueue()


def get_ceilings() -> Ceilings:
    """This machine's calibrated ceilings. Call from a job holding the queue: calibrating measures
    the machine, and must not run beside a generation. Missing core pieces give empty ceilings."""
    global _ceilings
    with _ceilings_lock:
        if _ceilings is None:
            _ceilings = _measure_ceilings()
        return _ceilings


def cached_ceilings() -> Ceilings | None:
    """The ceilings if some job already measured them; never measures (safe in the script thread)."""
    return _ceilings


def _measure_ceilings() -> Ceilings:
    try:
        hw = resolve_hardware("host", measure=True)  # runs inside a queued job: measuring is allowed
        cal = hw.calibration or {}
        return Ceilings(bandwidth=float(hw.bandwidth), peak_flops=float(hw.peak_flops.get("fp32") or 0) or None,
                        copy_bandwidth=cal.get("bandwidth_copy_bytes_per_s"), label=f"{hw.label} · {hw.variant}")
    except Exception as exc:  # calibration is optional: the page then shows no roof
        return Ceilings(label=f"not calibrated ({type(exc).__name__}: {exc})")


def make_annotator(loaded: Any):
    """core.predictor's annotator (cost + predicted time per event), or None for a model core cannot price.
    Called from queued jobs only, so it may calibrate the machine if no calibration is cached."""
    try:
        return default_annotator(loaded, measure=True)
    except Exception:  # a model core cannot price: the page shows measured numbers only
        return None


class CalibrationJob(ModelJob):
    """Measures the ceilings (and warms core's predictor) once, queued like any run, right after the
    model loads, so a reader's first Generate rarely waits for it. Never abandoned: it serves everyone."""

    kind = "calibrate"

    def __init__(self, queue: RunQueue, loaded: Any) -> None:
        super().__init__(queue)
        self.loaded = loaded

    def should_stop(self) -> bool:
        return False

    def work(self) -> None:
        self.progress = "measuring this machine's ceilings (once per server)…"
        get_ceilings()

        try:
            from core.fitdata import ensure_fitted

            self.progress = "fitting the latency model to this machine (once per server, about 30 s)…"
            ensure_fitted(self.loaded)
        except Exception:  # predictions then use the unfitted roofline, still labelled as predictions
            pass

        make_annotator(self.loaded)


_calibration_job: CalibrationJob | None = None


def start_calibration(loaded: Any) -> None:
    """Queue the once-per-server calibration. Called from every script run, so it must never wait
    on the measuring itself: behind the ceilings' lock every page froze for the whole calibration
    (38 s on a 2-core AVX2 machine), and a Generate pressed then went unpolled for that long and was
    abandoned."""
    global _calibration_job
    with _calibration_start_lock:
        if _calibration_job is None:
            _calibration_job = CalibrationJob(get_queue(), loaded).start()


class ModelLoader:
    """One background load of the default model; `loaded` or `error` once `done` is set."""

    def __init__(self) -> None:
        global _latest_loader
        self.loaded: Any = None
        self.error: str | None = None
        self.done = threading.Event()
        self.started = time.monotonic()
        _latest_loader = self
        threading.Thread(target=self._main, name="pdlab-model-load", daemon=True).start()

    def _main(self) -> None:
        try:
            self.loaded = get_model()
        except Exception as exc:  # shown on the page as a banner, never a traceback
            self.error = f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)
        finally:
            self.done.set()

    def state(self) -> tuple[str, Any]:
        """("loading", None), ("failed", the error) or ("ready", the loaded model): the one reading of
        the load that the page (app.views.live.model_gate) and the /pdlab/model route both give."""
        if not self.done.is_set():
            return "loading", None
        if self.error is not None or self.loaded is None:
            return "failed", self.error or "the model loader returned nothing"
        return "ready", self.loaded


_latest_loader: ModelLoader | None = None  # the last load started, read without starting one


def model_load_state() -> dict[str, str]:
    """The model's state for the server's /pdlab/model route, without starting a load: "idle" (none
    started), "loading", "ready" or "failed" (with the error)."""
    loader = _latest_loader
    if loader is None:
        return {"state": "idle"}
    state, detail = loader.state()
    return {"state": state, "error": detail} if state == "failed" else {"state": state}


@st.cache_resource(show_spinner=False)
def model_loader() -> ModelLoader:
    """The server's one background load of the default model: started when the server starts (the
    lifespan hook in app/streamlit_app.py), or by the next page that asks after a failed load's retry."""
    return ModelLoader()


def retry_model_load() -> None:
    """Forget a failed load so the next page run tries again (a 'try again' button)."""
    model_loader.clear()

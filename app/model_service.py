"""Process-wide resources shared by every browser session: the model, the run queue, the ceilings.

`st.cache_resource` makes each one a singleton per server process. The model is loaded once; the
queue serialises all model work (see app.jobs); the calibrated ceilings are measured once per
machine by core (and cached on disk by it).
"""

from __future__ import annotations

import threading
from typing import Any

import streamlit as st

from app.context import Ceilings
from app.jobs import RunQueue

_ceilings_lock = threading.Lock()
_ceilings: Ceilings | None = None


@st.cache_resource(show_spinner=False)
def get_model():
    """Load the default model once per server process (preparing it on first use)."""
    from core.model import load_default

    return load_default()


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
        from core.hardware import load_hardware

        hw = load_hardware("host")
        cal = hw.calibration or {}
        return Ceilings(bandwidth=float(hw.bandwidth), peak_flops=float(hw.peak_flops.get("fp32") or 0) or None,
                        copy_bandwidth=cal.get("bandwidth_copy_bytes_per_s"), label=f"{hw.label} · {hw.variant}")
    except Exception as exc:  # calibration is optional: the page then shows no roof
        return Ceilings(label=f"not calibrated ({type(exc).__name__}: {exc})")


def make_annotator(loaded: Any, settings: Any):
    """core.predictor's annotator (cost + predicted time per event), or None when core has none."""
    try:
        from core.predictor import default_annotator
    except ImportError:
        return None
    try:
        return default_annotator(loaded, settings)
    except Exception:  # a model core cannot price: the page shows measured numbers only
        return None

"""Save the run on screen: its trace (JSON, reloadable here or with the CLI) and its per-step table (CSV).

The charts keep Plotly's own PNG export in the toolbar shown on hover (the camera icon), so images need
nothing here. Downloads are offered only for a run that has ended (a live run is still growing).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import streamlit as st

from core.export import trace_filename, trace_to_csv
from core.trace import Trace


def _finished(run: Any) -> bool:
    return run is not None and not getattr(run, "active", False) and bool(getattr(run, "events", None))


def export_payloads(run: Any) -> dict[str, tuple[str, str]] | None:
    """{"json": (file name, text), "csv": (file name, text)} for a finished run, else None."""
    if not _finished(run):
        return None
    trace = run.trace()
    return {kind: (trace_filename(trace, kind), file_text(trace, kind)) for kind in ("json", "csv")}


def file_text(trace: Trace, kind: str) -> str:
    """The saved file's text: the trace as JSON (reloadable) or its per-step table as CSV."""
    return trace.to_json() if kind == "json" else trace_to_csv(trace)


# A finished run's file texts, by (run id, events, kind): serialising a trace took about half of a full
# pass of the live page, so each is built once per run, not once per pass. The buttons get the text
# itself, not a callable: Streamlit keeps a file built on the click (its deferred download) mapped to no
# session, so the end of every script run, a polling fragment's included, counts it orphaned and the
# second deletes it. With the page polling every second (a model still loading, a comparison running)
# a browser slow to fetch it met a 404 and no download: a flake of the save-and-reload test.
_TEXTS: OrderedDict[tuple[int, int, str], str] = OrderedDict()
_TEXTS_KEPT = 8
_texts_lock = threading.Lock()


def cached_text(run: Any, kind: str) -> str:
    """file_text of a finished run, built once per run (the last _TEXTS_KEPT kept)."""
    key = (int(run.id), len(run.events), kind)
    with _texts_lock:
        if key in _TEXTS:
            _TEXTS.move_to_end(key)
            return _TEXTS[key]
    text = file_text(run.trace(), kind)
    with _texts_lock:
        _TEXTS[key] = text
        while len(_TEXTS) > _TEXTS_KEPT:
            _TEXTS.popitem(last=False)
    return text


def render(run: Any, key_prefix: str = "export") -> None:
    """The two download buttons, their files built once per run (cached_text says why not on the click)."""
    if not _finished(run):
        st.caption("Downloads appear here when a run has finished.")
        return
    c1, c2, c3 = st.columns([1, 1, 2], vertical_alignment="center")
    trace = run.trace()
    c1.download_button("Save trace (JSON)", cached_text(run, "json"),
                       file_name=trace_filename(trace, "json"), mime="application/json",
                       key=f"{key_prefix}_dl_json", on_click="ignore", icon=":material/download:",
                       help="Every step with measured and predicted figures; load it here later to replay it.")
    c2.download_button("Per-step table (CSV)", cached_text(run, "csv"),
                       file_name=trace_filename(trace, "csv"), mime="text/csv",
                       key=f"{key_prefix}_dl_csv", on_click="ignore", icon=":material/table:",
                       help="One row per forward pass; column names say measured, predicted or computed. "
                            "Chart images: each chart's camera icon.")


"""Save the run on screen: its trace (JSON, reloadable here or with the CLI) and its per-step table (CSV).

The charts keep Plotly's own PNG export in the toolbar shown on hover (the camera icon), so images need
nothing here. Downloads are offered only for a run that has ended (a live run is still growing).
"""

from __future__ import annotations

import functools
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


def render(run: Any, key_prefix: str = "export") -> None:
    """The two download buttons. Their files are built when clicked (Streamlit's deferred download),
    not on every pass: serialising a run's trace took about half of each full pass of the live page."""
    if not _finished(run):
        st.caption("Downloads appear here when a run has finished.")
        return
    c1, c2, c3 = st.columns([1, 1, 2], vertical_alignment="center")
    trace = run.trace()
    c1.download_button("Save trace (JSON)", functools.partial(file_text, trace, "json"),
                       file_name=trace_filename(trace, "json"), mime="application/json",
                       key=f"{key_prefix}_dl_json", on_click="ignore", icon=":material/download:",
                       help="Every step with measured and predicted figures; load it here later to replay it.")
    c2.download_button("Per-step table (CSV)", functools.partial(file_text, trace, "csv"),
                       file_name=trace_filename(trace, "csv"), mime="text/csv",
                       key=f"{key_prefix}_dl_csv", on_click="ignore", icon=":material/table:",
                       help="One row per forward pass; column names say measured, predicted or computed. "
                            "Chart images: each chart's camera icon.")


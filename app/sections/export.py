"""Save the run on screen: its trace (JSON, reloadable here or with the CLI) and its per-step table (CSV).

The charts keep Plotly's own PNG export in the toolbar shown on hover (the camera icon), so images need
nothing here. Downloads are offered only for a run that has ended (a live run is still growing).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.export import trace_filename, trace_to_csv


def export_payloads(run: Any) -> dict[str, tuple[str, str]] | None:
    """{"json": (file name, text), "csv": (file name, text)} for a finished run, else None."""
    if run is None or getattr(run, "active", False) or not getattr(run, "events", None):
        return None
    trace = run.trace()
    return {"json": (trace_filename(trace, "json"), trace.to_json()),
            "csv": (trace_filename(trace, "csv"), trace_to_csv(trace))}


def render(run: Any, key_prefix: str = "export") -> None:
    payloads = export_payloads(run)
    if payloads is None:
        st.caption("Downloads appear here when a run has finished.")
        return
    c1, c2, c3 = st.columns([1, 1, 2], vertical_alignment="center")
    name, text = payloads["json"]
    c1.download_button("Save trace (JSON)", text, file_name=name, mime="application/json",
                       key=f"{key_prefix}_dl_json", on_click="ignore", icon=":material/download:",
                       help="Every step with measured and predicted figures; load it here later to replay it.")
    name, text = payloads["csv"]
    c2.download_button("Per-step table (CSV)", text, file_name=name, mime="text/csv",
                       key=f"{key_prefix}_dl_csv", on_click="ignore", icon=":material/table:",
                       help="One row per forward pass; column names say measured, predicted or computed.")
    c3.caption("Chart images: hover over a chart; the camera icon that appears at its top right saves a PNG.")

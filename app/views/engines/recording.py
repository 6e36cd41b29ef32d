"""The bundled recording, played where no engine answers: every engine setting it holds, side by side
on one time axis, each with its measured ticks, the simulator's ticks under them, the engine's
metrics and the errors, labelled as a recording with its date, engine, version and machine.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared.text import plain
from app.views.engines import numbers, recorded, result, tpot


def provenance(bundle: dict[str, Any]) -> str:
    """Where and when the recording was made, in one line."""
    m = bundle.get("machine") or {}
    runs = [e["run"] for e in bundle["settings"]]
    versions = sorted({r.engine_version for r in runs if r.engine_version})
    machine = " ".join(str(x) for x in (f"{m['cores']}-core" if m.get("cores") else "", m.get("cpu", ""),
                                         m.get("system", "")) if x) or "unknown"
    return (f"A **recording**, not a live run: measured on {plain(numbers.when(str(bundle.get('recorded_at', ''))))} "
            f"with {plain(', '.join(versions) or 'an engine')} serving {plain(runs[0].model)}, on a "
            f"{plain(machine)} machine. Its simulated rows come from the simulator fitted to that engine on that "
            "machine just before.")


def render(key: str = "lb_rec") -> None:
    bundle, problem = recorded.load()
    if bundle is None:
        st.warning(f"No recording to show: {problem}.")
        return
    entries = bundle["settings"]
    st.markdown(provenance(bundle))
    if bundle.get("note"):
        st.caption(f"Note kept with the recording: {plain(str(bundle['note']))}")
    st.markdown(numbers.verdict([(e["run"], e["simulated"]) for e in entries]))
    x_max = result.x_range([(e["run"], e["simulated"]) for e in entries])
    cols = st.columns(len(entries), gap="large") if len(entries) > 1 else [st.container()]
    for k, (col, entry) in enumerate(zip(cols, entries, strict=True)):
        run = entry["run"]
        with col:
            st.subheader(plain(entry.get("label") or run.settings.get("label") or run.setting))
            fit = entry.get("fit") or {}
            st.caption(f"{numbers.status_line(run)} Run started {plain(numbers.when(run.started_at))} · "
                       f"{plain(run.engine_version)} · simulator fitted "
                       f"{plain(numbers.when(str(fit.get('fitted_at', ''))))}.")
            problem = numbers.failures(run)
            if problem:
                st.warning(plain(problem))
            result.show(run, entry["simulated"], entry.get("comparison"), f"{key}_{k}", x_max,
                               side_by_side=len(entries) == 1,
                               missing="This recording holds no simulation of its run.")
    tpot_rows = tpot.rows(bundle.get("tpot") or {})
    if tpot_rows:
        st.subheader("Why the engine decodes faster than this project's runner")
        st.caption("From the same recording: one stream, the same prompt, 48 tokens; TPOT measured, the bytes a "
                   "step moves computed by the cost model, bandwidth and time per layer computed from the two.")
        st.dataframe(tpot_rows, hide_index=True)
        st.markdown(tpot.story(bundle["tpot"]))

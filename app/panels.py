"""The on-demand panels: cache on/off comparison, batching, and "about this run".

Each experiment runs as a queued job (app.panel_jobs); a small fragment polls it while it runs
and the result stays in session state, so reruns and other clicks keep it on screen.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app import lesson, panel_figures, state
from app.model_service import cached_ceilings, get_queue

POLL_S = 0.5


def _job_status(job: Any) -> None:
    if job.status == "queued":
        pos = job.queue_position
        st.info(f"Waiting for another reader's run to finish ({pos} ahead of you in the queue)…")
    elif job.status == "running":
        st.info(f"Running: {job.progress}")
    elif job.status == "error":
        st.error(f"The experiment failed: {job.error}")
    elif job.status in ("stopped", "abandoned"):
        st.warning("The experiment was stopped before it finished; partial results are shown.")


def _poll(job: Any, finished_key: str) -> None:
    """Keep the job alive while it runs; one full rerun when it ends, to drop the fragment's timer."""
    if job is None:
        return
    if job.active:
        job.touch()
    elif state.get(finished_key) != job.id:
        state.put(finished_key, job.id)
        st.rerun()


def _every(key: str) -> float | None:
    job = state.job(key)
    return POLL_S if job is not None and job.active else None


def compare_panel(loaded: Any) -> None:
    st.fragment(_compare_body, run_every=_every(state.COMPARE))(loaded)


def batching_panel(loaded: Any) -> None:
    st.fragment(_batching_body, run_every=_every(state.BATCHING))(loaded)


def _compare_body(loaded: Any) -> None:
    from app.panel_jobs import CompareJob

    st.markdown("### Cache on or off: why the cache exists, and what its growth costs")
    run = state.current_run()
    job = state.job(state.COMPARE)
    c1, c2 = st.columns([1, 3])
    prompt_ids = run.prompt_ids if run is not None else None
    if c1.button("Compare cache modes", key="compare_go", disabled=prompt_ids is None or (job is not None and job.active)):
        n = run.settings.max_new_tokens
        job = CompareJob(get_queue(), loaded, prompt_ids, n).start()
        state.set_job(state.COMPARE, job)
        st.rerun()  # a full run re-creates this fragment with its poll timer
    c2.caption("Runs your last prompt three times with the same number of tokens (at most 32, EOS ignored): "
               "dynamic cache, static cache, and no cache at all. About 10–30 s on this machine."
               if prompt_ids is not None else "Generate once first: the comparison reuses your prompt.")
    if job is not None:
        _job_status(job)
        if job.result["modes"]:
            st.plotly_chart(panel_figures.compare_figure(job.result), key="compare_fig")
            with st.expander("Cache comparison as a table"):
                st.dataframe(pd.DataFrame(panel_figures.compare_rows(job.result)), hide_index=True)
        _poll(job, state.COMPARE_SEEN)


def _batching_body(loaded: Any) -> None:
    from app.panel_jobs import BATCH_SIZES, BatchJob

    st.markdown("### Batching: one decode step, many sequences")
    job = state.job(state.BATCHING)
    left, right = st.columns([3, 2], gap="large")
    with right:
        st.markdown(lesson.text("batching"))
        if st.button("Measure batch sizes " + ", ".join(map(str, BATCH_SIZES)), key="batch_go",
                     disabled=job is not None and job.active):
            job = BatchJob(get_queue(), loaded).start()
            state.set_job(state.BATCHING, job)
            st.rerun()
        st.caption("A short prompt, 8 decode steps per batch size, measured here and predicted by core. "
                   "About 10–20 s.")
    with left:
        if job is None:
            st.caption("Press the button to measure.")
            return
        _job_status(job)
        rows = job.result["rows"]
        if rows:
            st.plotly_chart(panel_figures.batching_figure(rows), key="batch_fig")
            with st.expander("Batching results as a table"):
                st.dataframe(pd.DataFrame(rows), hide_index=True)
        _poll(job, state.BATCHING_SEEN)


def about_panel(loaded: Any) -> None:
    import platform

    import plotly
    import torch
    import transformers

    run = state.current_run()
    info = loaded.info
    ceilings = cached_ceilings()
    rows = [
        ("model", info.id), ("weights source", info.weights_source), ("dtype", info.dtype),
        ("parameters", f"{info.params:,}" if info.params else "?"), ("torch threads", str(torch.get_num_threads())),
        ("cache mode of the last run", run.settings.cache if run is not None else "–"),
        ("context window", f"{loaded.context_window:,} tokens"),
        ("torch / transformers", f"{torch.__version__} / {transformers.__version__}"),
        ("streamlit / plotly", f"{st.__version__} / {plotly.__version__}"),
        ("python", platform.python_version()),
    ]
    if ceilings is not None:
        rows += [("machine", ceilings.label),
                 ("weight-stream bandwidth (calibrated)",
                  f"{ceilings.bandwidth / 1e9:.2f} GB/s" if ceilings.bandwidth else "not calibrated"),
                 ("matmul peak, fp32 (calibrated)",
                  f"{ceilings.peak_flops / 1e9:.1f} GFLOP/s" if ceilings.peak_flops else "not calibrated")]
        if ceilings.copy_bandwidth:
            rows.append(("copy bandwidth (calibrated)", f"{ceilings.copy_bandwidth / 1e9:.1f} GB/s"))
    else:
        rows.append(("calibrated ceilings", "measured before the first run"))
    with st.expander("About this run: model, weights, versions, this machine"):
        st.dataframe(pd.DataFrame(rows, columns=["what", "value"]), hide_index=True)

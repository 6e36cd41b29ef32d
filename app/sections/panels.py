"""The on-demand panels: cache on/off comparison, batching, and "about this run".

Each experiment runs as a queued job (app.panel_jobs); a small fragment polls it while it runs
and the result stays in session state, so reruns and other clicks keep it on screen.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app import state
from app.components import lesson, panel_figures
from app.sections.inputs import MAX_PROMPT_TOKENS
from app.services.experiments import BATCH_SIZES, BATCH_STEPS, COMPARE_DEFAULT_TOKENS, BatchJob, CompareJob
from app.services.model import cached_ceilings, get_queue
from core import perf
from core.runner import encode_prompt

POLL_S = 1.0  # a fragment pass costs the server CPU the measurement needs; a second is plenty


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


def _progress(job: Any, done: int, total: int) -> None:
    st.progress(min(1.0, done / total) if total else 0.0,
                text=f"{done} of {total} measured; the chart appears when all are done.")
    st.caption("Nothing is redrawn while it measures, so the browser does not compete with the model for the CPU.")


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
    with st.container(key="pd_panel_compare"):
        st.fragment(_compare_body, run_every=_every(state.COMPARE))(loaded)


def batching_panel(loaded: Any) -> None:
    with st.container(key="pd_panel_batching"):
        st.fragment(_batching_body, run_every=_every(state.BATCHING))(loaded)


def _compare_prompt(loaded: Any) -> tuple[list[int] | None, str]:
    """The prompt the comparison runs: the one in the prompt box (through the chat template when it is
    on), so it works before any Generate; (None, why) when the box is empty or the prompt too long."""
    text = str(state.get(state.PROMPT) or "")
    if not text.strip():
        return None, "Type a prompt above first: the comparison runs the prompt in the box."
    ids = encode_prompt(loaded, text, bool(state.get(state.CHAT, True)))
    if len(ids) > MAX_PROMPT_TOKENS:
        return None, f"The prompt is {len(ids):,} tokens; the comparison takes at most {MAX_PROMPT_TOKENS:,}."
    return ids, ""


def _compare_body(loaded: Any) -> None:
    st.markdown("### Cache on or off: why the cache exists, and what its growth costs")
    job = state.job(state.COMPARE)
    busy = job is not None and job.active
    left, right = st.columns([3, 2], gap="large")
    with right:
        st.markdown(
            "The same prompt is generated three ways, one forward of each in turn so any noise on the "
            "machine hits all three alike: with the **dynamic** cache (the default: it grows as tokens "
            "arrive), with a **static** cache (allocated for the whole run up front), and with **no cache**, "
            "where every step feeds the whole sequence through the model again. Without a cache the cost "
            "of a step grows with the sequence, so the run is capped at 32 tokens. The end-of-turn token "
            "is ignored so all three run equally long.")
        n = st.slider("Tokens to generate in each mode", 4, COMPARE_DEFAULT_TOKENS, COMPARE_DEFAULT_TOKENS,
                      key=state.COMPARE_TOKENS, disabled=busy)
        prompt_ids, why = _compare_prompt(loaded)
        if st.button("Compare cache modes", key=state.COMPARE_GO, disabled=prompt_ids is None or busy):
            job = CompareJob(get_queue(), loaded, prompt_ids, n).start()
            state.set_job(state.COMPARE, job)
            st.rerun()  # a full run re-creates this fragment with its poll timer
        st.caption(why or f"Runs the prompt in the box above ({len(prompt_ids)} tokens after the template). "
                          f"About {max(5, round(n * 0.5))} s on this machine.")
    with left:
        if job is None:
            st.caption("Press **Compare cache modes**: the chart of measured times appears here.")
            return
        _job_status(job)
        if job.active:  # no chart redraws while measuring: the browser would compete with the model
            _progress(job, sum(len(v) for v in job.result["modes"].values()), 3 * job.n_tokens)
        elif any(job.result["modes"].values()):
            st.plotly_chart(panel_figures.compare_figure(job.result), key="compare_fig")
            with st.expander("Cache comparison as a table"):
                st.dataframe(pd.DataFrame(panel_figures.compare_rows(job.result)), hide_index=True)
    if job is not None and not job.active:  # a summary of half the forwards would mislead: wait for all
        summary = panel_figures.compare_summary(job.result)
        if summary:
            st.markdown(summary)
    _poll(job, state.COMPARE_SEEN)


def _batching_body(loaded: Any) -> None:
    st.markdown("### Batching: one decode step, many sequences")
    job = state.job(state.BATCHING)
    left, right = st.columns([3, 2], gap="large")
    with right:
        st.markdown(lesson.text("batching"))
        if st.button("Measure batch sizes " + ", ".join(map(str, BATCH_SIZES)), key=state.BATCH_GO,
                     disabled=job is not None and job.active):
            job = BatchJob(get_queue(), loaded).start()
            state.set_job(state.BATCHING, job)
            st.rerun()
        st.caption(f"A short fixed prompt copied into every row, {BATCH_STEPS} decode steps per batch size "
                   "(median shown), measured here; the predictor (core) goes on to batch 128. About 15 s.")
    with left:
        if job is None:
            st.caption("Press the button to measure: the chart appears here.")
            return
        _job_status(job)
        if job.active:
            _progress(job, len(job.result["rows"]), len(job.batches))
        elif job.result["rows"]:
            st.plotly_chart(panel_figures.batching_figure(job.result), key="batch_fig")
            with st.expander("Batching results as a table"):
                st.dataframe(pd.DataFrame(job.result["rows"]), hide_index=True)
                if job.result.get("predicted"):
                    st.caption("The predictor alone, past the measured range:")
                    st.dataframe(pd.DataFrame(job.result["predicted"]), hide_index=True)
    summary = panel_figures.batching_summary(job.result) if not job.active else ""
    if summary:
        st.markdown(summary)
    _poll(job, state.BATCHING_SEEN)


def about_rows(loaded: Any, run: Any, ceilings: Any) -> list[tuple[str, str, str]]:
    """(what, value, where it comes from) for the "about this run" table."""
    import platform

    import plotly
    import torch
    import transformers

    info = loaded.info
    cfg = loaded.config
    source = {"gguf-q4_1-dequantised": "gguf-q4_1-dequantised: a 4-bit (Q4_1) GGUF copy shipped with the "
                                       "app, expanded to full-size numbers when loaded",
              "hub-original": "hub-original: the original weights from the Hugging Face hub",
              "local-folder": "local-folder: weights from a folder on this server",
              }.get(info.weights_source, info.weights_source)
    rows = [
        ("model", info.id, "configuration"),
        ("weights source", source, "configuration"),
        ("dtype of the weights", info.dtype, "configuration"),
        ("parameters", f"{info.params:,}" if info.params else "?", "counted from the loaded weights"),
        ("layers · query heads · KV heads · head size",
         f"{cfg.num_hidden_layers} · {cfg.num_attention_heads} · "
         f"{getattr(cfg, 'num_key_value_heads', cfg.num_attention_heads)} · "
         f"{perf.head_dim_from_config(cfg)}", "model config"),
        ("context window", f"{loaded.context_window:,} tokens", "model config"),
        ("torch threads", str(torch.get_num_threads()), "this server"),
        ("cache mode of your last run", run.settings.cache if run is not None else "no run yet", "your settings"),
        ("batch of your last run", str(run.settings.batch) if run is not None else "no run yet", "your settings"),
        ("torch / transformers", f"{torch.__version__} / {transformers.__version__}", "installed"),
        ("streamlit / plotly", f"{st.__version__} / {plotly.__version__}", "installed"),
        ("python", platform.python_version(), "installed"),
    ]
    if ceilings is not None:
        rows += [("machine", ceilings.label, "this server"),
                 ("weight-stream bandwidth",
                  f"{ceilings.bandwidth / 1e9:.2f} GB/s" if ceilings.bandwidth else "not calibrated",
                  "measured (calibration: matrix-vector products like a decode step's)"),
                 ("matmul peak, fp32",
                  f"{ceilings.peak_flops / 1e9:.1f} GFLOP/s" if ceilings.peak_flops else "not calibrated",
                  "measured (calibration: large matrix products)")]
        if ceilings.copy_bandwidth:
            rows.append(("copy bandwidth", f"{ceilings.copy_bandwidth / 1e9:.1f} GB/s",
                         "measured (calibration: a plain memory copy)"))
    else:
        rows.append(("calibrated ceilings", "measured once per server, before the first run", "—"))
    return rows


def about_panel(loaded: Any) -> None:
    rows = about_rows(loaded, state.current_run(), cached_ceilings())
    with st.expander("About this run: model, weights, versions, this machine's ceilings", key="pd_about"):
        st.table(pd.DataFrame(rows, columns=["what", "value", "source"]), hide_index=True)

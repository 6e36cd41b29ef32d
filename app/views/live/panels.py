"""The on-demand panels: cache on/off comparison, batching, and "about this run".

Each experiment runs as a queued job (app.views.live.jobs); a small fragment polls it while it
runs and the result stays in session state, so reruns and other clicks keep it on screen.

Before a reader measures, each experiment panel shows a result already: the last complete
measurement any reader made on this server, else a recording bundled with the app
(app.shared.experiment_results), with a line saying where and when it was measured. While the
reader's own job runs only its progress bar shows, the earlier result hidden: building and sending a
chart on every poll would take CPU from the measurement, and an old chart beside a progress bar
reads as the run in progress. The reader's finished run then replaces it.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from typing import Any

import pandas as pd
import streamlit as st

from app.shared import experiment_results as results
from app.shared.model import cached_ceilings, get_queue
from app.views.live import lesson, panel_figures, panel_text, presenter, sections, state
from app.views.live.jobs import (
    BATCH_PROMPT,
    BATCH_SIZES,
    BATCH_STEPS,
    COMPARE_DEFAULT_TOKENS,
    BatchJob,
    CompareJob,
    roofline_batch_with,
)
from app.views.live.settings import MAX_PROMPT_TOKENS
from app.views.live.shown import gbs_text, sig3
from core import perf
from core.runner import encode_prompt

NO_MODEL = ("The live model is not ready on this server yet, so the button waits for it; "
            "the recording shown here stands in meanwhile.")
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
    st.caption("Nothing is drawn while it measures (the earlier result is hidden meanwhile), so the browser does "
               "not compete with the model for the CPU.")


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


def _wall_clock(monotonic_s: float | None) -> dt.datetime:
    now = dt.datetime.now(dt.UTC)
    return now if monotonic_s is None else now - dt.timedelta(seconds=max(0.0, time.monotonic() - monotonic_s))


def _shown(kind: str, job: Any, measured: bool) -> results.Measurement | None:
    """What the panel shows: the reader's own ended run when it measured anything, else the server's last
    measurement, else the bundled recording (None when there is none of these)."""
    if job is not None and not job.active and measured:
        return results.yours(kind, job.result, _wall_clock(job.finished))
    return results.shown_before_press(kind)


def _source_line(shown: results.Measurement, key: str, note: str = "", can_measure: bool = True) -> None:
    """Where and when the shown result was measured, in one line (and a note under it)."""
    line = results.label(shown, can_measure=can_measure)
    with st.container(key=key):
        if shown.source == "bundled":  # never mistaken for the reader's own run: full-size, with the mark
            st.markdown(f":violet-badge[recording] **{line}**")
            if note:
                st.caption(note)
        else:
            st.caption(f"**{line}**" + (f"  \n{note}" if note else ""))


def compare_panel(loaded: Any | None, values: dict[str, str] | None = None) -> None:
    """`loaded` is None while the model is missing: the panel then shows its recording, button disabled.
    `values`: the lesson's numbers, for the cache question's answer beside the chart (None: no answer)."""
    with st.container(key="pd_panel_compare"):
        st.fragment(_compare_body, run_every=_every(state.COMPARE))(loaded, values)


def batching_panel(loaded: Any | None) -> None:
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


def _compare_body(loaded: Any, values: dict[str, str] | None = None) -> None:
    if values is None:  # shown without its section's heading and answer (presenter mode): it names itself
        st.markdown("#### Cache on or off: why the cache exists, and what its growth costs")
    job = state.job(state.COMPARE)
    busy = job is not None and job.active
    left, right = st.columns([3, 2], gap="large")
    answer_slot = right.empty()
    method = (
        "The same prompt is generated three ways, one forward of each in turn so any noise on the "
        "machine hits all three alike: with the **dynamic** cache (the default: it grows as tokens "
        "arrive), with a **static** cache (allocated for the whole run up front), and with **no cache**, "
        "where every step feeds the whole sequence through the model again. Without a cache the cost "
        "of a step grows with the sequence, so the run is capped at 32 tokens. The end-of-turn token "
        "is ignored so all three run equally long.")
    with right:
        n = st.slider("Tokens to generate in each mode", 4, COMPARE_DEFAULT_TOKENS, COMPARE_DEFAULT_TOKENS,
                      key=state.COMPARE_TOKENS, disabled=busy)
        prompt_ids, why = _compare_prompt(loaded) if loaded is not None else (None, NO_MODEL)
        if st.button("Compare cache modes", key=state.COMPARE_GO, disabled=prompt_ids is None or busy):
            job = CompareJob(get_queue(), loaded, prompt_ids, n).start()
            state.set_job(state.COMPARE, job)
            st.rerun()  # a full run re-creates this fragment with its poll timer
        st.caption(why or f"About {max(5, round(n * 0.3))} s, on the prompt in the box ({len(prompt_ids)} tokens).")
    shown = None
    with left:
        if job is not None:
            _job_status(job)
        if busy:  # no chart redraws while measuring: the browser would compete with the model
            _progress(job, sum(len(v) for v in job.result["modes"].values()), 3 * job.n_tokens)
        else:
            shown = _shown("compare", job, job is not None and any(job.result["modes"].values()))
            if shown is None:
                st.caption("Press **Compare cache modes**: the chart of measured times appears here.")
            else:
                _source_line(shown, "pd_compare_source", "", loaded is not None)
                where = "the recording machine" if shown.source == "bundled" else "this machine"
                st.plotly_chart(panel_figures.compare_figure(shown.result, COMPARE_WHOSE[shown.source], where),
                                key="compare_fig")
                with st.expander("Table: the comparison"):
                    st.dataframe(pd.DataFrame(panel_figures.compare_rows(shown.result)), hide_index=True)
    if values is not None:  # the answer is this run's: its own steps and prefill, not the comparison's
        with answer_slot.container():
            sections.render_answer("cache", values)
    if shown is not None:  # a summary of half the forwards would mislead: none while measuring
        summary = panel_text.compare_summary(shown.result, recorded=shown.source == "bundled")
        beside = panel_text.recording_beside_run(_compare_pairs(shown, _live_run()))
        # a recording set beside the reader's run carries its own caveat (recording_beside_run)
        caveat = results.RECORDING_CAVEAT if shown.source == "bundled" and not beside else ""
    with right, st.expander("How we know: the comparison"):
        st.markdown(method)
        if shown is not None:
            st.caption(_compare_prompt_note(shown))
            st.markdown("\n\n".join(t for t in (summary, beside, caveat) if t))
    _poll(job, state.COMPARE_SEEN)


COMPARE_WHOSE = {"bundled": "The recording's prompt", "server": "A reader's prompt", "yours": "Your prompt"}


def _compare_prompt_note(shown: results.Measurement) -> str:
    """Which prompt the shown comparison ran: the button always runs the one in the box."""
    res = shown.result
    size = f"{res.get('prompt_len', '?')} tokens after the chat template, {res.get('n_tokens', '?')} generated in each mode"
    if shown.source == "bundled":
        chat = (shown.provenance.get("prompt") or {}).get("chat", True)
        same = (str(state.get(state.PROMPT) or "").strip() == (shown.prompt or "").strip()
                and bool(state.get(state.CHAT, True)) == bool(chat))
        return (f"Prompt of this recording: “{shown.prompt}” ({size}). "
                + ("It is also the prompt in the box now." if same else
                   "The button runs the prompt in the box instead."))
    if shown.source == "server":
        return (f"A reader's prompt ({size}); other readers' prompts are never shown. The button runs the "
                "prompt in the box.")
    return f"The prompt that was in the box when you pressed the button ({size})."


def _batching_body(loaded: Any) -> None:
    if presenter.active():  # shown without its section's heading: the panel names itself
        st.markdown("#### Batching: one decode step, many sequences")
    job = state.job(state.BATCHING)
    left, right = st.columns([3, 2], gap="large")
    answer_slot = right.empty()
    with right:
        if st.button(f"Measure batch sizes {BATCH_SIZES[0]} to {BATCH_SIZES[-1]}", key=state.BATCH_GO,
                     disabled=loaded is None or (job is not None and job.active)):
            job = BatchJob(get_queue(), loaded).start()
            state.set_job(state.BATCHING, job)
            st.rerun()
        st.caption(NO_MODEL if loaded is None else "About 20 s on the recording's machine.")
    shown = here = None
    with left:
        if job is not None:
            _job_status(job)
        if job is not None and job.active:
            _progress(job, len(job.result["rows"]), len(job.batches))
        else:
            shown = _shown("batching", job, job is not None and bool(job.result["rows"]))
            if shown is None:
                st.caption("Press the button to measure: the chart appears here.")
            else:
                recorded = shown.source == "bundled"
                _source_line(shown, "pd_batching_source", "", loaded is not None)
                where = "the recording machine" if recorded else "this machine"
                if recorded and loaded is not None and shown.result.get("prompt_len"):
                    here = roofline_batch_with(loaded, shown.result["prompt_len"], cached_ceilings())
                st.plotly_chart(panel_figures.batching_figure(
                    shown.result, where, "measured (recording)" if recorded else "measured here"),
                    key="batch_fig")
                with st.expander("Table: batching"):
                    st.dataframe(pd.DataFrame(shown.result["rows"]), hide_index=True)
                    if shown.result.get("predicted"):
                        st.caption("The latency model alone, past the measured range"
                                   + (" (the recording machine's model):" if recorded else ":"))
                        st.dataframe(pd.DataFrame(shown.result["predicted"]), hide_index=True)
    details = [lesson.text("batching"),
               f"The button measures this server: a short fixed prompt (“{BATCH_PROMPT}”, the recording's too) "
               f"copied into every row, {BATCH_STEPS} decode steps per batch size (median shown); the latency "
               "model goes on to batch 128."]
    if shown is not None:
        with answer_slot.container():
            sections.render_answer("batching", panel_figures.batching_answer_values(
                shown.result, recorded=shown.source == "bundled"))
        summary = panel_text.batching_summary(shown.result, where, here)
        beside = panel_text.recording_beside_run(_batching_pairs(shown, _live_run()),
                                                    shown.result.get("roofline"), here)
        caveat = results.RECORDING_CAVEAT if shown.source == "bundled" and not beside else ""  # beside has its own
        details += [t for t in (summary, beside, caveat, _two_recordings(shown)) if t]
    with right, st.expander("How we know: batching"):
        st.markdown("\n\n".join(details))
    _poll(job, state.BATCHING_SEEN)


def _two_recordings(batching: results.Measurement) -> str:
    """The sentence reconciling the two bundled recordings, when both panels show theirs."""
    if batching.source != "bundled":
        return ""
    job = state.job(state.COMPARE)
    compare = _shown("compare", job, job is not None and any(job.result["modes"].values()))
    if compare is None or compare.source != "bundled":
        return ""
    def bandwidth(m: results.Measurement) -> float | None:
        return (m.provenance.get("predictor") or {}).get("bandwidth_bytes_per_s")
    return panel_text.two_recordings(
        compare.result, batching.result,
        tuple(f"{m.measured_at.day} {m.measured_at:%B}" for m in (compare, batching)),
        (bandwidth(compare), bandwidth(batching)))


# --- a recording's numbers beside the reader's own run ------------------------------------------------

def _live_run() -> Any | None:
    """The reader's last finished run of the live model (not a replayed recording), else None."""
    run = state.current_run()
    if run is None or run.active or run.replay or not run.events:
        return None
    return run


def _same_prompt(run: Any, text: str | None, chat: bool, prompt_len: Any) -> bool:
    """Whether the run prefilled exactly the recording's prompt: same words, template and length."""
    return (bool(text) and str(run.prompt).strip() == str(text).strip()
            and bool(run.settings.chat) == bool(chat) and len(run.prompt_ids) == prompt_len)


def _compare_pairs(shown: results.Measurement, run: Any | None) -> list[tuple[str, float, float]]:
    """The recorded comparison's prefill beside the run's, when the run prefilled the same prompt in
    the same cache mode (the one quantity both show for certain)."""
    if run is None or shown.source != "bundled" or run.settings.batch != 1:
        return []
    res = shown.result
    chat = (shown.provenance.get("prompt") or {}).get("chat", True)
    times = (res.get("modes") or {}).get(run.settings.cache) or []
    if not times or not _same_prompt(run, shown.prompt, chat, res.get("prompt_len")):
        return []
    return [(f"the prefill of this same prompt ({res['prompt_len']} tokens, "
             f"{panel_figures.MODE_SHORT.get(run.settings.cache, run.settings.cache)})",
             times[0], run.events[0].latency_ms)]


def _batching_pairs(shown: results.Measurement, run: Any | None) -> list[tuple[str, float, float]]:
    """The recording's batch-1 decode step beside the run's median step (both batch 1, cache on), and
    its prefill when the run prefilled the recording's fixed prompt."""
    if run is None or shown.source != "bundled" or run.settings.batch != 1 or run.settings.cache == "none":
        return []
    res = shown.result
    first = next((r for r in res.get("rows", []) if r.get("batch") == 1), None)
    steps = [e.latency_ms for e in run.events if e.phase == "decode"]
    if first is None:
        return []
    pairs = []
    chat = (shown.provenance.get("prompt") or {}).get("chat", True)
    if _same_prompt(run, BATCH_PROMPT, chat, res.get("prompt_len")):
        pairs.append((f"the prefill of this same prompt ({res['prompt_len']} tokens)",
                      first["prefill ms (measured)"], run.events[0].latency_ms))
    if steps:
        pairs.append((f"one decode step at batch 1 (median; the recording's {res.get('prompt_len', '?')}-token "
                      f"prompt, your run's {len(run.prompt_ids)}-token one)",
                      first["decode step ms (measured, median)"], statistics.median(steps)))
    return pairs


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
                  f"{gbs_text(ceilings.bandwidth)} GB/s" if ceilings.bandwidth else "not calibrated",
                  "calibrated (matrix-vector products like a decode step's)"),
                 ("matmul peak, fp32",  # as the roofline and the lesson print it: one value per quantity
                  f"{sig3(ceilings.peak_flops / 1e9)} GFLOP/s" if ceilings.peak_flops else "not calibrated",
                  "calibrated (large matrix products)")]
        if ceilings.copy_bandwidth:
            rows.append(("copy bandwidth", f"{ceilings.copy_bandwidth / 1e9:.1f} GB/s",
                         "calibrated (a plain memory copy)"))
    else:
        rows.append(("calibrated ceilings", "measured once per server, before the first run", "—"))
    return rows


def about_panel(loaded: Any) -> None:
    rows = about_rows(loaded, state.current_run(), cached_ceilings())
    with st.expander("About this run: model, weights, versions, ceilings", key="pd_about"):
        st.table(pd.DataFrame(rows, columns=["what", "value", "source"]), hide_index=True)

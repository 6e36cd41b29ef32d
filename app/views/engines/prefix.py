"""The prefix-cache experiment on a live engine: the start button, the engine's blocks drawn as its
KV events arrive (a fragment polling the job's snapshot), then the simulator's blocks beside them and
each turn's time to first token. Shown for an engine that publishes KV events (Endpoint.kv_events).
"""

from __future__ import annotations

import time

import streamlit as st

from app.shared.model import get_queue
from app.shared.text import plain
from app.views.engines import prefix_figures as figs
from app.views.engines import prefix_text as text
from app.views.engines import state
from app.views.engines.live import ended_once
from app.views.engines.prefix_jobs import ConversationJob, fit_name, has_fit
from core.engines.block_map import engine_blocks
from core.engines.endpoints import Endpoint

POLL_S = 0.5


def _start(endpoint: Endpoint) -> None:
    state.set_job(state.LB_PC_JOB, ConversationJob(get_queue(), endpoint).start())


def _active() -> bool:
    job = state.job(state.LB_PC_JOB)
    return job is not None and job.active


def render(endpoint: Endpoint | None) -> None:
    """The experiment's introduction and button (with a live engine), then the session's run."""
    st.markdown(text.INTRO)
    if endpoint is not None:
        if not has_fit(endpoint):
            st.caption(f"The simulator has no fit for this engine yet ({plain(fit_name(endpoint))}), so only the "
                       "engine's side is drawn. Pick the same engine without its prefix cache and calibrate it.")
        st.button("Play the conversations", key=state.LB_PC_START, type="primary", on_click=_start,
                  args=(endpoint,), disabled=_active())
    polling = _active()
    st.fragment(_panel, run_every=POLL_S if polling else None)(polling)
    with st.expander("How we know", expanded=False):
        st.markdown(text.HOW)


def _panel(polling: bool) -> None:
    job: ConversationJob | None = state.job(state.LB_PC_JOB)
    if job is None:
        st.caption("No conversations played yet in this session.")
        return
    if job.active:
        job.touch()
        if not polling:
            st.rerun()
    elif ended_once(job):
        st.rerun()
    if job.active and job.status == "queued":
        st.info(f"Waiting for the CPU: {job.queue_position} job(s) ahead of this run. Runs take turns so they never "
                "time each other's work.")
        return
    run, table, prompts = job.snapshot()
    if job.active:
        elapsed = time.monotonic() - (job.started or time.monotonic())
        sent = sum(r.sent_s is not None for r in run.requests) if run is not None else 0
        st.info(f"{job.progress or 'starting'}: {sent} of {job.workload.conversations * job.workload.turns} turns "
                f"sent ({elapsed:.0f} s so far).")
    for problem in ([job.failure] if job.failure else []) + ([job.error] if job.error else []):
        st.error(plain(problem))
    if job.events_missing:
        st.warning(f"No blocks to draw: {plain(job.events_missing)}.")
    outcome = job.outcome
    if not job.active and run is not None:
        done = sum(r.done and not r.error for r in run.requests)
        errors = [r for r in run.requests if r.error]
        (st.success if not errors and not job.failure else st.warning)(
            f"Conversations finished: {done} of {len(run.requests)} turns answered on {plain(job.endpoint.label)}, "
            f"{plain(run.engine_version)}.")
        if errors:
            st.warning(f"{len(errors)} turn(s) failed; the first: {plain(errors[0].error or '')}")
        if outcome is not None and outcome.comparison is not None:
            st.markdown(text.answer(outcome.comparison, job.workload.turns))
    for note in job.notes:
        st.caption(plain(note))
    if table is not None:
        for problem in text.stream_problems(table):
            st.warning(plain(problem))
        blocks = engine_blocks(table, run, prompts, job.workload) if run is not None else []
        chains = len({b.conversation for b in blocks if b.conversation is not None}) + \
            (1 if any(b.conversation is None for b in blocks) else 0)
        st.markdown(text.blocks_line(table, chains, outcome.agreement if outcome else None))
        if job.active:  # text while the engine is timed: a chart redrawn twice a second would load its cores
            st.markdown(figs.block_rows(blocks, job.workload.conversations))
        else:
            st.plotly_chart(figs.block_maps(blocks, outcome.simulated_blocks if outcome else None,
                                            job.workload.conversations, table.block_size,
                                            "Each follow-up stores only the blocks its new tokens fill"),
                            key=f"lb_pc_blocks_{job.id}")
    if not job.active and outcome is not None and outcome.comparison is not None:
        comparison = outcome.comparison
        later = text.turn_median(comparison["turns"], "ttft_measured_s", False, job.workload.turns)
        st.plotly_chart(figs.turn_ttfts(comparison["turns"], job.workload.turns,
                                        f"Follow-ups start in {text.ms(later)}: the cached turns are not computed "
                                        "again"), key=f"lb_pc_ttft_{job.id}")
    elif not job.active and run is not None and not has_fit(job.endpoint):
        st.caption("No simulation of this run: the simulator has no fit for this engine.")

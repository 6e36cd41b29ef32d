"""The live engine run: its controls, its progress drawn while it plays (a fragment polling the job's
snapshot), the inject and stop buttons, the calibration offer, and the finished run with the
simulator's account of it.

Every button acts through a callback on the session's jobs (app.views.engines.jobs), before the
page is drawn, so a click mid-run leaves the page and the jobs agreeing. A finished run stays drawn,
even when its engine stops answering afterwards.
"""

from __future__ import annotations

import time

import streamlit as st

from app.shared.model import get_queue
from app.shared.text import plain
from app.views.engines import figures as figs
from app.views.engines import numbers, result, state
from app.views.engines.jobs import BY_HAND_OUTPUT, CalibrateJob, StallRunJob, fit_entry
from app.views.engines.text import LIVE_HOW
from core.engines.endpoints import Endpoint

POLL_S = 0.5
PROBE_TEXT = ("a probe of about a minute: prefills alone, then decode steps at 1 to 16 streams and at 8 "
              "streams over a long cache")


def _start(endpoint: Endpoint) -> None:
    job = StallRunJob(get_queue(), endpoint, int(state.get(state.LB_STREAMS, 4)), bool(state.get(state.LB_BY_HAND)))
    state.set_job(state.LB_RUN_JOB, job.start())


def _inject() -> None:
    job = state.job(state.LB_RUN_JOB)
    if job is not None:
        job.inject()


def _stop() -> None:
    job = state.job(state.LB_RUN_JOB)
    if job is not None:
        job.stop()


def _calibrate(endpoint: Endpoint) -> None:
    if (old := state.job(state.LB_CAL_JOB)) is not None and old.active:
        return
    run_job = state.job(state.LB_RUN_JOB)
    attach = run_job if run_job is not None and run_job.endpoint == endpoint and run_job.analysis is None else None
    state.set_job(state.LB_CAL_JOB, CalibrateJob(get_queue(), endpoint, attach).start())


def _active(key: str) -> bool:
    job = state.job(key)
    return job is not None and job.active


def controls(endpoint: Endpoint) -> None:
    """How many streams, how the long prompt comes, and the start button."""
    st.markdown(LIVE_HOW)
    left, mid, right = st.columns([2, 3, 2], gap="large", vertical_alignment="bottom")
    with left:
        st.slider("Short streams", 1, 8, 4, key=state.LB_STREAMS,
                  help="Each sends a 32-token prompt and asks for 96 tokens (384 when you inject by hand).")
    with mid:
        st.toggle("I'll send the long prompt myself", key=state.LB_BY_HAND,
                  help=f"Off: the workload sends it 0.8 s in, like the recording. On: the short streams ask for "
                       f"{BY_HAND_OUTPUT} tokens each, and a button sends it whenever you like while they run.")
    with right:
        st.button("Start the run", key=state.LB_START, type="primary", on_click=_start, args=(endpoint,),
                  disabled=_active(state.LB_RUN_JOB), width="stretch")


def render(endpoint: Endpoint | None) -> None:
    """The controls (with a live engine) and the session's run, live or ended."""
    if endpoint is not None:
        controls(endpoint)
    polling = _active(state.LB_RUN_JOB) or _active(state.LB_CAL_JOB)
    st.fragment(_panel, run_every=POLL_S if polling else None)(endpoint, polling)


def ended_once(job) -> bool:
    """True once per job that has ended, so the page reruns in full (dropping the poll timer)."""
    if job is None or job.active:
        return False
    seen = state.get(state.LB_SEEN) or set()
    if job.id in seen:
        return False
    state.put(state.LB_SEEN, seen | {job.id})
    return True


def _panel(endpoint: Endpoint | None, polling: bool) -> None:
    """Everything that changes while a job works. `polling`: whether this fragment has a poll timer;
    a job started from a button inside it (calibration) needs a full rerun to get one."""
    run_job: StallRunJob | None = state.job(state.LB_RUN_JOB)
    cal_job: CalibrateJob | None = state.job(state.LB_CAL_JOB)
    for job in (run_job, cal_job):
        if job is not None and job.active:
            job.touch()
    ended = [ended_once(run_job), ended_once(cal_job)]  # both marked, then one full rerun
    active = any(job is not None and job.active for job in (run_job, cal_job))
    if any(ended) or (active and not polling):
        st.rerun()
    _calibration(endpoint, cal_job)
    if run_job is None:
        if endpoint is not None:
            st.caption("No run yet in this session.")
        return
    if run_job.active:
        _running(run_job)
    else:
        _ended(run_job, cal_job)


def _calibration(endpoint: Endpoint | None, cal_job: CalibrateJob | None) -> None:
    if cal_job is not None and cal_job.active:
        if cal_job.status == "queued":
            st.info(f"Calibration waiting for the CPU: {cal_job.queue_position} job(s) ahead.")
        else:
            elapsed = time.monotonic() - (cal_job.started or time.monotonic())
            st.info(f"Calibrating the simulator to {plain(cal_job.endpoint.label)}: "
                    f"{cal_job.progress or 'checking the engine'} ({elapsed:.0f} s so far; it usually takes about a minute).")
        return
    if cal_job is not None and (cal_job.failure or cal_job.error):
        st.error(f"The calibration failed: {plain(_hide(cal_job.failure or cal_job.error or '', cal_job.endpoint))}")
    if endpoint is None:
        return
    entry = fit_entry(endpoint.name)
    left, right = st.columns([4, 1], vertical_alignment="center")
    with left:
        if entry:
            st.caption(f"The simulator is fitted to {plain(endpoint.label)} (probe made "
                       f"{plain(numbers.when(str(entry.get('fitted_at', ''))))} on "
                       f"{plain(str(entry.get('engine_version', 'this engine')))}).")
        else:
            st.warning(f"The simulator has not been fitted to {plain(endpoint.label)} yet, so it cannot predict a run "
                       f"on it. Calibrating takes {PROBE_TEXT}; the fit is kept for every later run.")
    with right:
        st.button("Calibrate again" if entry else "Calibrate the simulator", key=state.LB_CALIBRATE,
                  on_click=_calibrate, args=(endpoint,), disabled=_active(state.LB_RUN_JOB),
                  width="stretch")


def _running(job: StallRunJob) -> None:
    if job.status == "queued":
        st.info(f"Waiting for the CPU: {job.queue_position} job(s) ahead of this run (another reader's run, a "
                "live generation or a calibration). Runs take turns so they never time each other's work.")
        return
    run = job.snapshot()
    if run is None:
        st.info(f"Getting ready: {job.progress}…")
        return
    clock = job.clock()
    st.info(numbers.progress_line(run, clock))
    left, right = st.columns(2)
    with left:
        if job.by_hand and job.injected_at is None:
            st.button("Inject the long prompt", key=state.LB_INJECT, on_click=_inject, type="primary",
                      disabled=not job.can_inject, width="stretch",
                      help="Sends the 1,536-token prompt now; watch the rows of ticks.")
        elif job.by_hand:
            st.caption(f"You sent the long prompt {job.injected_at:.1f} s into the run.")
        else:
            st.caption(f"The long prompt goes in {job.workload.long_at_s:g} s into the run.")
    with right:
        st.button("Stop the run", key=state.LB_STOP, on_click=_stop, width="stretch",
                  help="Closes every stream; what arrived so far stays drawn.")
    rows = numbers.rows(run)
    x_max = max(figs.x_extent(rows, now_s=clock), 3.0)
    tick_col, metric_col = st.columns([3, 2], gap="large")
    with tick_col:
        st.plotly_chart(figs.token_ticks(rows, "measured", f"{job.endpoint.label}: tokens as they arrive (measured)",
                                         x_max, now_s=clock), key="lb_live_ticks")
        st.caption(figs.TICKS_KEY + " The dotted line is now.")
    with metric_col:
        st.plotly_chart(figs.engine_metrics(run, "What the engine reports (measured)", x_max),
                        key="lb_live_metrics")


def _hide(text: str, endpoint: Endpoint) -> str:
    """An operator's engine's address out of a message (it may name a host inside their network)."""
    return text.replace(endpoint.base_url, endpoint.name) if endpoint.operator else text


def _ended(job: StallRunJob, cal_job: CalibrateJob | None) -> None:
    run = job.snapshot()
    if run is None:
        st.error(f"The run on {plain(job.endpoint.label)} could not start: "
                 f"{plain(_hide(job.failure or job.error or 'it was stopped before it began', job.endpoint))}")
        return
    verb = {"done": "finished", "stopped": "stopped", "abandoned": "abandoned", "error": "failed"}.get(job.status,
                                                                                                     job.status)
    clean = job.status == "done" and not job.failure and not any(r.error for r in run.requests)
    (st.success if clean else st.warning)(
        f"{numbers.status_line(run, verb)} On {plain(job.endpoint.label)}, {plain(run.engine_version)}.")
    if job.failure or job.error:
        st.error(plain(_hide(job.failure or job.error or "", job.endpoint)))
    if (problem := numbers.failures(run)) is not None:
        st.warning(plain(_hide(problem, job.endpoint)))
    for note in job.notes:
        st.caption(plain(note))
    if job.by_hand and job.injected_at is None:
        st.info("You did not send the long prompt in this run, so there is no stall to see: the streams only show "
                "their steady decode steps.")
    analysis = job.analysis
    if analysis is None and cal_job is not None and cal_job.run_job is job:
        analysis = cal_job.analysis
    if analysis is None:
        missing = ("The simulator is being fitted to this engine; this run is simulated when that ends."
                   if cal_job is not None and cal_job.active else
                   "No simulation of this run: the simulator has no fit to this engine. Calibrate it above, and "
                   "this run is simulated as soon as the fit is made.")
    else:
        missing = None
    st.markdown(numbers.verdict([(run, analysis.simulated if analysis else None)]))
    result.show(run, analysis.simulated if analysis else None,
                       analysis.comparison.to_dict() if analysis else None, f"lb_run_{job.id}", missing=missing)

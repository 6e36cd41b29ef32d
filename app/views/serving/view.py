"""The serving simulator page: two scheduling policies on the same requests, side by side.

Thin: controls in app.views.serving.settings, the runs in app.views.serving.jobs (queued with
every other CPU job), the simulation in core.sim, the charts in app.views.serving.figures.
Nothing here runs a model: every number is simulated from the cost model and a GPU's datasheet.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.shared.model import get_queue
from app.views.serving import figures as figs
from app.views.serving import results, state, text
from app.views.serving import settings as controls
from app.views.serving.jobs import MAX_JOB_S, SimJob, offered_rate, precheck
from core.sim.policies import POLICIES
from core.sim.simulate import SimResult

POLL_S = 0.5


def render() -> None:
    controls.apply_link_once()
    st.title(text.TITLE)
    st.caption("Every number on this page is **simulated**: a discrete-event model of a serving machine whose "
               "iterations are priced by the same cost model as the what-if page. Nothing here runs a model.")
    st.markdown(text.INTRO)
    settings = controls.render()
    controls.sync_url(settings)
    uploaded = settings.pop("uploaded")
    key = (tuple(sorted(settings.items())), uploaded[0] if uploaded else None,
           id(uploaded[1]) if uploaded else None)
    job = state.job(state.SV_JOB)
    if job is None or job.key != key:
        if job is not None and job.active:
            job.stop()  # the reader has moved on from its settings
        try:  # once per new set of settings: a pass that redraws the same job has been checked already
            precheck(settings, uploaded[1] if uploaded else None)
        except ValueError as exc:
            st.error(f"These settings cannot be simulated: {exc}")
            return
        job = SimJob(get_queue(), settings, uploaded[1] if uploaded else None, uploaded[0] if uploaded else None)
        job.key = key
        job.start()
        state.set_job(state.SV_JOB, job)
    st.fragment(_results, run_every=POLL_S if job.active else None)(job)


def _results(job: SimJob) -> None:
    if job.active:
        job.touch()
        if job.status == "queued":
            st.info(f"Waiting for the CPU: {job.queue_position} run(s) ahead of this simulation (a reader's live "
                    "generation or another simulation).")
        else:
            st.info(f"Simulating… {job.progress}")
        st.button("Stop the simulation", key="sv_stop", on_click=job.stop, icon=":material/stop:")
        st.caption("Simulations wait their turn so they never slow a reader's live run, and each is capped at "
                   f"{MAX_JOB_S:g} s.")
        return
    if state.get(state.SV_SEEN) != job.id:
        state.put(state.SV_SEEN, job.id)
        st.rerun()  # one full pass drops the fragment's poll timer
    if job.status == "error":
        st.error(f"The simulation failed: {job.error}")
        return
    if job.status != "done" or len(job.results) < 2:
        st.warning("The simulation was stopped before it finished; change a setting to run it again.")
        return
    _show(job)


def _show(job: SimJob) -> None:
    ra, rb = job.results
    names = [f"A: {text.label(ra.config.policy)}", f"B: {text.label(rb.config.policy)}"]
    st.divider()
    _tiles(ra, rb, names)
    for res, name in zip((ra, rb), names, strict=True):
        why = text.unserved(res)
        if why:
            st.warning(f"**{name}:** {why}", icon=":material/block:")
    st.markdown(text.verdict(ra, rb, f"replayed from {job.uploaded_name}" if job.uploaded is not None else None))
    with st.expander("The policies, in a sentence each", expanded=False):
        st.markdown("\n\n".join(text.policy_sentence(name) for name in POLICIES))
    st.subheader("The timeline: where each iteration's time goes")
    span = max(max((t[-1] for t in r.token_s if t), default=0.0) for r in (ra, rb))
    length = results.window_length(ra)
    default = figs.default_window(ra, length)
    if st.session_state.get(state.SV_WINDOW + "_job") != job.id:
        st.session_state[state.SV_WINDOW + "_job"] = job.id
        st.session_state[state.SV_WINDOW] = round(default, 2)
    top = max(0.01, round(span - length, 2))
    st.session_state[state.SV_WINDOW] = min(st.session_state[state.SV_WINDOW], top)
    start = st.slider(f"Window of {length:.2f} s starting at (simulated seconds)", 0.0, top, step=0.01,
                      key=state.SV_WINDOW,
                      help="It opens just before the first long prompt arrives, where the policies differ most.")
    st.caption("Each bar is one iteration, as long as its simulated duration: in the red lane if it prefilled "
               "prompt tokens, in the blue lane if it produced decode tokens, thicker where that work is a larger "
               "share of its tokens. A long red bar with a gap in the blue lane beside it is every running "
               "request waiting for one prompt. Below, each row is one request and each tick one of its output "
               "tokens: an even comb is a smooth stream, a gap is a stall.")
    cols = st.columns(2, gap="large")
    for col, res, name, tag in zip(cols, (ra, rb), names, ("a", "b"), strict=True):
        with col:
            st.plotly_chart(figs.timeline(res, start, length, f"{name}: iterations (simulated)"),
                            key=f"sv_chart_timeline_{tag}")
            st.plotly_chart(figs.token_ticks(res, start, length, f"{name}: every request's tokens (simulated)"),
                            key=f"sv_chart_ticks_{tag}")
    st.subheader("Every request, both policies")
    st.plotly_chart(figs.distributions([ra, rb], names), key="sv_chart_dist")
    left, right = st.columns(2, gap="large")
    with left:
        st.plotly_chart(figs.kv_usage([ra, rb], names), key="sv_chart_kv")
        pre = [r.to_dict()["preemptions"] for r in (ra, rb)]
        st.caption(f"Preemptions (simulated): {names[0]} {pre[0]:,}, {names[1]} {pre[1]:,}. "
                   f"KV blocks per model copy: {ra.kv_blocks_per_server:,} of 16 tokens.")
    with right:
        st.plotly_chart(figs.goodput([ra, rb], names), key="sv_chart_goodput")
    if job.sweep:
        st.plotly_chart(figs.rate_sweep(job.sweep, {r.config.policy: n for r, n in zip((ra, rb), names,
                                                                                        strict=True)}),
                        key="sv_chart_sweep")
        top = float(job.settings.get("sweep", 1.5))
        how = (f"the recording's first {job.sweep_requests:,} requests from the same minute, played at six "
               f"speeds (evenly up to {top:g} × the time scale above; the rates are those of these "
               f"{job.sweep_requests:,}, so they can differ from the rate above" if ra.played is not None else
               f"{job.sweep_requests:,} requests at that arrival rate (six rates, evenly up to {top:g} × the "
               f"{offered_rate(ra.config):g}/s above")
        st.caption(f"Each point is a separate simulation of {how}; the slider beside the deployment moves the top). "
                   "As the rate rises, throughput climbs until the machine saturates; what a policy pays for it "
                   "in p99 TPOT is the trade-off serving papers plot.")
    else:
        st.caption("A replayed arrival file has its own arrival times, so there is no rate to sweep.")
    st.markdown(text.DEFINITIONS)
    rows = text.metric_rows(ra, rb, names)
    st.dataframe(pd.DataFrame(rows), hide_index=True, height=36 * (len(rows) + 1) + 4)
    _export(ra, rb)
    with st.expander("How the simulator works (and what it leaves out)"):
        st.markdown(text.HOW)


def _tiles(ra: SimResult, rb: SimResult, names: list[str]) -> None:
    cols = st.columns(2, gap="large")
    for col, res, name in zip(cols, (ra, rb), names, strict=True):
        m = res.metrics
        with col:
            st.markdown(f"**{name}** · {res.config.instances} copies × {res.config.tp} {res.config.hardware}, "
                        f"{res.config.model} (simulated)")
            c = st.columns(3)
            c[0].metric("TTFT, median", text.ms(m["ttft_p50_s"]), help="arrival to first token, queueing included")
            c[1].metric("TPOT, median", text.ms(m["tpot_p50_s"]), help="each request's mean gap after its first token")
            c[2].metric("Output tokens/s", f"{m['throughput_tok_s']:,.0f}" if m["throughput_tok_s"] else "–",
                        help="all requests together, over the makespan")
            c = st.columns(3)
            c[0].metric("TTFT, p99", text.ms(m["ttft_p99_s"]))
            c[1].metric("TPOT, p99", text.ms(m["tpot_p99_s"]))
            c[2].metric("Goodput, req/s", f"{m['goodput_req_s']:,.2f}" if m["goodput_req_s"] is not None else "–",
                        help="requests per second that met both targets")
            st.caption(f"{m['good_requests']:,} of {m['served']:,} requests met both targets.")
            line = text.prefix_line(res)
            if line:
                st.caption(line)


def _export(ra: SimResult, rb: SimResult) -> None:
    c1, c2 = st.columns(2)
    c1.download_button("Download per-request results (CSV)", results.export_csv([ra, rb]), "serving-simulation.csv",
                       "text/csv", key="sv_download_csv")
    c2.download_button("Download everything, token times included (JSON)", results.export_json([ra, rb]),
                       "serving-simulation.json", "application/json", key="sv_download_json")

"""The serving simulator page: two scheduling policies on the same requests, side by side.

Thin: controls in app.views.serving.settings, the runs in app.views.serving.jobs (queued with
every other CPU job), the simulation in core.sim, the charts in app.views.serving.figures.
Nothing here runs a model: every number is simulated from the cost model and a GPU's datasheet.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pandas as pd
import streamlit as st

from app.shared.model import get_queue
from app.views.serving import figures as figs
from app.views.serving import settings as controls
from app.views.serving import state
from app.views.serving.jobs import MAX_JOB_S, SimJob, offered_rate, precheck
from core.sim.policies import POLICIES
from core.sim.simulate import BLOCK_TOKENS, SimResult

TITLE = "Serving: why prefill and decode are scheduled apart"
POLL_S = 0.5
METRIC_ROWS = [("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e")]

INTRO = """A server never answers one request at a time. Dozens arrive every second, and every
iteration of the model (one forward pass) can carry rows from many of them: some still **prefilling**
their prompt, most **decoding** one token each. The **scheduler** decides, iteration by iteration,
which rows ride together. A prefill of a long prompt is a heavy, compute-bound forward; a decode is
light and limited by memory bandwidth. Put a 6,000-token prefill in the same iteration as thirty
decodes and all thirty users wait for it: that is the stall this page lets you watch, and the reason
serving systems treat the two phases differently."""

POLICY_TEXT = {
    "static": "**Static batching** takes a batch of waiting requests when the server is idle, pads every "
              "prompt to the longest, and runs the batch until its last answer is done. Nobody joins mid-way, "
              "and finished answers keep their slot (their tokens are computed and thrown away).",
    "prefill-first": "**Prefill first** (continuous batching) puts a new prompt into the very next iteration, "
                     "whole, ahead of the running decodes: requests start fast, but each long prompt freezes "
                     "every other user's next token while it is prefilled.",
    "decode-first": "**Decode first** never delays a running decode: a new prompt is prefilled only when no "
                    "decode is left to run. Tokens flow evenly for those inside, and newcomers wait outside.",
    "chunked": "**Chunked prefill** (Sarathi-Serve) gives each iteration a token budget: one token for every "
               "running decode first, then slices of waiting prompts fill the rest. A long prompt is spread "
               "over many iterations, each only a little slower than a plain decode step.",
    "disaggregated": "**Disaggregated** serving puts prefill and decode on different GPUs: prefill servers only "
                     "prefill, then send each request's KV cache over the GPU link to a decode server, which "
                     "only decodes. No prompt ever shares an iteration with a decode.",
}

DEFINITIONS = """Definitions, as `vllm bench serve` reports them, all **simulated**:
**TTFT** (time to first token) runs from a request's arrival to its first output token, queueing
included. **TPOT** (time per output token) is each request's (E2E − TTFT) / (n − 1) for n output
tokens: its mean gap after the first. **ITL** (inter-token latency) is every single gap between two
consecutive tokens, so its p99 catches the stalls a mean hides. **E2E** is arrival to last token.
p50 / p90 / p99 are the values half, 90% and 99% of requests (or gaps) stay at or below.
**Throughput** is output tokens over the makespan (first arrival to last token); **goodput** counts
only the requests per second that met both targets."""

HOW = """Each iteration's duration is the what-if page's prediction for exactly the rows it holds: one
forward whose weights are streamed once for all rows, plus every row's own arithmetic, KV-cache
reads and writes, plus a fixed overhead per forward (and the all-reduces when a copy spans several
GPUs). Prices come from the GPU's datasheet times assumed efficiencies (80% of the bandwidth, 60%
of the matrix-multiply peak), so they are a model of a well-tuned engine, not a measurement. KV
memory is paged in blocks of 16 tokens out of 90% of the GPUs' memory less the weights (vLLM's
default); a request waits while its prompt's blocks are not free, and when a decode needs a block
and none is left, the most recently admitted request is **preempted**: its cache is thrown away and
recomputed later. Output lengths are known to the simulator in advance (it replays a workload); a
real server learns them only when the model stops. The live page measures a real model on this
server; the engine lab will compare this simulator with a real serving engine."""


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1e3:,.1f} ms"


def _label(policy: str) -> str:
    return POLICIES[policy].label or policy


def render() -> None:
    controls.apply_link_once()
    st.title(TITLE)
    st.caption("Every number on this page is **simulated**: a discrete-event model of a serving machine whose "
               "iterations are priced by the same cost model as the what-if page. Nothing here runs a model.")
    st.markdown(INTRO)
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


def policy_sentence(name: str) -> str:
    """The page's sentence for a policy; a policy the page has no words for yet gets its class's line."""
    cls = POLICIES[name]
    return POLICY_TEXT.get(name) or f"**{cls.label or name}**: {cls.description}."


def _show(job: SimJob) -> None:
    ra, rb = job.results
    names = [f"A: {_label(ra.config.policy)}", f"B: {_label(rb.config.policy)}"]
    st.divider()
    _tiles(ra, rb, names)
    for res, name in zip((ra, rb), names, strict=True):
        why = unserved(res)
        if why:
            st.warning(f"**{name}:** {why}", icon=":material/block:")
    st.markdown(verdict(ra, rb, f"replayed from {job.uploaded_name}" if job.uploaded is not None else None))
    with st.expander("The policies, in a sentence each", expanded=False):
        st.markdown("\n\n".join(policy_sentence(name) for name in POLICIES))
    st.subheader("The timeline: where each iteration's time goes")
    span = max(max((t[-1] for t in r.token_s if t), default=0.0) for r in (ra, rb))
    length = window_length(ra)
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
        st.caption(f"Each point is a separate simulation of {job.sweep_requests:,} requests at that arrival rate "
                   f"(six rates, evenly up to {top:g} × the {offered_rate(ra.config):g}/s above; the slider "
                   "beside the deployment moves the top). "
                   "As the rate rises, throughput climbs until the machine saturates; what a policy pays for it "
                   "in p99 TPOT is the trade-off serving papers plot.")
    else:
        st.caption("A replayed arrival file has its own arrival times, so there is no rate to sweep.")
    st.markdown(DEFINITIONS)
    rows = metric_rows(ra, rb, names)
    st.dataframe(pd.DataFrame(rows), hide_index=True, height=36 * (len(rows) + 1) + 4)
    _export(ra, rb)
    with st.expander("How the simulator works (and what it leaves out)"):
        st.markdown(HOW)


def unserved(result: SimResult) -> str | None:
    """Why some requests got no token, in the reader's words (None when every request was served):
    a KV cache too small for a request's prompt is the one way the simulator turns one away."""
    m = result.metrics
    missing = m["requests"] - m["served"]
    if missing <= 0:
        return None
    blocks = result.kv_blocks_per_server
    tokens = blocks * BLOCK_TOKENS
    smallest = min(r.prompt_tokens + r.output_tokens - 1 for r in result.requests)
    whom = "No request" if m["served"] == 0 else f"{missing:,} of {m['requests']:,} requests"
    return (f"{whom} could be served: each model copy's KV cache holds {blocks:,} block{'s' * (blocks != 1)} of "
            f"{BLOCK_TOKENS} tokens ({tokens:,} tokens), and a request is turned away unless its whole cache fits: "
            f"its prompt and all but its last output token (the smallest here: {smallest:,} tokens). Raise the KV "
            "capacity (0 sizes it from the memory left after the weights) or shorten the prompts. The charts below are drawn from what was served.")


def window_length(result: SimResult) -> float:
    """About sixty typical iterations of the first server: long enough to see a long prefill and the
    decodes around it, short enough to see single iterations."""
    durations = [it[1] for it in result.servers[0][1].iterations]
    if not durations:
        return 1.0
    return float(min(30.0, max(0.05, 60 * float(np.median(durations)))))


def _tiles(ra: SimResult, rb: SimResult, names: list[str]) -> None:
    cols = st.columns(2, gap="large")
    for col, res, name in zip(cols, (ra, rb), names, strict=True):
        m = res.metrics
        with col:
            st.markdown(f"**{name}** · {res.config.instances} copies × {res.config.tp} {res.config.hardware}, "
                        f"{res.config.model} (simulated)")
            c = st.columns(3)
            c[0].metric("TTFT, median", _ms(m["ttft_p50_s"]), help="arrival to first token, queueing included")
            c[1].metric("TPOT, median", _ms(m["tpot_p50_s"]), help="each request's mean gap after its first token")
            c[2].metric("Output tokens/s", f"{m['throughput_tok_s']:,.0f}" if m["throughput_tok_s"] else "–",
                        help="all requests together, over the makespan")
            c = st.columns(3)
            c[0].metric("TTFT, p99", _ms(m["ttft_p99_s"]))
            c[1].metric("TPOT, p99", _ms(m["tpot_p99_s"]))
            c[2].metric("Goodput, req/s", f"{m['goodput_req_s']:,.2f}" if m["goodput_req_s"] is not None else "–",
                        help="requests per second that met both targets")
            st.caption(f"{m['good_requests']:,} of {m['served']:,} requests met both targets.")


def verdict(ra: SimResult, rb: SimResult, source: str | None = None) -> str:
    """The comparison in words, every number from the two results."""
    ma, mb = ra.metrics, rb.metrics
    la, lb = _label(ra.config.policy), _label(rb.config.policy)
    lines = []
    n = len(ra.requests)
    cfg = ra.config
    if source is None:
        custom = (cfg.prompt_median, cfg.output_median, cfg.length_sigma) != (None, None, None)
        source = f"{'custom lengths' if custom else cfg.workload}, about {offered_rate(cfg):g} per second"
    lines.append(f"**{n:,} requests** ({source}) on the same arrivals for both. All figures simulated.")

    def compare(metric: str, what: str, better_low: bool = True) -> str:
        x, y = ma[metric], mb[metric]
        if x is None or y is None or x == y:
            return f"{what}: {_ms(x)} under {la}, {_ms(y)} under {lb}."
        low, high = (la, lb) if x < y else (lb, la)
        ratio = max(x, y) / min(x, y) if min(x, y) > 0 else float("inf")
        return f"{what}: **{low}** {_ms(min(x, y))} against {high} {_ms(max(x, y))} (×{ratio:,.1f})."

    lines.append(compare("ttft_p50_s", "Median wait for the first token"))
    lines.append(compare("tpot_p99_s", "p99 time per output token"))
    lines.append(compare("itl_p99_s", "p99 gap between two tokens (the stalls)"))
    if None not in (ma["ttft_p50_s"], mb["ttft_p50_s"], ma["tpot_p99_s"], mb["tpot_p99_s"]):
        sooner = la if ma["ttft_p50_s"] < mb["ttft_p50_s"] else lb
        smoother = la if ma["tpot_p99_s"] < mb["tpot_p99_s"] else lb
        if sooner != smoother:
            lines.append(f"Neither wins both: **{sooner}** starts answers sooner, **{smoother}** keeps them "
                         "flowing. Which matters more is what the TTFT and TPOT targets (and goodput) decide.")
    ta, tb = ma["throughput_tok_s"] or 0.0, mb["throughput_tok_s"] or 0.0
    if ta and tb:
        lines.append(f"Throughput: {ta:,.0f} against {tb:,.0f} output tokens per second "
                     f"({'within 5%' if abs(ta - tb) <= 0.05 * max(ta, tb) else 'different'}).")
    return " ".join(lines[:1]) + "\n\n" + "\n".join(f"- {line}" for line in lines[1:])


def metric_rows(ra: SimResult, rb: SimResult, names: list[str]) -> list[dict[str, str]]:
    rows = []
    for label, key in METRIC_ROWS:
        for q in ("p50", "p90", "p99"):
            rows.append({"metric (simulated)": f"{label} {q}", names[0]: _ms(ra.metrics[f"{key}_{q}_s"]),
                         names[1]: _ms(rb.metrics[f"{key}_{q}_s"])})
    for label, key, fmt in (("throughput (output tokens/s)", "throughput_tok_s", "{:,.0f}"),
                            ("goodput (requests/s)", "goodput_req_s", "{:,.2f}")):
        rows.append({"metric (simulated)": label,
                     **{n: fmt.format(r.metrics[key]) if r.metrics[key] is not None else "–"
                        for n, r in zip(names, (ra, rb), strict=True)}})
    rows.append({"metric (simulated)": "preemptions",
                 **{n: f"{r.to_dict()['preemptions']:,}" for n, r in zip(names, (ra, rb), strict=True)}})
    return rows


def export_csv(results: list[SimResult]) -> str:
    """Per-request results of both policies as CSV (token times in the JSON export)."""
    out = io.StringIO()
    fields = ["policy", "id", "arrival_s", "prompt_tokens", "output_tokens", "server", "preemptions",
              "first_token_s", "ttft_s", "tpot_s", "e2e_s", "tokens"]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for res in results:
        for rec in res.per_request():
            writer.writerow({"policy": res.config.policy, **rec})
    return out.getvalue()


def export_json(results: list[SimResult]) -> str:
    return json.dumps([r.to_dict(per_request=True) for r in results])


def _export(ra: SimResult, rb: SimResult) -> None:
    c1, c2 = st.columns(2)
    c1.download_button("Download per-request results (CSV)", export_csv([ra, rb]), "serving-simulation.csv",
                       "text/csv", key="sv_download_csv")
    c2.download_button("Download everything, token times included (JSON)", export_json([ra, rb]),
                       "serving-simulation.json", "application/json", key="sv_download_json")

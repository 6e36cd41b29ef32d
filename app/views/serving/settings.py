"""The serving simulator page's controls: deployment, workload, the two policies, the targets, and an
optional arrival file, all kept in the page's link (the file excepted: it stays in this session).

An uploaded arrival file is untrusted: size-capped, parsed as JSONL or CSV only (core.sim.workload),
never written to disk. A bad one leaves every setting and the previous file as they were.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared.text import plain, safe_name
from app.views.serving import link, state
from core.hardware import HOST
from core.hardware import list_presets as hardware_presets
from core.sim.policies import POLICIES
from core.sim.routers import ROUTERS
from core.sim.traffic import recorded, recordings
from core.sim.workload import ARRIVALS, MAX_UPLOAD_BYTES, load_workloads, read_arrivals
from core.spec import list_model_presets


def _key(name: str) -> str:
    return state.SV_PREFIX + name


def apply_link_once() -> None:
    """A session's first pass: the link's settings into the widgets, before any is drawn."""
    if st.session_state.get(state.SV_LINK_APPLIED):
        return
    st.session_state[state.SV_LINK_APPLIED] = True
    settings, notices = link.parse({k: st.query_params.get_all(k) for k in st.query_params})
    for key, value in settings.items():
        st.session_state[_key(key)] = value
    st.session_state[state.SV_LINK_NOTICES] = notices


def _policy_label(name: str) -> str:
    link.policy_choices()
    return POLICIES[name].label or name


def _set_router() -> None:
    st.session_state[_key("router")] = st.session_state[_key("router_pick")]


def _set_prefix_cache() -> None:
    st.session_state[_key("pcache")] = int(bool(st.session_state[_key("pcache_on")]))


def _set_budget(tokens: int) -> None:
    st.session_state[_key("budget")] = tokens


def _take_upload() -> None:
    up = st.session_state.get(state.SV_UPLOAD)
    if up is None or st.session_state.get(state.SV_UPLOAD_SEEN) == up.file_id:
        return
    st.session_state[state.SV_UPLOAD_SEEN] = up.file_id
    try:
        if up.size > MAX_UPLOAD_BYTES:
            raise ValueError(f"{up.name} is {up.size:,} bytes; the limit is {MAX_UPLOAD_BYTES:,}")
        requests = read_arrivals(up.getvalue(), up.name)
    except ValueError as exc:
        st.session_state[state.SV_UPLOAD_MESSAGE] = f"{safe_name(up.name)} cannot be replayed: {exc}."
    except Exception as exc:  # anything else a hostile file provokes: still a message, settings kept
        st.session_state[state.SV_UPLOAD_MESSAGE] = f"{safe_name(up.name)} cannot be replayed ({type(exc).__name__})."
    else:
        st.session_state[state.SV_UPLOADED] = (up.name, requests)
        st.session_state[state.SV_USE_UPLOAD] = True
        st.session_state[state.SV_UPLOAD_MESSAGE] = None


def render() -> dict[str, Any]:
    """Draw the controls; return the settings (app.views.serving.link keys) and `uploaded`."""
    for message in st.session_state.get(state.SV_LINK_NOTICES) or []:
        st.info(message)
    _take_upload()
    policies = link.policy_choices()
    c1, c2, c3 = st.columns([3, 3, 3], gap="large")
    with c1:
        st.markdown("**The two schedulers to compare**")
        a, b = st.columns(2)
        a.selectbox("Policy A", policies, key=_key("a"), format_func=_policy_label)
        b.selectbox("Policy B", policies, key=_key("b"), format_func=_policy_label)
        st.number_input("Chunked prefill: tokens per iteration", 16, 65_536, step=256, key=_key("budget"),
                        help="Sarathi-Serve's token budget: decodes first, then prompt chunks up to this many "
                             "tokens. 512 favours smooth decodes, 2048 throughput.")
        q1, q2, _ = st.columns([1, 1, 2])
        q1.button("512", key="sv_budget_512", on_click=_set_budget, args=(512,), help="smooth decodes")
        q2.button("2048", key="sv_budget_2048", on_click=_set_budget, args=(2048,),
                  help="fewer, larger iterations")
        t1, t2 = st.columns(2)
        t1.number_input("TTFT target (s)", 0.001, 600.0, step=0.25, key=_key("ttft"), format="%.3f")
        t2.number_input("TPOT target (s)", 0.0001, 10.0, step=0.01, key=_key("tpot"), format="%.4f")
    with c2:
        st.markdown("**The requests**")
        works, traces = load_workloads(), recordings()
        st.selectbox("Workload", [*works, *traces], key=_key("work"),
                     format_func=lambda w: works[w].label if w in works else traces[w].label,
                     help="A synthetic mix drawn at the rate you choose, or production traffic recorded on a real "
                          "service (arrival times and token counts, no text) played as it came.")
        trace = traces.get(st.session_state[_key("work")])
        if trace is not None:  # a recording keeps its own arrivals and lengths
            for name in ("tscale", "wstart"):  # drawn only for a recording: Streamlit forgets them in between
                st.session_state.setdefault(_key(name), link.DEFAULTS[name])
            last = int(recorded(st.session_state[_key("work")])[-1].arrival_s // 60)  # its final minute
            if st.session_state[_key("wstart")] > last:  # a link's minute past this recording's end
                st.session_state[_key("wstart")] = last
            st.caption(f"Source: {trace.source} ({trace.licence}; {trace.attribution}). Requests whose prompt and "
                       "output together exceed the model's context window are left out, and counted; arrival "
                       "pattern, rate, prompt scale and seed do not apply.")
            w1, w2 = st.columns(2)
            w1.number_input("Time scale (× its requests per second)", 1 / link.MAX_TIME_SCALE, link.MAX_TIME_SCALE,
                            step=0.5, key=_key("tscale"), format="%.2f",
                            help="2 plays the recording twice as fast (every gap halved), 0.5 half as fast.")
            w2.number_input("Start at minute", 0, last, step=1, key=_key("wstart"),
                            help=f"Where in the recording (minutes 0 to {last}) to start; the requests below are "
                                 "taken from there, in order.")
        r1, r2 = st.columns(2)
        r1.selectbox("Arrivals", ARRIVALS, key=_key("arrival"), disabled=trace is not None,
                     format_func=lambda a: {"poisson": "Poisson (steady)", "bursty": "bursty (clumps)"}[a])
        r2.number_input("Requests", 10, link.MAX_PAGE_REQUESTS, step=100, key=_key("n"))
        default_rate = works[st.session_state[_key("work")]].rate_per_s if trace is None else None
        st.number_input("Arrival rate (requests per second; 0 = the workload's own)", 0.0, 10_000.0, step=1.0,
                        key=_key("rate"), disabled=trace is not None,
                        help="A recording arrives at its own pace: use its time scale." if trace is not None else
                        f"This workload's own rate is {default_rate:g}/s: close to what the default deployment can "
                        "sustain.")
        p1, p2 = st.columns(2)
        p1.number_input("Prompt length × ", 0.1, 8.0, step=0.5, key=_key("pscale"), disabled=trace is not None,
                        help="Multiplies every prompt of the workload: watch what long prompts do to each policy.")
        p2.number_input("Seed", 0, 2**32 - 1, step=1, key=_key("seed"), disabled=trace is not None,
                        help="The same seed gives the same arrivals, so both policies see the same requests.")
        with st.expander("What the prompts share (for prefix caching)"):
            st.caption("Prompts that start alike let a prefix cache skip part of their prefill. Draw a shared "
                       "system prompt in front of each prompt, group requests into conversations whose every "
                       "turn re-sends the earlier ones, or both." + (" A recording brings its own (Mooncake's "
                                                                       "block ids)." if trace is not None else ""))
            s1, s2 = st.columns(2)
            s1.number_input("Shared system prompts (0 = none)", 0, 100, step=1, key=_key("sysn"),
                            disabled=trace is not None,
                            help="How many distinct system prompts; the first is the most popular (weights 1, "
                                 "1/2, 1/3, …).")
            s2.number_input("System prompt tokens", 1, 32_768, step=100, key=_key("syst"), disabled=trace is not None)
            c1_, c2_ = st.columns(2)
            c1_.number_input("Turns per conversation", 1, 20, step=1, key=_key("turns"), disabled=trace is not None,
                             help="Each later turn re-sends the conversation so far and is sent a think time after "
                                  "the previous answer's last token.")
            c2_.number_input("Think time (s)", 0.0, 600.0, step=1.0, key=_key("think"), disabled=trace is not None)
        with st.expander("Your own lengths"):
            st.caption("Replace the workload's mix with one log-normal shape of your own (0 keeps the workload's)."
                       + (" A recording keeps its own lengths." if trace is not None else ""))
            l1, l2, l3 = st.columns(3)
            l1.number_input("Prompt median", 0, 131_072, step=100, key=_key("pmed"), disabled=trace is not None)
            l2.number_input("Output median", 0, 131_072, step=50, key=_key("omed"), disabled=trace is not None)
            l3.number_input("Spread (σ of log)", 0.0, 3.0, step=0.1, key=_key("sigma"), disabled=trace is not None)
        st.file_uploader("…or replay an arrival file (JSONL or CSV)", type=["jsonl", "json", "csv"],
                         key=state.SV_UPLOAD, max_upload_size=2,  # MB: the box then says the real cap
                         help="One request per line: arrival_s, prompt_tokens, output_tokens (JSONL objects, or CSV "
                              "with those columns), or a trace in Mooncake's JSONL or the Azure trace's CSV; up to 2 MB "
                              "and 20,000 requests. Read as data and kept only in this browser session.")
        message = st.session_state.get(state.SV_UPLOAD_MESSAGE)
        if message:
            st.error(plain(message) + " Your settings are unchanged.")
        uploaded = st.session_state.get(state.SV_UPLOADED)
        if uploaded:
            st.checkbox(f"Replay {uploaded[0]} ({len(uploaded[1]):,} requests) instead of the workload",
                        key=state.SV_USE_UPLOAD)
    with c3:
        st.markdown("**The deployment**")
        st.selectbox("Model", list_model_presets(), key=_key("model"))
        st.selectbox("GPU", [h for h in hardware_presets() if h != HOST], key=_key("hw"))
        d1, d2 = st.columns(2)
        d1.selectbox("Weights and KV as", link.DTYPES, key=_key("dtype"))
        d2.number_input("GPUs per model copy", 1, 64, step=1, key=_key("tp"),
                        help="Tensor parallelism: one copy of the model split over this many GPUs.")
        st.number_input("Model copies", 1, 16, step=1, key=_key("inst"),
                        help="Copies serving side by side; the router below picks one for each request. Disaggregated "
                             "serving makes half of them prefill servers and half decode servers, so both "
                             "policies use the same number of GPUs.")
        st.slider("Rate sweep reaches (× the arrival rate)", 0.5, 4.0, step=0.25, key=_key("sweep"),
                  help="The throughput-against-p99-TPOT chart simulates six rates, evenly up to this multiple "
                       "of the arrival rate.")
        st.number_input("KV blocks per copy (0 = what memory holds)", 0, 10_000_000, step=500, key=_key("kv"),
                        help="Blocks of 16 tokens. Cut it to watch requests wait and decodes get preempted.")
        st.session_state.setdefault(_key("pcache"), link.DEFAULTS["pcache"])
        st.session_state[_key("pcache_on")] = bool(st.session_state[_key("pcache")])
        st.toggle("Prefix caching", key=_key("pcache_on"), on_change=_set_prefix_cache,
                  help="Each copy keeps full KV blocks by what they hold, so a prompt that starts like an earlier "
                       "one (a system prompt, the earlier turns of a conversation) skips that part of its "
                       "prefill, as vLLM's automatic prefix caching does. Recorded traces with prefixes: Mooncake.")
        if st.session_state[_key("pcache")]:  # the router reads the copies' caches: shown once they exist
            # the choice lives in its own key, kept while the box is hidden (Streamlit drops a hidden widget's)
            st.session_state.setdefault(_key("router"), link.DEFAULTS["router"])
            st.session_state[_key("router_pick")] = st.session_state[_key("router")]
            st.selectbox("Router", link.router_choices(), key=_key("router_pick"), on_change=_set_router,
                         format_func=lambda r: ROUTERS[r].label or r,
                         help="Which copy an arriving request goes to. "
                              + " ".join(f"{cls.label}: {cls.description}." for cls in ROUTERS.values()))
    settings = {key: st.session_state.get(_key(key), default) for key, default in link.DEFAULTS.items()}
    use = bool(uploaded) and st.session_state.get(state.SV_USE_UPLOAD, False)
    return {**settings, "uploaded": uploaded if use else None}


def sync_url(settings: dict[str, Any]) -> None:
    params = link.to_params({k: v for k, v in settings.items() if k in link.DEFAULTS})
    current = {k: st.query_params.get(k) for k in st.query_params}
    if current != params:
        st.query_params.from_dict(params)

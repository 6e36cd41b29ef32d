"""The what-if page: the same two phases priced for any model on any GPU, at any dtype and batch.

Thin: the controls live in app.views.whatif.settings, the numbers in core.whatif, the charts in
app.views.whatif.figures. Nothing here runs a model, so every number is predicted or counted.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared import experiment_results, host_points
from app.views.whatif import figures as figs
from app.views.whatif import settings as controls
from app.views.whatif import text
from core import whatif


def render() -> None:
    controls.apply_link_once()
    st.title(text.TITLE)
    st.caption("Nothing on this page runs a model. Every number is **counted** from the model's shapes (bytes, "
               "FLOPs) or **predicted** by the latency model: from the GPU's datasheet and the two efficiency "
               "assumptions you can edit, or, for this server, from its calibration. The live page measures the "
               "real thing; on this server the two are drawn together at the bottom.")
    settings = controls.render()
    controls.sync_url(settings)
    try:
        spec = controls.model_spec(settings["model"])
        hardware = controls.hardware(settings)
        s = whatif.on_hardware(controls.scenario(settings), hardware)
        ans = whatif.answer(spec, hardware, s, draft=controls.draft_spec(settings.get("draft", "")))
    except ValueError as exc:
        st.error(f"These settings cannot be priced: {exc}")
        return
    st.divider()
    _tiles(ans)
    st.markdown(text.summary(ans))
    left, right = st.columns(2, gap="large")
    with left:
        st.plotly_chart(figs.roofline(ans), key="wi_chart_roofline")
        st.plotly_chart(figs.bytes_by_context(whatif.bytes_per_step_by_context(spec, s), ans.crossover_tokens,
                                              s.batch), key="wi_chart_bytes")
        st.plotly_chart(figs.memory_stack(ans), key="wi_chart_memory")
    with right:
        st.plotly_chart(figs.batch_tradeoff(whatif.batch_sweep(spec, hardware, s), s.batch), key="wi_chart_batch")
        st.plotly_chart(figs.time_split(ans), key="wi_chart_split")
        if spec.is_moe:
            st.plotly_chart(figs.experts_read(whatif.experts_by_batch(spec), spec.n_experts, spec.experts_per_token,
                                              s.batch), key="wi_chart_experts")
    if hardware.measured:
        _this_server(spec, hardware, s)
    _sources(ans, hardware)


def _this_server(spec, hardware, s: whatif.Scenario) -> None:
    """The prediction beside what the live page measured on this machine, each point labelled."""
    st.subheader("This server: predicted beside measured")
    points = host_points.comparable(host_points.all_points())
    batching = experiment_results.shown_before_press("batching")
    same = host_points.same_setup(spec.name, s.weight_dtype, s.kv_dtype)
    if not same:
        st.info(f"The measured points are runs of the live page's model ({whatif.EMBEDDED_PRESET}, fp32 weights, "
                "fp32 cache). Pick that model and fp32 for both to set them beside the prediction; for "
                f"{spec.name} the lines are the same method away from home (the predictor fitted on the "
                "live page's model, applied to this shape).")
    context = None
    if batching:
        context = int(batching.result.get("prompt_len", s.prompt_len)) + int(batching.result.get("steps", 0)) // 2
    curves = whatif.host_curves(spec, hardware, s, batch_context=context)
    st.plotly_chart(figs.host_measured(curves, points if same else [],
                                       batching.result["rows"] if (same and batching) else [],
                                       batching_label=text.batching_label(batching)), key="wi_chart_host")
    st.caption("Hover a point for where it came from. Recordings were made on another machine of this kind "
               "(their CPU is named), so expect them to sit off this server's line by its difference in "
               "speed; live runs land here as readers press Generate on the live page. A step's measured time "
               "is the median of its run's decode steps, placed at the median context they attended over.")


def _tiles(ans: whatif.Answer) -> None:
    m = ans.memory
    cols = st.columns(5)
    cached = ans.settings.cached_prefix
    cols[0].metric("Time to first token", text.ms(ans.ttft_s),
                   help=(f"predicted: the prefill of the prompt's uncached part over its {cached:,} cached tokens "
                         f"({text.ms(ans.ttft_uncached_s)} with nothing cached)"
                         if cached else "predicted: the prefill of the whole prompt"))
    cols[1].metric("Time per output token", text.ms(ans.tpot_s),
                   help="predicted: the mean decode step, priced step by step as the cache grows")
    rate = ans.tokens_per_s_total
    cols[2].metric("Tokens per second", "–" if rate is None else f"{rate:,.0f}",
                   help="predicted: all sequences of the batch together")
    cols[3].metric("Whole answer", text.ms(ans.total_s), help="predicted: prefill plus every decode step")
    cols[4].metric("Memory" if ans.tp == 1 else "Memory per device", text.gb(m.total),
                   help="counted: weights and the final KV cache; activations estimated")
    verdict = "fits" if m.fits else f"does not fit: needs {m.devices_needed} devices' memory"
    cols[4].caption(f"of {m.capacity / 1e9:,.0f} GB per device: {verdict}")


def _sources(ans: whatif.Answer, hardware: Any) -> None:
    with st.expander("Sources and assumptions"):
        a = ans.assumptions
        if hardware.measured:
            fit = text.host_fit(ans.host_fit)
            assumed = ("Calibrated, not assumed: this server's measured bandwidth (per matrix width), matmul "
                       f"peak and per-forward overheads, with coefficients {fit}. The efficiency sliders do not "
                       "apply here.")
        else:
            assumed = (f"Assumed: {a['bandwidth_efficiency']:.0%} of the bandwidth, {a['compute_efficiency']:.0%} "
                       f"of the FLOP/s, {a['overhead_step_s'] * 1e6:.0f} µs per forward plus "
                       f"{a['overhead_layer_s'] * 1e6:.0f} µs per layer of launch overhead.")
        st.markdown(
            f"- **{hardware.label}** ({hardware.variant}): {hardware.source}\n"
            f"- {hardware.notes}\n"
            f"- Model: {ans.model}, {ans.params:,} parameters (counted from its config).\n"
            f"- {assumed}\n"
            "- Tensor parallelism: two ring all-reduces of the activations per layer over the preset's link "
            "(per-direction bandwidth, cited latency). Mixtures of experts: uniform routing over the experts.")

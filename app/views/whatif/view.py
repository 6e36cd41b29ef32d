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
from core import whatif
from core.hardware import CUSTOM, HOST

TITLE = "What if: any model, any GPU"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:,.1f} MB"


def scenario(settings: dict[str, Any]) -> whatif.Scenario:
    return whatif.Scenario(batch=int(settings["batch"]), prompt_len=int(settings["prompt"]),
                           gen_len=int(settings["gen"]), weight_dtype=settings["w"], kv_dtype=settings["kv"],
                           compute_dtype=settings.get("c", "bf16"),
                           assumptions={"bandwidth_efficiency": float(settings["bw_eff"]),
                                        "compute_efficiency": float(settings["c_eff"])},
                           spec_gamma=int(settings.get("gamma", 4)), spec_alpha=float(settings.get("alpha", 0.7)),
                           tp=int(settings.get("tp", 1)))


def render() -> None:
    controls.apply_link_once()
    st.title(TITLE)
    st.caption("Nothing on this page runs a model. Every number is **counted** from the model's shapes (bytes, "
               "FLOPs) or **predicted** by the latency model: from the GPU's datasheet and the two efficiency "
               "assumptions you can edit, or, for this server, from its calibration. The live page measures the "
               "real thing; on this server the two are drawn together at the bottom.")
    settings = controls.render()
    controls.sync_url(settings)
    try:
        spec = controls.model_spec(settings["model"])
        hardware = controls.hardware(settings)
        s = whatif.on_hardware(scenario(settings), hardware)
        ans = whatif.answer(spec, hardware, s, draft=controls.draft_spec(settings.get("draft", "")))
    except ValueError as exc:
        st.error(f"These settings cannot be priced: {exc}")
        return
    st.divider()
    _tiles(ans)
    st.markdown(summary(ans))
    left, right = st.columns(2, gap="large")
    with left:
        st.plotly_chart(figs.roofline(ans), key="wi_chart_roofline")
        st.plotly_chart(figs.bytes_by_context(whatif.bytes_per_step_by_context(spec, s), ans["crossover_tokens"],
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
                                       batching_label=_batching_label(batching)), key="wi_chart_host")
    st.caption("Hover a point for where it came from. Recordings were made on another machine of this kind "
               "(their CPU is named), so expect them to sit off this server's line by its difference in "
               "speed; live runs land here as readers press Generate on the live page. A step's measured time "
               "is the median of its run's decode steps, placed at the median context they attended over.")


def _batching_label(m) -> str:
    if m is None:
        return ""
    if m.source == "bundled":
        return f"batching recording ({m.machine}, {m.measured_at:%Y-%m-%d})"
    return f"batching panel, measured on this server at {m.measured_at:%H:%M}"


def _tiles(ans: dict[str, Any]) -> None:
    m = ans["memory"]
    cols = st.columns(5)
    cols[0].metric("Time to first token", _ms(ans["ttft_s"]), help="predicted: the prefill of the whole prompt")
    cols[1].metric("Time per output token", _ms(ans["tpot_s"]),
                   help="predicted: the mean decode step, priced step by step as the cache grows")
    rate = ans["tokens_per_s_total"]
    cols[2].metric("Tokens per second", "–" if rate is None else f"{rate:,.0f}",
                   help="predicted: all sequences of the batch together")
    cols[3].metric("Whole answer", _ms(ans["total_s"]), help="predicted: prefill plus every decode step")
    cols[4].metric("Memory" if ans["tp"] == 1 else "Memory per device", _gb(m["total"]),
                   help="counted: weights and the final KV cache; activations estimated")
    verdict = "fits" if m["fits"] else f"does not fit: needs {m['devices_needed']} devices' memory"
    cols[4].caption(f"of {m['capacity'] / 1e9:,.0f} GB per device: {verdict}")


def summary(ans: dict[str, Any]) -> str:
    """The answer in words, every number taken from `ans`."""
    st_ = ans["settings"]
    pre, dec, floors = ans["prefill"], ans["decode_step"], ans["floors"]
    ridge = ans["ridge_effective"]
    pre_side = "above" if pre["intensity"] >= ridge else "below"
    dec_side = "above" if dec["intensity"] >= ridge else "below"
    host = ans["hardware"] == HOST
    where = "this server" if host else "this GPU"
    ceilings = "its measured ceilings" if host else "after the assumed efficiencies"
    source = "the measured" if host else "your figures'" if ans["hardware"] == CUSTOM else "the datasheet"
    lines = [
        f"**{ans['model']}** ({ans['params'] / 1e9:,.2f} billion parameters) on **{ans['hardware_label']}**, "
        f"weights in {st_['weight_dtype']}, KV cache in {st_['kv_dtype']}:",
        f"**Prefill** of {st_['prompt_len']:,} tokens × batch {st_['batch']}: {pre['intensity']:,.0f} FLOPs per byte "
        f"moved (counted), {pre_side} {where}'s ridge of {ridge:,.0f} ({ceilings}), so it is "
        f"{'compute' if pre_side == 'above' else 'bandwidth'}-bound: **{_ms(pre['time_s'])}** predicted, against "
        f"{_ms(floors['prefill_s'])} if every FLOP ran at {source} peak.",
        f"**Decode**: a typical step ({dec['n_cached']:,} tokens in the cache) does {dec['intensity']:.2f} FLOPs per "
        f"byte, {dec_side} the ridge: **{_ms(dec['time_s'])}** predicted, against {_ms(floors['decode_step_s'])} "
        f"for its weight and cache bytes at {source} bandwidth.",
    ]
    if ans.get("n_experts"):
        e, k, read = ans["n_experts"], ans["experts_per_token"], ans["experts_read_per_layer"]
        lines.append(
            f"**Mixture of experts**: each layer holds {e} experts and routes every token to {k} of them, so a "
            f"token runs through {ans['active_params'] / 1e9:,.1f} billion of the {ans['params'] / 1e9:,.1f} billion "
            f"parameters, while memory holds them all. A decode step at batch {st_['batch']} reads about "
            f"**{read:.1f} of the {e} experts** per layer (counted, if the router spreads tokens evenly: "
            f"{e} × (1 − (1 − {k}/{e})^{st_['batch']})): alone, a sequence reads only its {k}; a crowd of "
            f"sequences reads nearly all of them, so a step's weight bytes grow with the batch until every "
            "expert is read; past that point extra sequences share the weight read as in a dense model.")
    lat = ans.get("latent")
    if lat:
        lines.append(
            f"**Multi-head latent attention**: instead of a key and a value for every head, each layer caches "
            f"one compressed latent of {lat['kv_lora_rank']} numbers plus a {lat['rope_dim']}-number position key "
            f"that all heads share: {lat['kv_bytes_per_token']:,} bytes per token (counted), where full heads would "
            f"keep {lat['multi_head_bytes_per_token']:,} (×{lat['multi_head_bytes_per_token'] / lat['kv_bytes_per_token']:,.0f}). "
            + (f"Serving engines (vLLM, SGLang) fold the latent's up-projection into the query and output and "
               f"attend over the latent directly in decode: {lat['step_flops_serving'] / 1e9:,.1f} GFLOPs for the "
               "typical step. Priced here as this server's runner (transformers) runs it, re-expanding every "
               f"cached position each step: {lat['step_flops_transformers'] / 1e9:,.1f} GFLOPs (counted)."
               if lat["priced_form"] == "transformers" else
               "Priced here as serving engines (vLLM, SGLang) run it: a decode step folds the latent's "
               "up-projection into its query and output and attends over the latent directly; a prefill expands "
               f"the latent into full keys and values. The typical step does {lat['step_flops_serving'] / 1e9:,.1f} "
               f"GFLOPs that way; run as transformers runs it, re-expanding every cached position, it would do "
               f"{lat['step_flops_transformers'] / 1e9:,.1f} (counted)."))
    b = ans["compute_bound_batch"]
    if b is None:
        extra = ans["per_extra_sequence_s"]
        lines.append(f"**Batching**: up to batch {whatif.MAX_BATCH:,} decode stays bandwidth-bound at this context: "
                     f"each extra sequence adds {extra['kv'] * 1e6:,.1f} µs of its own cache reads and "
                     f"{extra['compute'] * 1e6:,.1f} µs of arithmetic (predicted), and even at batch "
                     f"{whatif.MAX_BATCH:,} the arithmetic stays shorter than the time to move the weights and "
                     "every sequence's cache, so the step never becomes compute-bound. A shorter context or a "
                     "smaller KV dtype moves the turn closer.")
    else:
        lines.append(f"**Batching**: decode stops being bandwidth-bound from batch **{b:,}** (predicted): below it, "
                     "extra sequences ride on the same weight read almost for free.")
    if ans["tp"] > 1:
        lines.append(
            f"**Split over {ans['tp']} devices** (tensor parallelism): each holds 1/{ans['tp']} of the weights and "
            f"computes 1/{ans['tp']} of every matrix product, then two all-reduces per layer over "
            f"{ans['interconnect']} stitch the halves back together: {_ms(ans['decode_step']['terms_s']['allreduce'])} "
            f"of each decode step and {_ms(ans['prefill']['terms_s']['allreduce'])} of the prefill (predicted). "
            f"{ans['kv_split']}")
    sp = ans.get("speculative")
    if sp:
        lines.append(
            f"**Speculative decoding** with {sp['draft']} drafting γ = {sp['gamma']} tokens, each accepted with "
            f"probability α = {sp['alpha']:.2f}: a check yields {sp['expected_tokens_per_round']:.2f} tokens on "
            f"average. The check is one forward of {sp['gamma'] + 1} tokens that reads "
            f"{sp['verify_bytes_over_step_bytes']:.2f}× the bytes of one plain decode step (the weights once) but "
            f"does {sp['verify_flops_over_step_flops']:.1f}× its FLOPs, so it costs {_ms(sp['verify_s'])} against "
            f"{_ms(sp['plain_step_s'])}: the memory-bound lesson seen from the other side. With the draft's "
            f"{sp['gamma']} steps of {_ms(sp['draft_step_s'])}, the time per output token becomes "
            f"**{_ms(sp['tpot_s'])}** (predicted, ×{sp['speedup']:.2f} against plain decode at this context).")
    m = ans["memory"]
    if not m["fits"]:
        lines.append(f"**Memory**: {_gb(m['total'])} needed against {_gb(m['capacity'])} on one device: "
                     f"{_gb(m['shortfall'])} short, so it needs at least {m['devices_needed']} devices' memory "
                     "(the times above are for one device that could hold it all).")
    else:
        lines.append(f"**Memory**{' per device' if ans['tp'] > 1 else ''}: {_gb(m['total'])} of {_gb(m['capacity'])}; "
                     "the largest batch that fits at these "
                     f"lengths is about {m['max_batch']:,}.")
    lines.append(f"KV traffic overtakes weight traffic at **{ans['crossover_tokens']:,.0f} tokens** of context "
                 f"at this batch (counted).")
    return "\n\n".join(lines)


def _sources(ans: dict[str, Any], hardware: Any) -> None:
    with st.expander("Sources and assumptions"):
        a = ans["assumptions"]
        if hardware.measured:
            fit = ans.get("host_fit") or "no fit yet: the unfitted roofline coefficients"
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
            f"- Model: {ans['model']}, {ans['params']:,} parameters (counted from its config).\n"
            f"- {assumed}\n"
            "- Tensor parallelism: two ring all-reduces of the activations per layer over the preset's link "
            "(per-direction bandwidth, cited latency). Mixtures of experts: uniform routing over the experts.")

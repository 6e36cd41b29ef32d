"""The what-if page's words: its title, number formats, and the answer in sentences, every number
taken from core.whatif's answer."""

from __future__ import annotations

from core import whatif
from core.hardware import CUSTOM, HOST

TITLE = "What if: any model, any GPU"


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:,.1f} MB"


def batching_label(m) -> str:
    if m is None:
        return ""
    if m.source == "bundled":
        return f"batching recording ({m.machine}, {m.measured_at:%Y-%m-%d})"
    return f"batching panel, measured on this server at {m.measured_at:%H:%M}"


def _prefill_what(s) -> str:
    """The prefill's tokens in words: the whole prompt, or the part a cached prefix leaves."""
    if not s.cached_prefix:
        return f"{s.prompt_len:,} tokens"
    return (f"the last {s.prefill_tokens:,} of {s.prompt_len:,} prompt tokens (the first {s.cached_prefix:,} are "
            "cached: their keys and values are read once, not computed)")


def summary(ans: whatif.Answer) -> str:
    """The answer in words, every number taken from `ans`."""
    st_ = ans.settings
    pre, dec, floors = ans.prefill, ans.decode_step, ans.floors
    ridge = ans.ridge_effective
    pre_side = "above" if pre.intensity >= ridge else "below"
    dec_side = "above" if dec.intensity >= ridge else "below"
    host = ans.hardware == HOST
    where = "this server" if host else "this GPU"
    ceilings = "its measured ceilings" if host else "after the assumed efficiencies"
    source = "the measured" if host else "your figures'" if ans.hardware == CUSTOM else "the datasheet"
    lines = [
        f"**{ans.model}** ({ans.params / 1e9:,.2f} billion parameters) on **{ans.hardware_label}**, "
        f"weights in {st_.weight_dtype}, KV cache in {st_.kv_dtype}:",
        f"**Prefill** of {_prefill_what(st_)} × batch {st_.batch}: {pre.intensity:,.0f} FLOPs per byte "
        f"moved (counted), {pre_side} {where}'s ridge of {ridge:,.0f} ({ceilings}), so it is "
        f"{'compute' if pre_side == 'above' else 'bandwidth'}-bound: **{ms(pre.time_s)}** predicted, against "
        f"{ms(floors.prefill_s)} if every FLOP ran at {source} peak"
        + (f"; with nothing cached the same prompt's prefill would take **{ms(ans.ttft_uncached_s)}**."
           if ans.ttft_uncached_s else "."),
        f"**Decode**: a typical step ({dec.n_cached:,} tokens in the cache) does {dec.intensity:.2f} FLOPs per "
        f"byte, {dec_side} the ridge: **{ms(dec.time_s)}** predicted, against {ms(floors.decode_step_s)} "
        f"for its weight and cache bytes at {source} bandwidth.",
    ]
    if ans.n_experts:
        e, k, read = ans.n_experts, ans.experts_per_token, ans.experts_read_per_layer
        lines.append(
            f"**Mixture of experts**: each layer holds {e} experts and routes every token to {k} of them, so a "
            f"token runs through {ans.active_params / 1e9:,.1f} billion of the {ans.params / 1e9:,.1f} billion "
            f"parameters, while memory holds them all. A decode step at batch {st_.batch} reads about "
            f"**{read:.1f} of the {e} experts** per layer (counted, if the router spreads tokens evenly: "
            f"{e} × (1 − (1 − {k}/{e})^{st_.batch})): alone, a sequence reads only its {k}; a crowd of "
            f"sequences reads nearly all of them, so a step's weight bytes grow with the batch until every "
            "expert is read; past that point extra sequences share the weight read as in a dense model.")
    lat = ans.latent
    if lat:
        lines.append(
            f"**Multi-head latent attention**: instead of a key and a value for every head, each layer caches "
            f"one compressed latent of {lat.kv_lora_rank} numbers plus a {lat.rope_dim}-number position key "
            f"that all heads share: {lat.kv_bytes_per_token:,} bytes per token (counted), where full heads would "
            f"keep {lat.multi_head_bytes_per_token:,} (×{lat.multi_head_bytes_per_token / lat.kv_bytes_per_token:,.0f}). "
            + (f"Serving engines (vLLM, SGLang) fold the latent's up-projection into the query and output and "
               f"attend over the latent directly in decode: {lat.step_flops_serving / 1e9:,.1f} GFLOPs for the "
               "typical step. Priced here as this server's runner (transformers) runs it, re-expanding every "
               f"cached position each step: {lat.step_flops_transformers / 1e9:,.1f} GFLOPs (counted)."
               if lat.priced_form == "transformers" else
               "Priced here as serving engines (vLLM, SGLang) run it: a decode step folds the latent's "
               "up-projection into its query and output and attends over the latent directly; a prefill expands "
               f"the latent into full keys and values. The typical step does {lat.step_flops_serving / 1e9:,.1f} "
               f"GFLOPs that way; run as transformers runs it, re-expanding every cached position, it would do "
               f"{lat.step_flops_transformers / 1e9:,.1f} (counted)."))
    b = ans.compute_bound_batch
    if b is None:
        extra = ans.per_extra_sequence_s
        lines.append(f"**Batching**: up to batch {whatif.MAX_BATCH:,} decode stays bandwidth-bound at this context: "
                     f"each extra sequence adds {extra.kv * 1e6:,.1f} µs of its own cache reads and "
                     f"{extra.compute * 1e6:,.1f} µs of arithmetic (predicted), and even at batch "
                     f"{whatif.MAX_BATCH:,} the arithmetic stays shorter than the time to move the weights and "
                     "every sequence's cache, so the step never becomes compute-bound. A shorter context or a "
                     "smaller KV dtype moves the turn closer.")
    else:
        lines.append(f"**Batching**: decode stops being bandwidth-bound from batch **{b:,}** (predicted): below it, "
                     "extra sequences ride on the same weight read almost for free.")
    if ans.tp > 1:
        lines.append(
            f"**Split over {ans.tp} devices** (tensor parallelism): each holds 1/{ans.tp} of the weights and "
            f"computes 1/{ans.tp} of every matrix product, then two all-reduces per layer over "
            f"{ans.interconnect} stitch the halves back together: {ms(ans.decode_step.terms_s['allreduce'])} "
            f"of each decode step and {ms(ans.prefill.terms_s['allreduce'])} of the prefill (predicted). "
            f"{kv_split(ans)}")
    sp = ans.speculative
    if sp:
        lines.append(
            f"**Speculative decoding** with {sp.draft} drafting γ = {sp.gamma} tokens, each accepted with "
            f"probability α = {sp.alpha:.2f}: a check yields {sp.expected_tokens_per_round:.2f} tokens on "
            f"average. The check is one forward of {sp.gamma + 1} tokens that reads "
            f"{sp.verify_bytes_over_step_bytes:.2f}× the bytes of one plain decode step (the weights once) but "
            f"does {sp.verify_flops_over_step_flops:.1f}× its FLOPs, so it costs {ms(sp.verify_s)} against "
            f"{ms(sp.plain_step_s)}: the memory-bound lesson seen from the other side. With the draft's "
            f"{sp.gamma} steps of {ms(sp.draft_step_s)}, the time per output token becomes "
            f"**{ms(sp.tpot_s)}** (predicted, ×{sp.speedup:.2f} against plain decode at this context).")
    m = ans.memory
    if not m.fits:
        lines.append(f"**Memory**: {gb(m.total)} needed against {gb(m.capacity)} on one device: "
                     f"{gb(m.shortfall)} short, so it needs at least {m.devices_needed} devices' memory "
                     "(the times above are for one device that could hold it all).")
    else:
        lines.append(f"**Memory**{' per device' if ans.tp > 1 else ''}: {gb(m.total)} of {gb(m.capacity)}; "
                     "the largest batch that fits at these "
                     f"lengths is about {m.max_batch:,}.")
    lines.append(f"KV traffic overtakes weight traffic at **{ans.crossover_tokens:,.0f} tokens** of context "
                 f"at this batch (counted).")
    return "\n\n".join(lines)


def kv_split(ans: whatif.Answer) -> str:
    """How tensor parallelism shares this model's KV cache, in words (Answer.kv_split says which)."""
    if ans.kv_split == "latent":
        return ("But this model caches one latent per layer that every head reads (multi-head latent "
                "attention): each device keeps all of it, so the cache is copied, not split.")
    if ans.kv_split == "split":
        return "The KV cache is split too: its heads are divided between the devices."
    return (f"But this model has only {ans.n_kv_heads} KV heads: past {ans.n_kv_heads} devices each keeps "
            "a whole head, so the cache is copied, not split, and each device's share stops shrinking.")


def host_fit(fit: whatif.HostFit | None) -> str:
    """How this server's predictor got its coefficients, in words."""
    if fit is None:
        return "no fit yet: the unfitted roofline coefficients"
    values = f"memory {fit.memory:.2f}, KV {fit.kv:.2f}, arithmetic {fit.compute:.2f}"
    if fit.transferred_from:
        return f"fitted on {fit.transferred_from}'s forwards on this server and carried over to this shape ({values})"
    return f"fitted on this model's own forwards on this server ({values})"

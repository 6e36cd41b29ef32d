"""What-if answers: one model on one datasheet machine at one setting, predicted without running it.

The what-if page asks "what does prefill and decode cost for model X on GPU Y at batch B with
dtype D?". Everything here is a pure function of a `Scenario`: the cost model counts FLOPs and
bytes (core.cost), the preset predictor prices them with stated efficiency assumptions
(core.predictor.preset_predictor). Nothing is measured, so every figure is a prediction or a count.

Decode is priced over every step as the cache grows, in closed form: the predictor is a sum of
terms linear in a forward's bytes and FLOPs plus a fixed overhead, so the sum of the step
predictions equals the prediction of the summed step costs plus the overhead of the other steps.
That keeps a full answer, sweeps included, within a few milliseconds of Python.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core import perf
from core.cost import FLOP_PARTS, estimate, forward_cost, step_cost
from core.dtypes import default_companion_dtype, nbytes, normalize_dtype
from core.hardware import HardwareSpec
from core.predictor import PRESET_ASSUMPTIONS, Predictor, preset_predictor
from core.spec import ModelSpec

MAX_BATCH = 4096
MAX_TP = 64
BATCH_SWEEP = tuple(2 ** k for k in range(13))  # 1 .. 4096
COMPUTE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")  # int4 has no matmul peak of its own


@dataclass(frozen=True)
class Scenario:
    """The reader's settings. `compute_dtype` is the matmul path whose peak prices the FLOPs: by
    default the weight dtype, or bf16 for int4 weights (they are expanded before multiplying)."""

    batch: int = 1
    prompt_len: int = 1024
    gen_len: int = 256
    weight_dtype: str = "bf16"
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    assumptions: dict[str, float] = field(default_factory=lambda: dict(PRESET_ASSUMPTIONS))
    spec_gamma: int = 4  # speculative decoding: draft tokens per verification (used when a draft is given)
    spec_alpha: float = 0.7  # probability the target accepts each draft token
    tp: int = 1  # tensor parallelism: devices one copy of the model is split over
    mla_form: str = "serving"  # latent attention as serving engines run it; "transformers" on this server

    def resolved(self) -> Scenario:
        """The same settings with every dtype normalised and every default filled in."""
        w = normalize_dtype(self.weight_dtype)
        kv = normalize_dtype(self.kv_dtype) if self.kv_dtype else default_companion_dtype(w)
        compute = normalize_dtype(self.compute_dtype) if self.compute_dtype else ("bf16" if w == "int4" else w)
        if compute not in COMPUTE_DTYPES:
            raise ValueError(f"compute dtype {compute} has no matmul peak; pick one of {', '.join(COMPUTE_DTYPES)}")
        return Scenario(self.batch, self.prompt_len, self.gen_len, w, kv, compute,
                        {**PRESET_ASSUMPTIONS, **self.assumptions}, self.spec_gamma, self.spec_alpha, self.tp,
                        self.mla_form)


def check(spec: ModelSpec, s: Scenario) -> None:
    """ValueError, in words a reader understands, for settings no model could run."""
    for name, value, low, high in (("batch", s.batch, 1, MAX_BATCH), ("prompt length", s.prompt_len, 1, None),
                                   ("output length", s.gen_len, 1, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            limit = f" and at most {high:,}" if high else ""
            raise ValueError(f"{name} must be a whole number of at least {low}{limit}, got {value!r}")
    if isinstance(s.tp, bool) or not isinstance(s.tp, int) or not 1 <= s.tp <= min(MAX_TP, spec.n_heads):
        raise ValueError(f"tensor parallelism must be a whole number from 1 to {min(MAX_TP, spec.n_heads)} "
                         f"(this model has {spec.n_heads} attention heads to split), got {s.tp!r}")
    if s.prompt_len + s.gen_len - 1 > spec.max_positions:
        raise ValueError(f"prompt ({s.prompt_len:,}) + output ({s.gen_len:,}) tokens exceed {spec.name}'s context "
                         f"window of {spec.max_positions:,} tokens")


def predictor(spec: ModelSpec, hardware: HardwareSpec, s: Scenario) -> Predictor:
    s = s.resolved()
    if hardware.measured:
        return host_predictor(spec, hardware, s.weight_dtype)
    return preset_predictor(spec, hardware, s.compute_dtype, s.assumptions)


HOST_DTYPES = ("fp32", "bf16")  # what this project's runner can run a model in on this server
EMBEDDED_PRESET = "smollm2-135m"  # the model whose forwards the host predictor is fitted on


def host_predictor(spec: ModelSpec, hardware: HardwareSpec, dtype: str) -> Predictor:
    """This server's calibrated predictor for any model: the measured ceilings and overheads for the
    model's shape, with the coefficients fitted on the embedded model's forwards (the same method
    `core bench --transfer` measures away from home), or the model's own fit where it has one.
    Uses the calibration `hardware` carries; never measures."""
    from core import calibrate
    from core import predictor as P
    from core.spec import load_model_preset

    if dtype not in HOST_DTYPES:
        raise ValueError(f"this server runs models in {' or '.join(HOST_DTYPES)} only (its runner has no "
                         f"{dtype} kernels): pick one of those for the weights, or a GPU preset")
    cal = calibrate.Calibration.from_dict(hardware.calibration or {})
    own = P.host_predictor(spec, dtype, calibration=cal)
    if own.fitted:
        return own
    embedded = P.host_predictor(load_model_preset(EMBEDDED_PRESET), dtype, calibration=cal)
    if not embedded.fitted:
        return own  # no fit on this server yet: the roofline coefficients (1.0), said by describe()
    return replace(own, coef=dict(embedded.coef), fitted=True,
                   fit_info={**(embedded.fit_info or {}), "transferred_from": EMBEDDED_PRESET})


def on_hardware(s: Scenario, hardware: HardwareSpec) -> Scenario:
    """The settings as `hardware` runs them: on this server (the calibrated host) the runner
    multiplies in the weights' dtype, runs latent attention as transformers does, and has no
    second device to split a model over."""
    if not hardware.measured:
        return s.resolved()
    w = normalize_dtype(s.weight_dtype)
    if w not in HOST_DTYPES:
        raise ValueError(f"this server runs models in {' or '.join(HOST_DTYPES)} only (its runner has no "
                         f"{w} kernels): pick one of those for the weights, or a GPU preset")
    s = replace(s, compute_dtype=w).resolved()
    if s.tp != 1:
        raise ValueError("tensor parallelism needs GPUs linked to each other: this server is one machine")
    return replace(s, mla_form="transformers", compute_dtype=s.weight_dtype)


def _kwargs(s: Scenario) -> dict[str, Any]:
    # datasheet machines run serving engines (latent attention takes the cheaper form per row);
    # this server runs transformers, which re-expands the latent
    return {"weight_dtype": s.weight_dtype, "kv_dtype": s.kv_dtype, "lm_head_tokens": 1, "mla_form": s.mla_form}


def decode_time_s(pred: Predictor, decode: dict[str, Any]) -> float:
    """Predicted time of all decode steps from their summed cost (core.cost.estimate's "decode")."""
    steps = decode["steps"]
    if steps == 0:
        return 0.0
    summed = {"bytes": decode["bytes"], "flops": {**decode["flops_by_part"], "total": decode["flops"]}, "n_new": 1}
    extra_overheads = (steps - 1) * pred.coef["overhead"] * pred.overhead_s
    return pred.predict_s(summed, "decode") + extra_overheads


# --- tensor parallelism ---------------------------------------------------------------------

def kv_share(spec: ModelSpec, tp: int) -> float:
    """Fraction of the KV cache one device holds: KV heads split while tp <= their number; past
    that every device keeps a whole head (multi-query models replicate their one head everywhere)."""
    return math.ceil(spec.n_kv_heads / tp) / spec.n_kv_heads


def per_device(cost: dict[str, Any], spec: ModelSpec, tp: int) -> dict[str, Any]:
    """One device's share of a forward under tensor parallelism: weights, activations and FLOPs
    split tp ways (attention heads and MLP columns are divided), the cache by kv_share."""
    share = kv_share(spec, tp)
    b = {"weights": cost["bytes"]["weights"] / tp, "activations": cost["bytes"]["activations"] / tp,
         "kv_read": cost["bytes"]["kv_read"] * share, "kv_write": cost["bytes"]["kv_write"] * share}
    b["total"] = sum(b.values())
    flops = {k: v / tp for k, v in cost["flops"].items()}
    return {**cost, "bytes": b, "flops": flops}


def allreduce_s(spec: ModelSpec, hardware: HardwareSpec, tp: int, tokens: int, act_dtype: str) -> float:
    """Two all-reduces of the activations per layer (after attention and after the MLP), each a
    ring: 2(p-1) hops of latency and 2(p-1)/p of the message over the per-direction link."""
    if tp == 1:
        return 0.0
    link = hardware.interconnect
    if link is None:
        raise ValueError(f"{hardware.label} has no device-to-device link in its preset: tensor parallelism "
                         "cannot be priced on it")
    message = nbytes(tokens * spec.hidden, act_dtype)
    one = 2 * (tp - 1) * link.latency_s + 2 * (tp - 1) / tp * message / link.bandwidth_bytes_per_s
    return 2 * spec.n_layers * one


def step_time_s(spec: ModelSpec, hardware: HardwareSpec, s: Scenario, rows, pred: Predictor | None = None) -> float:
    """Predicted seconds of one serving iteration whose rows are (n_new, n_cached[, count]), on s.tp
    devices: one device's share of the step's cost (core.cost.step_cost), priced by the predictor,
    plus the all-reduces of every token in it.

    The predictor's rule for a mixed step follows from the cost being one forward: the fixed
    overhead is paid once, the weights are streamed once for every row, each row adds its own
    FLOPs, cache traffic and activations, and the multi-token extra is paid once if any row feeds
    more than one token (a prefill chunk among decodes still builds a causal mask).
    """
    s = s.resolved()
    pred = pred or predictor(spec, hardware, s)
    cost = step_cost(spec, rows, **_kwargs(s))
    tokens = sum(r[0] * (r[2] if len(r) == 3 else 1) for r in rows)
    act_dt = default_companion_dtype(s.weight_dtype)
    return (pred.predict_s(per_device(cost.to_dict(), spec, s.tp), "decode")
            + allreduce_s(spec, hardware, s.tp, tokens, act_dt))


def kv_blocks_available(spec: ModelSpec, hardware: HardwareSpec, s: Scenario, block_tokens: int = 16,
                        utilization: float = 0.9) -> int:
    """Paged KV blocks of `block_tokens` positions that fit in one copy of the model's devices: the
    memory a serving engine claims (vLLM's default gpu_memory_utilization, 0.9) less the weights,
    divided by one block's bytes on a device."""
    s = s.resolved()
    act_dt = default_companion_dtype(s.weight_dtype)
    room = utilization * hardware.memory_bytes - weight_memory_bytes(spec, s.weight_dtype, act_dt) / s.tp
    block = nbytes(spec.n_layers * spec.kv_width * block_tokens, s.kv_dtype) * kv_share(spec, s.tp)
    return max(0, int(room // block))


def weight_memory_bytes(spec: ModelSpec, weight_dtype: str, vector_dtype: str) -> int:
    """Bytes the weights take in device memory: matrices in the weight dtype, biases and norms
    (small vectors a quantised checkpoint keeps in a float type) in the activation dtype."""
    vectors = spec.attn_bias_params + spec.mlp_bias_params + spec.params_norm
    return nbytes(spec.params_total - vectors, weight_dtype) + nbytes(vectors, vector_dtype)


def activation_memory_bytes(spec: ModelSpec, batch: int, tokens: int, act_dtype: str) -> int:
    """A rough peak of the activations during the prefill: the widest layer's input and output for
    every prompt token of every row, plus the last position's logits. An estimate: real engines
    free and reuse buffers, and attention kernels never hold the score matrix whole."""
    widest = max(spec.q_dim + spec.kv_width, (1 + spec.mlp_in_matrices) * spec.mlp_width)
    return nbytes(batch * tokens * (spec.hidden + widest), act_dtype) + nbytes(batch * spec.vocab, "fp32")


def device_memory(spec: ModelSpec, s: Scenario, est: dict[str, Any]) -> tuple[int, int, int]:
    """(weights, final KV cache, prefill activations) one device holds, in whole bytes, for the
    generation `est` (core.cost.estimate at s's batch) split over s.tp devices."""
    act_dt = est["dtypes"]["activations"]
    return (math.ceil(weight_memory_bytes(spec, s.weight_dtype, act_dt) / s.tp),
            math.ceil(est["kv_bytes_final"] * kv_share(spec, s.tp)),
            math.ceil(activation_memory_bytes(spec, s.batch, s.prompt_len, act_dt) / s.tp))


def answer(spec: ModelSpec, hardware: HardwareSpec, scenario: Scenario,
           draft: ModelSpec | None = None) -> dict[str, Any]:
    """Every figure the what-if page shows for one setting, as plain numbers (seconds, bytes).
    With a `draft` model, "speculative" prices speculative decoding beside plain decode."""
    s = on_hardware(scenario, hardware)
    check(spec, s)
    pred = predictor(spec, hardware, s)
    kw = _kwargs(s)
    est = estimate(spec, s.prompt_len, s.gen_len, s.batch, s.weight_dtype, s.kv_dtype, mla_form=s.mla_form)
    act_dt = est["dtypes"]["activations"]
    prefill_cost = forward_cost(spec, s.prompt_len, 0, s.batch, **kw)
    ttft, decode_s = _generation_s(spec, hardware, s, pred, est)
    steps = s.gen_len - 1
    tpot = decode_s / steps if steps else None
    mid = forward_cost(spec, 1, s.prompt_len + max(0, steps - 1) // 2, s.batch, **kw)  # a typical step
    pre_dev, mid_dev = per_device(prefill_cost.to_dict(), spec, s.tp), per_device(mid.to_dict(), spec, s.tp)
    weights_mem, kv_mem, act_mem = device_memory(spec, s, est)
    need = weights_mem + kv_mem + act_mem
    capacity = hardware.memory_bytes
    per_seq = (kv_mem + act_mem) / s.batch
    room = capacity - weights_mem
    peak = pred.peak
    bandwidth = pred.bandwidth
    return {
        "model": spec.name, "hardware": hardware.name, "hardware_label": hardware.label,
        "settings": asdict(s),
        "params": spec.params_total, "active_params": spec.params_active,
        "experts_read_per_layer": mid.experts_read, "n_experts": spec.n_experts or None,
        "experts_per_token": spec.experts_per_token or None,
        "kv_bytes_per_token": est["kv_bytes_per_token"],
        "ttft_s": ttft, "tpot_s": tpot, "decode_s": decode_s, "total_s": ttft + decode_s,
        "tokens_per_s_per_sequence": 1.0 / tpot if tpot else None,
        "tokens_per_s_total": s.batch / tpot if tpot else None,
        "tp": s.tp,
        "interconnect": hardware.interconnect.name if hardware.interconnect else "no link",
        "kv_split": ("But this model caches one latent per layer that every head reads (multi-head latent "
                     "attention): each device keeps all of it, so the cache is copied, not split."
                     if spec.is_mla and s.tp > 1 else
                     "The KV cache is split too: its heads are divided between the devices."
                     if s.tp <= spec.n_kv_heads else
                     f"But this model has only {spec.n_kv_heads} KV heads: past {spec.n_kv_heads} devices each keeps "
                     "a whole head, so the cache is copied, not split, and each device's share stops shrinking."),
        "prefill": _operating_point(pred, pre_dev, "prefill",
                                    allreduce_s(spec, hardware, s.tp, s.batch * s.prompt_len, act_dt)),
        "decode_step": _operating_point(pred, mid_dev, "decode", allreduce_s(spec, hardware, s.tp, s.batch, act_dt)),
        "floors": {"prefill_s": pre_dev["flops"]["total"] / hardware.peak(s.compute_dtype),
                   "decode_step_s": (mid_dev["bytes"]["weights"] + mid_dev["bytes"]["kv_read"]
                                     + mid_dev["bytes"]["kv_write"]) / hardware.bandwidth},
        "memory": {"weights": weights_mem, "kv": kv_mem, "activations": act_mem, "total": need,
                   "capacity": capacity, "fits": need <= capacity, "shortfall": max(0, need - capacity),
                   "devices_needed": max(1, math.ceil(need * s.tp / capacity)),
                   "max_batch": max(0, min(MAX_BATCH, int(room // per_seq))) if per_seq > 0 and room > 0 else 0},
        "crossover_tokens": perf.crossover_tokens(mid_dev["bytes"]["weights"],
                                                  est["kv_bytes_per_token"] * kv_share(spec, s.tp), s.batch),
        "peak_flops_datasheet": hardware.peak(s.compute_dtype), "bandwidth_datasheet": hardware.bandwidth,
        "ridge_datasheet": hardware.peak(s.compute_dtype) / hardware.bandwidth,
        "ridge_effective": peak / bandwidth,
        "compute_bound_batch": perf.compute_bound_batch(spec, pred, s.prompt_len, s.weight_dtype, MAX_BATCH,
                                                        kv_dtype=s.kv_dtype, mla_form=s.mla_form),
        "per_extra_sequence_s": _per_extra_sequence(spec, pred, s),
        "flops_by_part": {"prefill": {k: prefill_cost.flops[k] for k in FLOP_PARTS},
                          "decode_step": {k: mid.flops[k] for k in FLOP_PARTS}},
        "assumptions": dict(s.assumptions),
        "source": hardware.source,
        "speculative": None if draft is None else speculative(spec, draft, hardware, s),
        "latent": latent_attention(spec, s, mid) if spec.is_mla else None,
        "host_measured": hardware.measured,
        "host_fit": _fit_words(pred) if hardware.measured else None,
    }


def _fit_words(pred: Predictor) -> str | None:
    """How this server's predictor got its coefficients, in words (None when unfitted)."""
    if not pred.fitted:
        return None
    info = pred.fit_info or {}
    source = info.get("transferred_from")
    c = pred.coef
    values = f"memory {c['memory']:.2f}, KV {c['kv']:.2f}, arithmetic {c['compute']:.2f}"
    if source:
        return f"fitted on {source}'s forwards on this server and carried over to this shape ({values})"
    return f"fitted on this model's own forwards on this server ({values})"


def latent_attention(spec: ModelSpec, s: Scenario, step) -> dict[str, Any]:
    """What multi-head latent attention saves and which form the answer prices: the cache per
    token against the multi-head cache the same heads would keep, and the typical decode step's
    FLOPs as a serving engine runs it (absorbed, what every other figure here uses) and as
    transformers runs it (re-expanding every cached position)."""
    full_heads = nbytes(spec.n_layers * spec.n_heads * (spec.head_dim + spec.v_head_dim), s.kv_dtype)
    forms = {form: forward_cost(spec, 1, step.n_cached, s.batch, **{**_kwargs(s), "mla_form": form})
             for form in ("serving", "transformers")}
    return {"kv_lora_rank": spec.kv_lora_rank, "rope_dim": spec.qk_rope_head_dim,
            "kv_bytes_per_token": nbytes(spec.n_layers * spec.kv_width, s.kv_dtype),
            "multi_head_bytes_per_token": full_heads, "priced_form": s.mla_form,
            "step_flops_serving": forms["serving"].flops["total"],
            "step_flops_transformers": forms["transformers"].flops["total"]}


def _operating_point(pred: Predictor, cost: dict[str, Any], phase: str, allreduce: float) -> dict[str, Any]:
    """One device's forward: predicted time (its all-reduces included, as their own term) and where
    it sits on the roofline."""
    parts = {**pred.contributions_s(cost, phase), "allreduce": allreduce}
    t = sum(parts.values())
    flops, nbytes_ = cost["flops"]["total"], cost["bytes"]["total"]
    return {"time_s": t, "flops": flops, "bytes": nbytes_, "intensity": flops / nbytes_ if nbytes_ else 0.0,
            "flops_per_s": flops / t if t > 0 else 0.0, "terms_s": parts,
            "n_new": cost["n_new"], "n_cached": cost["n_cached"]}


def _generation_s(spec: ModelSpec, hardware: HardwareSpec, s: Scenario, pred: Predictor,
                  est: dict[str, Any]) -> tuple[float, float]:
    """(TTFT, all decode steps) in seconds on tp devices: each device's share of the cost, plus
    the all-reduces of every forward."""
    act_dt = est["dtypes"]["activations"]
    prefill = per_device(forward_cost(spec, s.prompt_len, 0, s.batch, **_kwargs(s)).to_dict(), spec, s.tp)
    ttft = pred.predict_s(prefill, "prefill") + allreduce_s(spec, hardware, s.tp, s.batch * s.prompt_len, act_dt)
    decode = est["decode"]
    summed = per_device({"bytes": decode["bytes"], "flops": {**decode["flops_by_part"], "total": decode["flops"]},
                         "n_new": 1}, spec, s.tp)
    parts = {k: v for k, v in summed["flops"].items() if k != "total"}
    decode_s = decode_time_s(pred, {**decode, "bytes": summed["bytes"], "flops": summed["flops"]["total"],
                                    "flops_by_part": parts})
    decode_s += decode["steps"] * allreduce_s(spec, hardware, s.tp, s.batch, act_dt)
    return ttft, decode_s


def expected_tokens_per_round(gamma: int, alpha: float) -> float:
    """Tokens a verification round yields on average: the accepted prefix of the gamma draft tokens
    plus the one the target adds itself, (1 - alpha^(gamma+1)) / (1 - alpha), when each draft
    token is accepted independently with probability alpha."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speculative(target: ModelSpec, draft: ModelSpec, hardware: HardwareSpec, s: Scenario) -> dict[str, Any]:
    """Speculative decoding, priced: each round the draft decodes gamma tokens one by one, then the
    target checks all gamma + 1 positions in ONE forward. That forward reads the target's weights
    once, like a single decode step, so while decode is memory-bound it costs little more than one;
    the saving is that it can yield several tokens. Priced at the middle of the output's context."""
    s = s.resolved()
    if isinstance(s.spec_gamma, bool) or not isinstance(s.spec_gamma, int) or not 1 <= s.spec_gamma <= 32:
        raise ValueError(f"draft length must be a whole number from 1 to 32, got {s.spec_gamma!r}")
    if not 0.0 <= s.spec_alpha <= 1.0:
        raise ValueError(f"acceptance rate must be between 0 and 1, got {s.spec_alpha!r}")
    context = s.prompt_len + max(0, s.gen_len - 2) // 2
    if context + s.spec_gamma + 1 > min(target.max_positions, draft.max_positions):
        raise ValueError(f"{draft.name}'s or {target.name}'s context window is too short for this output")
    kw = _kwargs(s)
    target_pred, draft_pred = predictor(target, hardware, s), predictor(draft, hardware, s)
    act_dt = default_companion_dtype(s.weight_dtype)
    # the target is split over s.tp devices like plain decode; the small draft runs on one device
    step = forward_cost(target, 1, context, s.batch, **kw)
    verify = forward_cost(target, s.spec_gamma + 1, context, s.batch, **kw)
    draft_step = forward_cost(draft, 1, context, s.batch, **kw)
    t_step = (target_pred.predict_s(per_device(step.to_dict(), target, s.tp), "decode")
              + allreduce_s(target, hardware, s.tp, s.batch, act_dt))
    t_verify = (target_pred.predict_s(per_device(verify.to_dict(), target, s.tp), "decode")
                + allreduce_s(target, hardware, s.tp, s.batch * (s.spec_gamma + 1), act_dt))
    t_draft = draft_pred.predict_s(draft_step, "decode")
    tokens = expected_tokens_per_round(s.spec_gamma, s.spec_alpha)
    tpot = (s.spec_gamma * t_draft + t_verify) / tokens
    return {"draft": draft.name, "gamma": s.spec_gamma, "alpha": s.spec_alpha, "context": context,
            "expected_tokens_per_round": tokens, "draft_step_s": t_draft, "verify_s": t_verify,
            "plain_step_s": t_step, "verify_bytes_over_step_bytes": verify.bytes["total"] / step.bytes["total"],
            "verify_flops_over_step_flops": verify.flops["total"] / step.flops["total"],
            "tpot_s": tpot, "speedup": t_step / tpot}


def _per_extra_sequence(spec: ModelSpec, pred: Predictor, s: Scenario) -> dict[str, float]:
    """What one more sequence adds to a decode step at the prompt's context, by predicted term:
    its arithmetic, and its own cache reads (the weights are shared, so they add nothing)."""
    kw = _kwargs(s)
    one = pred.contributions_s(forward_cost(spec, 1, s.prompt_len, 1, **kw), "decode")
    two = pred.contributions_s(forward_cost(spec, 1, s.prompt_len, 2, **kw), "decode")
    return {k: two[k] - one[k] for k in ("compute", "kv", "memory")}


def batch_sweep(spec: ModelSpec, hardware: HardwareSpec, s: Scenario,
                batches: tuple[int, ...] = BATCH_SWEEP) -> list[dict[str, float | None]]:
    """TPOT, total tokens/s and memory against batch, the other settings fixed (the trade-off chart)."""
    s = on_hardware(s, hardware)
    pred = predictor(spec, hardware, s)
    out = []
    steps = s.gen_len - 1
    for b in batches:
        est = estimate(spec, s.prompt_len, s.gen_len, b, s.weight_dtype, s.kv_dtype, mla_form=s.mla_form)
        sb = replace(s, batch=b)
        tpot = _generation_s(spec, hardware, sb, pred, est)[1] / steps if steps else None
        need = sum(device_memory(spec, sb, est))
        out.append({"batch": b, "tpot_s": tpot, "tokens_per_s_total": b / tpot if tpot else None,
                    "memory_bytes": need, "fits": need <= hardware.memory_bytes})
    return out


def experts_by_batch(spec: ModelSpec, batches: tuple[int, ...] = BATCH_SWEEP) -> dict[str, list[float]]:
    """A mixture of experts' expected experts read per MoE layer by one decode step, against the
    batch (uniform routing, ModelSpec.experts_read); empty lists for a dense model."""
    if not spec.is_moe:
        return {"batch": [], "experts_read": []}
    return {"batch": list(batches), "experts_read": [spec.experts_read(b) for b in batches]}


def bytes_per_step_by_context(spec: ModelSpec, s: Scenario, points: int = 24) -> dict[str, list[float]]:
    """One decode step's weight bytes and KV bytes against the context it attends over (counted)."""
    s = s.resolved()
    kw = _kwargs(s)
    top = spec.max_positions
    contexts = sorted({max(1, round(top * k / (points - 1))) for k in range(points)})
    weights, kv = [], []
    for n in contexts:
        c = forward_cost(spec, 1, n - 1, s.batch, **kw)
        weights.append(c.bytes["weights"])
        kv.append(c.bytes["kv_read"] + c.bytes["kv_write"])
    return {"context": contexts, "weights": weights, "kv": kv}



HOST_PROMPTS = (4, 8, 16, 32, 64, 128, 192, 256, 384, 512)
HOST_CONTEXTS = (1, 16, 32, 64, 128, 256, 384, 512, 768, 1024)
HOST_BATCHES = (1, 2, 4, 8, 16, 32, 64)


def host_curves(spec: ModelSpec, hardware: HardwareSpec, s: Scenario,
                batch_context: int | None = None) -> dict[str, Any]:
    """The predicted lines the live page's measurements are set against on this server, forwards
    as the runner runs them: time to first token against prompt length (batch 1), one decode step
    against the context it attends over (batch 1), and one decode step against the batch at
    `batch_context` cached tokens (default: the scenario's prompt)."""
    s = on_hardware(s, hardware)
    pred = predictor(spec, hardware, s)
    kw = _kwargs(s)
    top = spec.max_positions
    prompts = [n for n in HOST_PROMPTS if n <= top]
    contexts = [n for n in HOST_CONTEXTS if n < top]
    at = min(batch_context or s.prompt_len, top - 1)
    return {
        "prompt": prompts,
        "ttft_s": [pred.predict_s(forward_cost(spec, n, 0, 1, **kw), "prefill") for n in prompts],
        "context": contexts,
        "decode_s": [pred.predict_s(forward_cost(spec, 1, n, 1, **kw), "decode") for n in contexts],
        "batch": list(HOST_BATCHES), "batch_context": at,
        "batch_decode_s": [pred.predict_s(forward_cost(spec, 1, at, b, **kw), "decode") for b in HOST_BATCHES],
        "fitted": pred.fitted, "transferred": bool((pred.fit_info or {}).get("transferred_from")),
    }

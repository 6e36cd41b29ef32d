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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from core import perf
from core.cost import FLOP_PARTS, estimate, forward_cost
from core.deployment import (  # noqa: F401 (the what-if page and its tests read them here too)
    BATCH_SWEEP,
    COMPUTE_DTYPES,
    EMBEDDED_PRESET,
    HOST_DTYPES,
    MAX_BATCH,
    MAX_TP,
    Scenario,
    activation_memory_bytes,
    allreduce_s,
    check,
    cost_kwargs,
    decode_time_s,
    device_memory,
    host_predictor,
    kv_blocks_available,
    kv_share,
    on_hardware,
    per_device,
    predictor,
    step_time_s,
    weight_memory_bytes,
)
from core.dtypes import default_companion_dtype, nbytes
from core.hardware import HardwareSpec
from core.predictor import Predictor
from core.spec import ModelSpec


@dataclass(frozen=True)
class OperatingPoint:
    """One device's forward: its predicted time (all-reduces included, as their own term), and where
    it sits on the roofline."""

    time_s: float
    flops: float
    bytes: float
    intensity: float  # FLOPs per byte
    flops_per_s: float
    terms_s: Mapping[str, float]  # the predictor's terms, "allreduce" among them
    n_new: int
    n_cached: int


@dataclass(frozen=True)
class Floors:
    """What the datasheet alone allows: the prefill's FLOPs at peak, a decode step's bytes at full bandwidth."""

    prefill_s: float
    decode_step_s: float


@dataclass(frozen=True)
class Memory:
    """Bytes per device (weights, the final KV cache, activations) against the device's memory."""

    weights: float
    kv: float
    activations: float
    total: float
    capacity: float
    fits: bool
    shortfall: float
    devices_needed: int
    max_batch: int  # the largest batch whose cache and activations fit beside the weights


@dataclass(frozen=True)
class ExtraSequence:
    """What one more sequence adds to a decode step, by predicted term (the weights add nothing)."""

    compute: float
    kv: float
    memory: float


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding priced beside plain decode (see `speculative`)."""

    draft: str
    gamma: int
    alpha: float
    context: int
    expected_tokens_per_round: float
    draft_step_s: float
    verify_s: float
    plain_step_s: float
    verify_bytes_over_step_bytes: float
    verify_flops_over_step_flops: float
    tpot_s: float
    speedup: float


@dataclass(frozen=True)
class Latent:
    """Multi-head latent attention: its cache per token against the multi-head cache the same heads
    would keep, and a typical decode step's FLOPs in the two forms (see `latent_attention`)."""

    kv_lora_rank: int
    rope_dim: int
    kv_bytes_per_token: int
    multi_head_bytes_per_token: int
    priced_form: str
    step_flops_serving: float
    step_flops_transformers: float


@dataclass(frozen=True)
class HostFit:
    """How this server's predictor got its coefficients: fitted on this model's forwards, or on
    `transferred_from`'s and carried over."""

    memory: float
    kv: float
    compute: float
    transferred_from: str | None = None


KV_SPLIT = ("split", "latent", "heads")  # how tensor parallelism shares the cache (Answer.kv_split)


@dataclass(frozen=True)
class Answer:
    """Every figure the what-if page shows for one setting, as numbers (seconds, bytes, FLOPs); the
    page words them."""

    model: str
    hardware: str
    hardware_label: str
    settings: Scenario  # resolved on the machine (compute dtype, efficiencies)
    params: int
    active_params: int
    experts_read_per_layer: float | None
    n_experts: int | None
    experts_per_token: int | None
    kv_bytes_per_token: int
    ttft_s: float
    # with a cached prefix, the same prompt's TTFT with nothing cached (None when nothing is cached)
    ttft_uncached_s: float | None
    tpot_s: float | None
    decode_s: float
    total_s: float
    tokens_per_s_per_sequence: float | None
    tokens_per_s_total: float | None
    tp: int
    interconnect: str
    # "split": the KV heads are divided between the devices; "latent": one latent every head reads,
    # copied to each device; "heads": fewer KV heads than devices, so past them heads are copied
    kv_split: str
    n_kv_heads: int
    prefill: OperatingPoint
    decode_step: OperatingPoint
    floors: Floors
    memory: Memory
    crossover_tokens: float | None
    peak_flops_datasheet: float
    bandwidth_datasheet: float
    ridge_datasheet: float
    ridge_effective: float
    compute_bound_batch: int | None
    per_extra_sequence_s: ExtraSequence
    flops_by_part: Mapping[str, Mapping[str, float]]  # "prefill", "decode_step": FLOPs by part
    assumptions: Mapping[str, float]
    source: str
    speculative: Speculative | None
    latent: Latent | None
    host_measured: bool
    host_fit: HostFit | None


def answer(spec: ModelSpec, hardware: HardwareSpec, scenario: Scenario,
           draft: ModelSpec | None = None) -> Answer:
    """Every figure the what-if page shows for one setting, as numbers (seconds, bytes).
    With a `draft` model, "speculative" prices speculative decoding beside plain decode."""
    s = on_hardware(scenario, hardware)
    check(spec, s)
    pred = predictor(spec, hardware, s)
    kw = cost_kwargs(s)
    est = estimate(spec, s.prompt_len, s.gen_len, s.batch, s.weight_dtype, s.kv_dtype, mla_form=s.mla_form)
    act_dt = est["dtypes"]["activations"]
    prefill_cost = forward_cost(spec, s.prefill_tokens, s.cached_prefix, s.batch, **kw)
    ttft, decode_s = _generation_s(spec, hardware, s, pred, est)
    ttft_uncached = (_ttft_s(spec, hardware, s, pred, est["dtypes"]["activations"], 0) if s.cached_prefix
                     else None)
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
    return Answer(
        model=spec.name, hardware=hardware.name, hardware_label=hardware.label,
        settings=s,
        params=spec.params_total, active_params=spec.params_active,
        experts_read_per_layer=mid.experts_read, n_experts=spec.n_experts or None,
        experts_per_token=spec.experts_per_token or None,
        kv_bytes_per_token=est["kv_bytes_per_token"],
        ttft_s=ttft, ttft_uncached_s=ttft_uncached, tpot_s=tpot, decode_s=decode_s, total_s=ttft + decode_s,
        tokens_per_s_per_sequence=1.0 / tpot if tpot else None,
        tokens_per_s_total=s.batch / tpot if tpot else None,
        tp=s.tp,
        interconnect=hardware.interconnect.name if hardware.interconnect else "no link",
        kv_split="latent" if spec.is_mla and s.tp > 1 else "split" if s.tp <= spec.n_kv_heads else "heads",
        n_kv_heads=spec.n_kv_heads,
        prefill=_operating_point(pred, pre_dev, "prefill",
                                 allreduce_s(spec, hardware, s.tp, s.batch * s.prefill_tokens, act_dt)),
        decode_step=_operating_point(pred, mid_dev, "decode", allreduce_s(spec, hardware, s.tp, s.batch, act_dt)),
        floors=Floors(prefill_s=pre_dev["flops"]["total"] / hardware.peak(s.compute_dtype),
                      decode_step_s=(mid_dev["bytes"]["weights"] + mid_dev["bytes"]["kv_read"]
                                     + mid_dev["bytes"]["kv_write"]) / hardware.bandwidth),
        memory=Memory(weights=weights_mem, kv=kv_mem, activations=act_mem, total=need,
                      capacity=capacity, fits=need <= capacity, shortfall=max(0, need - capacity),
                      devices_needed=max(1, math.ceil(need * s.tp / capacity)),
                      max_batch=max(0, min(MAX_BATCH, int(room // per_seq))) if per_seq > 0 and room > 0 else 0),
        crossover_tokens=perf.crossover_tokens(mid_dev["bytes"]["weights"],
                                               est["kv_bytes_per_token"] * kv_share(spec, s.tp), s.batch),
        peak_flops_datasheet=hardware.peak(s.compute_dtype), bandwidth_datasheet=hardware.bandwidth,
        ridge_datasheet=hardware.peak(s.compute_dtype) / hardware.bandwidth,
        ridge_effective=peak / bandwidth,
        compute_bound_batch=perf.compute_bound_batch(spec, pred, s.prompt_len, s.weight_dtype, MAX_BATCH,
                                                        kv_dtype=s.kv_dtype, mla_form=s.mla_form),
        per_extra_sequence_s=_per_extra_sequence(spec, pred, s),
        flops_by_part={"prefill": {k: prefill_cost.flops[k] for k in FLOP_PARTS},
                       "decode_step": {k: mid.flops[k] for k in FLOP_PARTS}},
        assumptions=dict(s.assumptions),
        source=hardware.source,
        speculative=None if draft is None else speculative(spec, draft, hardware, s),
        latent=latent_attention(spec, s, mid) if spec.is_mla else None,
        host_measured=hardware.measured,
        host_fit=_host_fit(pred) if hardware.measured else None,
    )


def _host_fit(pred: Predictor) -> HostFit | None:
    """How this server's predictor got its coefficients (None when unfitted)."""
    if not pred.fitted:
        return None
    c = pred.coef
    return HostFit(memory=c["memory"], kv=c["kv"], compute=c["compute"],
                   transferred_from=(pred.fit_info or {}).get("transferred_from"))


def latent_attention(spec: ModelSpec, s: Scenario, step) -> Latent:
    """What multi-head latent attention saves and which form the answer prices: the cache per
    token against the multi-head cache the same heads would keep, and the typical decode step's
    FLOPs as a serving engine runs it (absorbed, what every other figure here uses) and as
    transformers runs it (re-expanding every cached position)."""
    full_heads = nbytes(spec.n_layers * spec.n_heads * (spec.head_dim + spec.v_head_dim), s.kv_dtype)
    forms = {form: forward_cost(spec, 1, step.n_cached, s.batch, **{**cost_kwargs(s), "mla_form": form})
             for form in ("serving", "transformers")}
    return Latent(kv_lora_rank=spec.kv_lora_rank, rope_dim=spec.qk_rope_head_dim,
                  kv_bytes_per_token=nbytes(spec.n_layers * spec.kv_width, s.kv_dtype),
                  multi_head_bytes_per_token=full_heads, priced_form=s.mla_form,
                  step_flops_serving=forms["serving"].flops["total"],
                  step_flops_transformers=forms["transformers"].flops["total"])


def _operating_point(pred: Predictor, cost: dict[str, Any], phase: str, allreduce: float) -> OperatingPoint:
    """One device's forward: predicted time (its all-reduces included, as their own term) and where
    it sits on the roofline."""
    parts = {**pred.contributions_s(cost, phase), "allreduce": allreduce}
    t = sum(parts.values())
    flops, nbytes_ = cost["flops"]["total"], cost["bytes"]["total"]
    return OperatingPoint(time_s=t, flops=flops, bytes=nbytes_, intensity=flops / nbytes_ if nbytes_ else 0.0,
                          flops_per_s=flops / t if t > 0 else 0.0, terms_s=parts,
                          n_new=cost["n_new"], n_cached=cost["n_cached"])


def _ttft_s(spec: ModelSpec, hardware: HardwareSpec, s: Scenario, pred: Predictor, act_dt: str,
            cached: int) -> float:
    """The prefill of the prompt's last prompt_len - `cached` tokens over `cached` ones already in the
    cache, on tp devices, with its all-reduces."""
    new = s.prompt_len - cached
    prefill = per_device(forward_cost(spec, new, cached, s.batch, **cost_kwargs(s)).to_dict(), spec, s.tp)
    return pred.predict_s(prefill, "prefill") + allreduce_s(spec, hardware, s.tp, s.batch * new, act_dt)


def _generation_s(spec: ModelSpec, hardware: HardwareSpec, s: Scenario, pred: Predictor,
                  est: dict[str, Any]) -> tuple[float, float]:
    """(TTFT, all decode steps) in seconds on tp devices: each device's share of the cost, plus
    the all-reduces of every forward."""
    act_dt = est["dtypes"]["activations"]
    ttft = _ttft_s(spec, hardware, s, pred, act_dt, s.cached_prefix)
    decode = est["decode"]
    summed = per_device({"bytes": decode["bytes"], "flops": {**decode["flops_by_part"], "total": decode["flops"]},
                         "n_new": 1, "row_flops": decode.get("row_flops", 0)}, spec, s.tp)
    parts = {k: v for k, v in summed["flops"].items() if k != "total"}
    decode_s = decode_time_s(pred, {**decode, "bytes": summed["bytes"], "flops": summed["flops"]["total"],
                                    "flops_by_part": parts, "row_flops": summed["row_flops"]}, s.batch)
    decode_s += decode["steps"] * allreduce_s(spec, hardware, s.tp, s.batch, act_dt)
    return ttft, decode_s


def expected_tokens_per_round(gamma: int, alpha: float) -> float:
    """Tokens a verification round yields on average: the accepted prefix of the gamma draft tokens
    plus the one the target adds itself, (1 - alpha^(gamma+1)) / (1 - alpha), when each draft
    token is accepted independently with probability alpha."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speculative(target: ModelSpec, draft: ModelSpec, hardware: HardwareSpec, s: Scenario) -> Speculative:
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
    kw = cost_kwargs(s)
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
    return Speculative(draft=draft.name, gamma=s.spec_gamma, alpha=s.spec_alpha, context=context,
                       expected_tokens_per_round=tokens, draft_step_s=t_draft, verify_s=t_verify,
                       plain_step_s=t_step, verify_bytes_over_step_bytes=verify.bytes["total"] / step.bytes["total"],
                       verify_flops_over_step_flops=verify.flops["total"] / step.flops["total"],
                       tpot_s=tpot, speedup=t_step / tpot)


def _per_extra_sequence(spec: ModelSpec, pred: Predictor, s: Scenario) -> ExtraSequence:
    """What one more sequence adds to a decode step at the prompt's context, by predicted term:
    its arithmetic, and its own cache reads (the weights are shared, so they add nothing)."""
    kw = cost_kwargs(s)
    one = pred.contributions_s(forward_cost(spec, 1, s.prompt_len, 1, **kw), "decode")
    two = pred.contributions_s(forward_cost(spec, 1, s.prompt_len, 2, **kw), "decode")
    return ExtraSequence(**{k: two[k] - one[k] for k in ("compute", "kv", "memory")})


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
    kw = cost_kwargs(s)
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
    kw = cost_kwargs(s)
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

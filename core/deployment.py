"""Pricing a deployment: one model on one machine (or `tp` linked devices) at one setting.

What every consumer of a setting needs, whichever page or tool asks: the settings themselves
(`Scenario`) and their checks, the predictor for a machine (datasheet presets, or this server's own
fit), a batched iteration's time (`step_time_s`), the memory a model and its cache take on each
device, tensor parallelism's split and all-reduces, and the KV blocks left for a serving engine.
The what-if page's answer (core.whatif), the serving simulator (core.sim) and `core estimate` are
built on it; none of them prices a deployment on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from core.cost import step_cost
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
    # the prompt's leading tokens already in the cache (a follow-up, a shared system prompt kept by the
    # server): the prefill computes only the rest, and reads the cached part's keys and values once
    cached_prefix: int = 0

    def resolved(self) -> Scenario:
        """The same settings with every dtype normalised and every default filled in."""
        w = normalize_dtype(self.weight_dtype)
        kv = normalize_dtype(self.kv_dtype) if self.kv_dtype else default_companion_dtype(w)
        compute = normalize_dtype(self.compute_dtype) if self.compute_dtype else ("bf16" if w == "int4" else w)
        if compute not in COMPUTE_DTYPES:
            raise ValueError(f"compute dtype {compute} has no matmul peak; pick one of {', '.join(COMPUTE_DTYPES)}")
        return Scenario(self.batch, self.prompt_len, self.gen_len, w, kv, compute,
                        {**PRESET_ASSUMPTIONS, **self.assumptions}, self.spec_gamma, self.spec_alpha, self.tp,
                        self.mla_form, self.cached_prefix)

    @property
    def prefill_tokens(self) -> int:
        """The prompt tokens the prefill computes: those not already cached."""
        return self.prompt_len - self.cached_prefix


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
    if (isinstance(s.cached_prefix, bool) or not isinstance(s.cached_prefix, int)
            or not 0 <= s.cached_prefix < s.prompt_len):
        raise ValueError(f"cached prefix tokens must be a whole number from 0 to the prompt length less one "
                         f"({s.prompt_len - 1:,}): at least one prompt token is computed, got {s.cached_prefix!r}")
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


def cost_kwargs(s: Scenario) -> dict[str, Any]:
    # datasheet machines run serving engines (latent attention takes the cheaper form per row);
    # this server runs transformers, which re-expands the latent
    return {"weight_dtype": s.weight_dtype, "kv_dtype": s.kv_dtype, "lm_head_tokens": 1, "mla_form": s.mla_form}


def decode_time_s(pred: Predictor, decode: dict[str, Any], batch: int = 1) -> float:
    """Predicted time of all decode steps from their summed cost (core.cost.estimate's "decode"), each
    step `batch` rows (the rows a calibrated CPU's arithmetic is priced at)."""
    steps = decode["steps"]
    if steps == 0:
        return 0.0
    summed = {"bytes": decode["bytes"], "flops": {**decode["flops_by_part"], "total": decode["flops"]}, "n_new": 1,
              "batch": batch, "row_flops": decode.get("row_flops", 0)}
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
    return {**cost, "bytes": b, "flops": flops, "row_flops": cost.get("row_flops", 0) / tp}


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
    cost = step_cost(spec, rows, **cost_kwargs(s))
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

"""Cost and predicted time of a whole generation without running a model (`python -m core estimate`).

Decode is priced at every step (step i runs over prompt_len + i - 1 cached tokens, so the growing
cache is priced as it grows, not at its final length), summed in closed form by the same
core.deployment.decode_time_s the what-if page uses: one timer for a whole generation.
"""

from __future__ import annotations

from typing import Any

from core.cost import estimate, forward_cost
from core.deployment import decode_time_s
from core.dtypes import default_companion_dtype, normalize_dtype
from core.predictor import predictor_for
from core.spec import load_model_preset


def estimate_run(model: str, hardware: str, prompt_len: int, gen_len: int, batch: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, measure: bool = False,
                 tp: int = 1) -> dict[str, Any]:
    """The whole generation's cost and predicted time; `measure` lets "host" be calibrated now.

    `tp` > 1 splits the model over that many devices of a datasheet preset (core.whatif prices the
    split and its all-reduces); the times are then per device, and "fits" is per device too. A
    model that does not fit is still priced: "fits" is False and "shortfall_bytes" says by how much.
    A latent-attention model is priced in the form its machine would run (core.cost.MLA_FORMS):
    transformers' on "host", a serving engine's on a datasheet preset; "mla_form" says which.
    """
    if prompt_len < 1 or gen_len < 1 or batch < 1:
        raise ValueError("--prompt-len, --gen-len and --batch must be at least 1")
    spec = load_model_preset(model)
    if prompt_len + gen_len - 1 > spec.max_positions:
        raise ValueError(f"prompt-len + gen-len - 1 = {prompt_len + gen_len - 1} exceeds {spec.name}'s "
                         f"context window of {spec.max_positions}")
    w_dt = normalize_dtype(dtype)
    kv_dt = normalize_dtype(kv_dtype) if kv_dtype else default_companion_dtype(w_dt)
    # latent attention runs as this project's runner runs it on "host", as serving engines do elsewhere
    mla_form = "transformers" if hardware == "host" else "serving"
    result = estimate(spec, prompt_len, gen_len, batch, w_dt, kv_dt, mla_form=mla_form)
    pred = predictor_for(spec, hardware, w_dt, measure=measure)
    kwargs = {"weight_dtype": w_dt, "kv_dtype": kv_dt, "lm_head_tokens": 1, "mla_form": mla_form}
    prefill_cost = forward_cost(spec, prompt_len, 0, batch, **kwargs)
    result["prefill"]["time_s"] = pred.predict_s(prefill_cost, "prefill")
    result["prefill"]["intensity"] = prefill_cost.intensity
    steps = gen_len - 1
    decode_time = decode_time_s(pred, result["decode"])
    result["decode"]["time_s"] = decode_time
    result["decode"]["tpot_s"] = decode_time / steps if steps else None
    result["ttft_s"] = result["prefill"]["time_s"]
    result["total_s"] = result["prefill"]["time_s"] + decode_time
    result["model"] = spec.name
    result["hardware"] = hardware
    result["batch"] = batch
    result["predictor"] = pred.describe()
    result["tp"] = tp
    _add_fit(result, spec, hardware, prompt_len, gen_len, batch, w_dt, kv_dt, tp, measure)
    return result


def _add_fit(result: dict[str, Any], spec: Any, hardware: str, prompt_len: int, gen_len: int, batch: int,
             w_dt: str, kv_dt: str, tp: int, measure: bool) -> None:
    """Memory against the device ("fits", "shortfall_bytes"), and for tp > 1 the split times."""
    from core import deployment, whatif
    from core.calibrate import resolve_hardware

    if tp != 1 and hardware == "host":
        raise ValueError("--tp needs a datasheet preset: 'host' is this one machine")
    hw = resolve_hardware(hardware, measure=measure)
    scenario = deployment.Scenario(batch=batch, prompt_len=prompt_len, gen_len=gen_len, weight_dtype=w_dt,
                               kv_dtype=kv_dt, tp=tp)
    if hardware == "host":  # the host's times stay the calibrated predictor's; only its memory is checked
        a = default_companion_dtype(w_dt)
        need = (deployment.weight_memory_bytes(spec, w_dt, a) + result["kv_bytes_final"]
                + deployment.activation_memory_bytes(spec, batch, prompt_len, a))
        result["memory_bytes"], result["fits"] = need, need <= hw.memory_bytes
        result["shortfall_bytes"] = max(0, need - hw.memory_bytes)
        return
    ans = whatif.answer(spec, hw, scenario)
    m = ans.memory
    result["memory_bytes"], result["fits"], result["shortfall_bytes"] = m.total, m.fits, m.shortfall
    if tp > 1:
        result["ttft_s"] = result["prefill"]["time_s"] = ans.ttft_s
        result["decode"]["time_s"], result["decode"]["tpot_s"] = ans.decode_s, ans.tpot_s
        result["total_s"] = ans.total_s
        result["allreduce_s_per_decode_step"] = ans.decode_step.terms_s["allreduce"]

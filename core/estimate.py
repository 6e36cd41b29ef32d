"""Cost and predicted time of a whole generation without running a model (`python -m core estimate`).

Decode is integrated step by step: step i runs over prompt_len + i - 1 cached tokens, so the growing
cache is priced at every step rather than at its final length.
"""

from __future__ import annotations

from typing import Any

from core.cost import estimate, forward_cost
from core.dtypes import default_companion_dtype, normalize_dtype
from core.predictor import predictor_for
from core.spec import load_model_preset


def estimate_run(model: str, hardware: str, prompt_len: int, gen_len: int, batch: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, measure: bool = False) -> dict[str, Any]:
    """The whole generation's cost and predicted time; `measure` lets "host" be calibrated now."""
    if prompt_len < 1 or gen_len < 1 or batch < 1:
        raise ValueError("--prompt-len, --gen-len and --batch must be at least 1")
    spec = load_model_preset(model)
    if prompt_len + gen_len - 1 > spec.max_positions:
        raise ValueError(f"prompt-len + gen-len - 1 = {prompt_len + gen_len - 1} exceeds {spec.name}'s "
                         f"context window of {spec.max_positions}")
    w_dt = normalize_dtype(dtype)
    kv_dt = normalize_dtype(kv_dtype) if kv_dtype else default_companion_dtype(w_dt)
    result = estimate(spec, prompt_len, gen_len, batch, w_dt, kv_dt)
    pred = predictor_for(spec, hardware, w_dt, measure=measure)
    kwargs = {"weight_dtype": w_dt, "kv_dtype": kv_dt, "lm_head_tokens": 1}
    prefill_cost = forward_cost(spec, prompt_len, 0, batch, **kwargs)
    result["prefill"]["time_s"] = pred.predict_s(prefill_cost, "prefill")
    result["prefill"]["intensity"] = prefill_cost.intensity
    steps = gen_len - 1
    decode_time = 0.0
    for i in range(1, gen_len):
        decode_time += pred.predict_s(forward_cost(spec, 1, prompt_len + i - 1, batch, **kwargs), "decode")
    result["decode"]["time_s"] = decode_time
    result["decode"]["tpot_s"] = decode_time / steps if steps else None
    result["ttft_s"] = result["prefill"]["time_s"]
    result["total_s"] = result["prefill"]["time_s"] + decode_time
    result["model"] = spec.name
    result["hardware"] = hardware
    result["batch"] = batch
    result["predictor"] = pred.describe()
    return result
